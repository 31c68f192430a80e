"""The estimate: phases on one device against its memory, the host per node, and what would fit.

``fits`` is false when any phase's peak exceeds the usable device memory, or the rollout engine's
budget leaves less KV cache than one ``max_model_len`` sequence needs (vLLM refuses to start).
``needs`` is the smallest change found that fits: memory features first (the OOM ladder's order),
then knob changes (gpu_memory_utilization, the token budget, the micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_deploy import features as registry
from verl_deploy.memory import terms as t
from verl_deploy.memory.device_memory import DeviceMemory
from verl_deploy.memory.model import ModelShape
from verl_deploy.memory.phases import kv_room, phase_terms, pool_of
from verl_deploy.memory.setup import Setup

HEADROOM = 0.0  # fragmentation is a term of the training phases now (terms.fragmentation); the limit is the usable memory
HOST_BASE_GB_PER_DEVICE = 4.0  # a Ray worker with torch and the engine, before any offload
# feature knob -> Setup field(s), to ask "would this feature make it fit?"
KNOB_FIELDS = {
    "param_offload": ("param_offload",), "ref_param_offload": ("ref_param_offload",), "grad_offload": ("grad_offload",),
    "optimizer_offload": ("optimizer_offload",), "recompute_granularity": ("recompute",),
    "recompute_method": ("recompute_method",), "recompute_num_layers": ("recompute_layers",),
    "gradient_checkpointing": ("gradient_checkpointing",),
}
# the OOM ladder's order, from the one place that says it
MEMORY_FEATURES = registry.OOM_LADDERS


@dataclass
class MemoryEstimate:
    device: DeviceMemory
    phases: dict[str, dict[str, t.Term]]
    kv_left: t.Term
    kv_needed: t.Term
    host_gb_per_node: float
    host_total_gb: float | None
    needs: list[str] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)  # knob changes alone that would fit
    assumptions: list[str] = field(default_factory=list)
    observed: dict[str, str] = field(default_factory=dict)  # phase -> what the calibration log says
    model: str = ""
    layout: str = ""
    lengths: "LengthOutlook | None" = None  # typical vs worst case, and the response length where it stops fitting
    seen_ran: str = ""  # a clean run of this very configuration in the calibration log (then it fits)
    seen_peak_gb: float | None = None  # the device peak that run's log printed
    phase_pool: dict[str, str] = field(default_factory=dict)  # phase -> "shared" | "trainer" | "rollout"
    pool_devices: dict[str, int] = field(default_factory=dict)  # pool -> devices per node
    tolerated: tuple[str, ...] = ()  # over at the worst step but fit at the typical one (the verdict is the typical)
    worst_needs: list[str] = field(default_factory=list)  # what the worst step needs (dynamic batching first)

    @property
    def limit_gb(self) -> float:
        return self.device.usable_gb * (1 - HEADROOM)

    def phase_gb(self, name: str) -> float:
        return sum(term.gb for term in self.phases[name].values())

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_gb)

    @property
    def peak_gb(self) -> float:
        return self.phase_gb(self.peak_phase)

    @property
    def kv_fits(self) -> bool:
        return self.kv_left.bytes >= self.kv_needed.bytes

    def worst_over(self) -> list[str]:
        """Phases over the limit at the worst step (every sequence at its maximum length), the calibration aside."""
        found = [p for p in self.phases if self.phase_gb(p) > self.limit_gb]
        if not self.kv_fits and "rollout" not in found:
            found.append("rollout")
        return found

    def over(self) -> list[str]:
        """Phases over the limit (estimated or seen in the calibration log); a phase that fits at the typical step
        is not over (the worst step is reported apart, with the response length where it starts to OOM)."""
        estimated = [] if self.seen_ran else [p for p in self.worst_over() if p not in self.tolerated]
        return estimated + [p for p in self.observed if p not in estimated]

    def pool(self, phase: str) -> str:
        return self.phase_pool.get(phase, "shared")

    def pools(self) -> dict[str, dict]:
        """Each pool's devices per node, phases, peak and verdict: one "shared" pool when colocated, else the trainer
        pool and the rollout pool, each sized on its own devices."""
        found: dict[str, dict] = {}
        over = self.over()
        for phase in self.phases:
            entry = found.setdefault(self.pool(phase), {"devices_per_node": self.pool_devices.get(self.pool(phase)),
                                                        "phases": [], "peak_gb": 0.0, "fits": True})
            entry["phases"].append(phase)
            entry["peak_gb"] = round(max(entry["peak_gb"], self.phase_gb(phase)), 2)
            entry["fits"] = entry["fits"] and phase not in over
        return found

    @property
    def fits(self) -> bool:
        return not self.over()

    @property
    def host_fits(self) -> bool | None:
        return None if self.host_total_gb is None else self.host_gb_per_node <= self.host_total_gb * 0.9

    def explain(self) -> list[dict]:
        """Each phase's terms, largest first, with the formula and where it comes from (plan --explain-memory)."""
        found = []
        for name, terms in self.phases.items():
            rows = [{"term": k, "gb": round(v.gb, 3), "formula": v.formula, "source": v.source}
                    for k, v in sorted(terms.items(), key=lambda kv: -kv[1].bytes)]
            found.append({"phase": name, "pool": self.pool(name), "gb": round(self.phase_gb(name), 2),
                          "limit_gb": round(self.limit_gb, 2),
                          "over": name in self.over(), "terms": rows, "observed": self.observed.get(name)})
        return found

    def to_dict(self) -> dict:
        phases: dict[str, dict] = {name: {"gb": round(self.phase_gb(name), 2),
                         "terms": {k: {"gb": round(v.gb, 2), "formula": v.formula, "source": v.source}
                                   for k, v in terms.items()}}
                  for name, terms in self.phases.items()}
        phases["rollout"]["terms"]["kv_cache_left"] = {"gb": round(self.kv_left.gb, 2), "formula": self.kv_left.formula,
                                                       "source": self.kv_left.source}
        phases["rollout"]["terms"]["kv_cache_needed"] = {"gb": round(self.kv_needed.gb, 2),
                                                         "formula": self.kv_needed.formula, "source": self.kv_needed.source}
        return {
            "device_gb": round(self.device.total_gb, 2), "usable_gb": round(self.device.usable_gb, 2),
            "limit_gb": round(self.limit_gb, 2), "peak_gb": round(self.peak_gb, 2), "peak_phase": self.peak_phase,
            "fits": self.fits, "over": self.over(), "phases": phases,
            "host_gb_per_node": round(self.host_gb_per_node, 1),
            "host_total_gb": None if self.host_total_gb is None else round(self.host_total_gb, 1),
            "host_fits": self.host_fits, "needs": list(self.needs),
            "alternatives": list(self.alternatives), "assumptions": list(self.assumptions),
            "model": self.model, "layout": self.layout,
            "observed": dict(self.observed),  # phase -> the calibration lesson that applied (which run, when)
            "lengths": None if self.lengths is None else self.lengths.to_dict(),
            "worst_over": self.worst_over(), "worst_needs": list(self.worst_needs), "pools": self.pools(),
            "seen_ran": self.seen_ran or None,  # the calibration log's clean run of this configuration
            "seen_peak_gb": self.seen_peak_gb,
        }


@dataclass(frozen=True)
class LengthOutlook:
    """The step at the response length a run typically reaches vs the worst step, and where it stops fitting.

    Fixed micro-batches hold micro x (prompt + response) tokens: a step with the typical response length
    needs less than the worst one, where every response is at the maximum. Dynamic batching balances the
    rank's sequences over as many micro-batches as its token budget asks for: once the rank's share exceeds
    the budget the micro-batches stay near it whatever the responses are (``budget_bound``), below it they
    hold the share, which grows with the responses like fixed micro-batches.
    """
    max_response_len: int
    typical_response_len: int
    typical_peak_gb: float
    typical_fits: bool
    worst_peak_gb: float
    worst_fits: bool
    oom_response_len: int | None  # the shortest response length at which a phase no longer fits; None: never
    budget_bound: bool  # dynamic batching: the budget, not the response length, sizes the training phases
    assumed: str  # where typical_response_len came from
    typical_prompt_len: int = 0  # the prompt length of the typical step (and of the bisection)
    dynamic: bool = False  # dynamic batching is on (the worst step needs a smaller budget or a feature, not it)

    def to_dict(self) -> dict:
        return {"max_response_len": self.max_response_len, "typical_response_len": self.typical_response_len,
                "typical_prompt_len": self.typical_prompt_len,
                "typical_peak_gb": round(self.typical_peak_gb, 2), "typical_fits": self.typical_fits,
                "worst_peak_gb": round(self.worst_peak_gb, 2), "worst_fits": self.worst_fits,
                "oom_response_len": self.oom_response_len, "budget_bound": self.budget_bound,
                "assumed": self.assumed, "dynamic": self.dynamic}


TYPICAL_SHARE = 0.5  # of the maximum prompt and response lengths, when the spec does not say the expected response


def typical_lengths(s: Setup) -> tuple[int, int, str]:
    """(prompt, response, where they came from) of the typical step."""
    if s.padded:  # verl pads every sequence to the maximum: each step is the worst one
        return s.prompt_len, s.response_len, "FSDP without remove-padding pads every sequence to the maximum length"
    prompt = max(1, int(s.prompt_len * TYPICAL_SHARE))
    if s.expected_response_len:
        return prompt, max(1, s.expected_response_len), ("expected_response_length from the spec; prompts at half "
                                                         "their maximum")
    # one sequence per micro-batch: the step's longest response sizes it, whatever the mean
    single = not (s.dynamic_bsz or s.log_prob_dynamic_bsz) and s.micro_batch == 1 and s.log_prob_micro_batch == 1
    return prompt, max(1, int(s.response_len * TYPICAL_SHARE)), (
        "half the maximum prompt and response lengths" + ("" if single else
                                                         " (set expected_response_length to the run's "
                                                         "response_length/mean)"))


def length_outlook(m: ModelShape, s: Setup, device: DeviceMemory) -> LengthOutlook:
    """Typical and worst case by response length, and the shortest length that no longer fits (bisection with the
    prompts at their typical length: each term grows with the response length, so the first length over is the
    boundary)."""
    from dataclasses import replace

    prompt, typical_len, assumed = typical_lengths(s)

    def at(length: int) -> MemoryEstimate:
        return build(m, replace(s, prompt_len=prompt, response_len=length), device, None)

    worst = build(m, s, device, None)
    typical_setup = replace(s, prompt_len=prompt, response_len=typical_len)
    # a step's peak is its largest micro-batch's: with fixed micro-batches that is the one holding the step's longest
    # response, which reaches the maximum in most steps (verl logs the share as response_length/clip_ratio)
    typical = worst if s.padded else build(m, replace(typical_setup, longest_response_len=s.response_len), device,
                                           None)
    oom: int | None = None
    if not worst.fits:
        low, high = 1, s.response_len
        if not at(low).fits:
            oom = 0
        elif at(high).fits:
            oom = None  # the prompts' maximum is what does not fit, not the responses
        else:
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if at(middle).fits else (low, middle)
            oom = high
    bound = s.dynamic_bsz and (t.tokens_per_device(typical_setup, log_prob=False)[0]
                               >= t.tokens_per_device(s, log_prob=False)[0])
    return LengthOutlook(s.response_len, typical_len, typical.peak_gb, typical.fits, worst.peak_gb, worst.fits, oom,
                         bound, assumed, prompt, s.dynamic_bsz)


def host_gb_per_node(m: ModelShape, s: Setup) -> float:
    """Host memory per node: the offloaded state of its trainer devices, the sleeping engine's
    weights, a base per worker, and (FSDP) the whole model in fp32 while it is loaded."""
    per_device = HOST_BASE_GB_PER_DEVICE * t.GIB
    if s.param_offload:
        per_device += t.actor_params(m, s).bytes
    if s.optimizer_offload:
        per_device += t.optimizer_states(m, s).bytes
    if s.framework == "megatron":
        if s.optimizer_offload_fraction > 0:  # Megatron's hybrid optimizer steps on the CPU: fp32 master,
            # Adam m and v, and the fp32 gradients copied over for the step (16 B/param)
            full = t.megatron_shard_params(m, s) * 16 / (s.dp if s.distributed_optimizer else 1)
            per_device += full * min(1.0, s.optimizer_offload_fraction)
        if s.grad_offload:
            per_device += t.gradients(m, s).bytes
    if s.ref_loaded and s.ref_param_offload:
        per_device += t.ref_params(m, s).bytes
    if s.critic and (s.critic_param_offload or s.critic_optimizer_offload):  # the critic's offloaded state
        per_device += t.critic_state(m, s, params=s.critic_param_offload, grads=False,
                                     optimizer=s.critic_optimizer_offload).bytes
    if s.colocated and s.free_cache_engine and s.device == "npu":
        per_device += t.rollout_weights(m, s).bytes  # vllm-ascend sleeps at level 1: weights wait in host memory
    steady = per_device * s.devices_per_node
    if not s.colocated:  # the rollout pool's workers on the same nodes
        steady += HOST_BASE_GB_PER_DEVICE * t.GIB * s.rollout_devices_per_node
    loading = m.params() * 4 if s.framework == "fsdp" else 0  # global rank 0 builds the fp32 model (the head node)
    return (steady + loading) / t.GIB


def memory_features_on(s: Setup) -> set[str]:
    on = set()
    if s.param_offload and s.optimizer_offload:
        on.add("offload")
    if s.recompute == "full":
        on.add("recompute")
    if s.gradient_checkpointing:
        on.add("gradient_checkpointing")
    return on


def with_features(s: Setup, names: list[str]) -> Setup:
    changes: dict = {}
    for name in names:
        for knob, value in registry.BY_NAME[name].on.items():
            for field_name in KNOB_FIELDS.get(knob, ()):
                changes[field_name] = value
    return s.with_(**changes)


def build(m: ModelShape, s: Setup, device: DeviceMemory, host_total_gb: float | None) -> MemoryEstimate:
    kv_left, kv_needed = kv_room(m, s, device.usable_gb)
    phases = phase_terms(m, s, device.usable_gb)
    devices = ({"shared": s.devices_per_node} if s.colocated else
               {"trainer": s.devices_per_node, "rollout": s.rollout_devices_per_node})
    return MemoryEstimate(device=device, phases=phases, kv_left=kv_left,
                          kv_needed=kv_needed, host_gb_per_node=host_gb_per_node(m, s), host_total_gb=host_total_gb,
                          model=m.name, layout=s.layout(), phase_pool={p: pool_of(s, p) for p in phases},
                          pool_devices=devices)


def only_the_rollout_pool(s: Setup, over: list[str]) -> bool:
    """A split mode whose trainer pool fits: memory features (trainer-side) cannot help, the engine's knobs can."""
    return not s.colocated and bool(over) and all(pool_of(s, p) == "rollout" for p in over)


def find_needs(m: ModelShape, s: Setup, device: DeviceMemory, required: list[str] | None = None) -> list[str]:
    """The smallest change that fits: features (ladder order), then knobs. Empty if nothing found."""
    if only_the_rollout_pool(s, build(m, s, device, None).over()):
        knobs, fits = knob_changes(m, s, device)
        return knobs if fits else knobs + ["more rollout devices or a larger rollout TP (the rollout pool does not "
                                           "fit with any gpu_memory_utilization)"]
    ladder = [f for f in MEMORY_FEATURES[s.framework] if f not in memory_features_on(s)]
    required = [f for f in (required or []) if f in ladder]
    options = [required] + [required + [f] for f in ladder if f not in required] + [required + ladder]
    for names in options:
        trial = with_features(s, list(dict.fromkeys(names)))
        if build(m, trial, device, None).fits:
            return list(dict.fromkeys(names))
    features = list(dict.fromkeys(required + ladder))
    knobs, fits = knob_changes(m, with_features(s, features), device)
    if not fits:
        return features + knobs + ["more devices or a larger TP/PP (no feature or knob change fits)"]
    return features + knobs


def find_alternative(m: ModelShape, s: Setup, device: DeviceMemory) -> list[str]:
    """Knob changes alone (no new feature) that fit, or [] when there are none."""
    knobs, fits = knob_changes(m, s, device)
    return knobs if fits and knobs else []


def knob_changes(m: ModelShape, s: Setup, device: DeviceMemory) -> tuple[list[str], bool]:
    """Lower gpu_memory_utilization for the rollout, halve the token budget (not below one sequence)
    or drop the micro-batch to 1 for log-prob and the update: (the changes, whether it then fits)."""
    trial, knobs = s, []
    estimate = build(m, trial, device, None)
    if "rollout" in estimate.over():
        gmu = _best_utilization(m, trial, device)
        if gmu is not None:
            trial = trial.with_(gpu_memory_utilization=gmu)
            knobs.append(f"gpu_memory_utilization={gmu:g}")
            estimate = build(m, trial, device, None)
    split = trial.sp if trial.framework == "fsdp" else trial.cp
    floor = -(-(trial.prompt_len + trial.response_len) // split)
    for _ in range(8):
        if not ({"actor_update", "log_prob"} & set(estimate.over())):
            break
        if trial.dynamic_bsz and trial.max_token_len // 2 >= floor:
            trial = trial.with_(max_token_len=trial.max_token_len // 2,
                                log_prob_max_token_len=min(trial.log_prob_max_token_len, trial.max_token_len // 2))
        elif not trial.dynamic_bsz and (trial.micro_batch > 1 or trial.log_prob_micro_batch > 1):
            trial = trial.with_(micro_batch=1, log_prob_micro_batch=1)
        else:
            break
        estimate = build(m, trial, device, None)
    if trial.max_token_len != s.max_token_len:
        knobs.append(f"ppo_max_token_len_per_gpu={trial.max_token_len}")
    if trial.log_prob_max_token_len != s.log_prob_max_token_len:
        knobs.append(f"log_prob_max_token_len_per_gpu={trial.log_prob_max_token_len}")
    if trial.micro_batch != s.micro_batch or trial.log_prob_micro_batch != s.log_prob_micro_batch:
        knobs.append("ppo_micro_batch_size_per_gpu=1 (and log_prob_micro_batch_size_per_gpu=1)")
    return knobs, estimate.fits


def _best_utilization(m: ModelShape, s: Setup, device: DeviceMemory) -> float | None:
    """The largest gpu_memory_utilization (0.05 steps, >= 0.3) whose rollout fits with KV room."""
    gmu = round(min(s.gpu_memory_utilization, 0.95), 2)
    while gmu >= 0.3 - 1e-9:
        trial = s.with_(gpu_memory_utilization=gmu)
        est = build(m, trial, device, None)
        if "rollout" not in est.over() and est.kv_fits:
            return gmu if gmu != s.gpu_memory_utilization else None
        if not est.kv_fits:
            return None  # lowering only shrinks the KV room further
        gmu = round(gmu - 0.05, 2)
    return None
