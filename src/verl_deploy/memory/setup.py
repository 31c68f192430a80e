"""What the estimate needs to know about a run, read once from the compiled plan.

The plan's final overrides (features, knobs and the user's own ``-o KEY=VALUE``) are what verl
receives, so they are what the estimate reads; verl's defaults fill the rest. Nothing here
knows a verl key: the names come from ``profiles/memory_keys.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import yaml

from verl_deploy.memory import nccl
from verl_deploy.profiles.memory_keys import default_for, key_for
from verl_deploy.spec import SPLIT_MODES


@dataclass(frozen=True)
class Setup:
    framework: str
    device: str
    mode: str
    verl_version: str
    devices_per_node: int  # trainer devices per node
    nnodes: int
    rollout_devices_per_node: int  # one-step-off: separate rollout devices
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    sp: int  # FSDP Ulysses
    fsdp_size: int
    rollout_tp: int
    rollout_ep: int
    prompt_len: int
    response_len: int
    batch_size: int
    mini_batch_size: int
    n_resp: int
    dynamic_bsz: bool
    log_prob_dynamic_bsz: bool
    max_token_len: int
    log_prob_max_token_len: int
    micro_batch: int
    log_prob_micro_batch: int
    param_offload: bool
    optimizer_offload: bool
    grad_offload: bool
    ref_param_offload: bool
    ref_loaded: bool
    gradient_checkpointing: bool
    recompute: str | None  # None | "full" | "selective"
    recompute_method: str | None
    recompute_layers: int | None
    distributed_optimizer: bool
    optimizer_offload_fraction: float
    entropy_chunking: bool
    entropy_checkpointing: bool
    entropy_in_update: bool
    remove_padding: bool
    rollout_engine: str
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    free_cache_engine: bool
    enforce_eager: bool
    vpp: int | None = None  # Megatron virtual pipeline stages per rank
    critic: bool = False  # PPO with GAE: a value model trains beside the actor
    critic_param_offload: bool = False
    critic_optimizer_offload: bool = False
    critic_max_token_len: int = 32768
    critic_micro_batch: int = 1
    critic_dynamic_bsz: bool = False
    critic_gradient_checkpointing: bool = True
    fused_kernels: bool = False  # model.use_fused_kernels: log-probs and entropy without the [tokens, vocab] logits
    expected_response_len: int | None = None  # the mean response length the run is expected to reach (spec field)
    # the longest response of the step, when the others are shorter (the typical step): fixed micro-batches put it
    # in one micro-batch beside micro - 1 sequences of the typical length; None: every response is response_len long
    longest_response_len: int | None = None
    nccl_version: tuple[int, int, int] | None = None  # the NCCL the training runs with; None: the release image's
    nvls: bool = True  # the GPUs sit behind an NVSwitch with multicast (NCCL's NVLS buffers); see memory/nccl.py
    recompute_modules: tuple[str, ...] = ("core_attn",)  # Megatron's selective recompute: the modules it recomputes
    fsdp_strategy: str = "fsdp"  # actor.strategy: fsdp (FSDP1, verl's default, as read() falls back to) or fsdp2

    @property
    def world(self) -> int:
        return self.devices_per_node * self.nnodes

    @property
    def colocated(self) -> bool:
        """Trainer and engine share each device (hybrid engine); the split modes give the engine a pool of its own."""
        return self.mode not in SPLIT_MODES

    @property
    def rollout_world(self) -> int:
        """Devices the rollout engine runs on (the whole cluster when colocated)."""
        return self.rollout_devices_per_node * self.nnodes

    @property
    def padded(self) -> bool:
        """FSDP without remove-padding pads every sequence to the maximum length (verl's Megatron engine always packs)."""
        return self.framework == "fsdp" and not self.remove_padding

    @property
    def dp(self) -> int:
        if self.framework == "megatron":
            return max(1, self.world // max(1, self.tp * self.pp * self.cp))
        return max(1, self.world // max(1, self.sp))

    @property
    def fsdp_shards(self) -> int:
        return self.world if self.fsdp_size < 1 or self.fsdp_size > self.world else self.fsdp_size

    def layout(self) -> str:
        if self.framework == "megatron":
            text = f"megatron tp{self.tp} pp{self.pp} cp{self.cp}" + (f" ep{self.ep}" if self.ep > 1 else "")
        else:
            text = f"fsdp sp{self.sp}" + (f" fsdp{self.fsdp_size}" if self.fsdp_size not in (-1, 0) else "")
        return f"{text} x{self.world} rollout-tp{self.rollout_tp} {self.mode}"

    def workload(self) -> str:
        """What sizes a step beside the layout: lengths, batch, token budget or micro-batch, the engine's share."""
        per = (f"tokens {self.max_token_len}/{self.log_prob_max_token_len}" if self.dynamic_bsz
               else f"micro {self.micro_batch}/{self.log_prob_micro_batch}")
        return (f"prompt {self.prompt_len} response {self.response_len} mini {self.mini_batch_size} n {self.n_resp} "
                f"{per} gmu {self.gpu_memory_utilization:g}")

    def with_(self, **changes: Any) -> "Setup":
        return replace(self, **changes)


def _parse(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    return value


def _bool(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() in {"true", "1", "yes", "on"}
    if isinstance(value, (int, float)):
        return bool(value)
    return default


def _float(value: Any, default: float) -> float:
    try:
        number = float(_parse(value))
    except (TypeError, ValueError):
        return default
    return number if number == number else default  # NaN


def _int(value: Any, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number


def _modules(value: Any) -> tuple[str, ...]:
    """recompute_modules as verl passes it (a list, or a Hydra list written as a string)."""
    value = _parse(value)
    if isinstance(value, str):
        value = [v.strip(" '\"") for v in value.strip("[]").split(",") if v.strip(" '\"")]
    return tuple(str(v) for v in value) if isinstance(value, (list, tuple)) else ("core_attn",)


def _grad_offload(plan, read) -> bool:
    """Megatron's gradient buffer leaves the device with grad_offload; from verl 0.9, which has no such
    key, param_offload releases the gradients too (the profile knows which the version has)."""
    spec = plan.spec
    if spec.framework != "megatron":
        return False
    if plan.profile.keys_for("grad_offload", spec.framework, spec.device):
        return _bool(read("grad_offload"), False)
    return _bool(read("param_offload"), False)


def _reader(plan):
    """read(name): the value verl receives for a memory input (the plan's override, else verl's default)."""
    spec = plan.spec
    overrides = plan.override_map()

    def read(name: str) -> Any:
        key = key_for(name, spec.framework)
        if key and key in overrides:
            o = overrides[key]
            return _parse(o.raw) if o.raw is not None else o.value
        return default_for(name)

    return read


def _layout(spec, read) -> dict:
    """Devices of each pool and how the trainer splits the model over them."""
    megatron = spec.framework == "megatron"
    split = spec.mode in SPLIT_MODES
    tp = spec.train_tp if megatron else 1
    etp = read("expert_tensor_parallel_size")
    return dict(
        devices_per_node=spec.trainer_devices, nnodes=spec.nnodes,
        rollout_devices_per_node=spec.rollout_gpus if split else spec.trainer_devices,
        tp=tp, pp=spec.train_pp if megatron else 1, cp=spec.train_cp if megatron else 1,
        ep=max(1, _int(read("expert_model_parallel_size"), 1)), etp=max(1, _int(etp, tp) if etp else tp),
        sp=max(1, _int(read("ulysses_sequence_parallel_size"), 1)) if not megatron else 1,
        fsdp_size=_int(read("fsdp_size"), -1),
        fsdp_strategy=str(read("fsdp_strategy") or "fsdp") if not megatron else "megatron",
        rollout_tp=max(1, _int(read("rollout_tp"), spec.rollout_tp)), rollout_ep=max(1, _int(read("rollout_ep"), 1)),
        vpp=(_int(read("virtual_pipeline_model_parallel_size"), 0) or None) if megatron else None,
    )


def _batches(spec, read) -> dict:
    """Lengths, batch sizes and how each forward is cut: token budgets or micro-batches."""
    budget = _int(read("ppo_max_token_len_per_gpu"), spec.token_budget)
    log_budget = _int(read("log_prob_max_token_len_per_gpu") or read("ref_log_prob_max_token_len_per_gpu"), budget)
    micro = _int(read("ppo_micro_batch_size_per_gpu"), 1)
    dynamic = _bool(read("use_dynamic_bsz"), False)
    log_dyn = read("log_prob_use_dynamic_bsz")
    expected = getattr(spec, "expected_response_length", None)
    return dict(
        prompt_len=spec.max_prompt_length, response_len=spec.max_response_length,
        batch_size=spec.batch_size, mini_batch_size=_int(read("ppo_mini_batch_size"), spec.effective_mini_batch_size),
        n_resp=spec.n_resp_per_prompt, dynamic_bsz=dynamic,
        log_prob_dynamic_bsz=_bool(log_dyn, dynamic) if log_dyn is not None else dynamic,
        max_token_len=max(1, budget), log_prob_max_token_len=max(1, log_budget),
        micro_batch=max(1, micro), log_prob_micro_batch=max(1, _int(read("log_prob_micro_batch_size_per_gpu"), micro)),
        remove_padding=_bool(read("remove_padding"), False),
        expected_response_len=min(spec.max_response_length, expected) if expected else None,
    )


def _memory_features(spec, plan, read) -> dict:
    """Offload, recompute / gradient checkpointing, the optimizer and the logits' kernels."""
    megatron = spec.framework == "megatron"
    granularity = read("recompute_granularity")
    return dict(
        param_offload=_bool(read("param_offload"), False), optimizer_offload=_bool(read("optimizer_offload"), False),
        grad_offload=_grad_offload(plan, read), ref_param_offload=_bool(read("ref_param_offload"), False),
        ref_loaded=_bool(read("use_kl_loss"), False) or _bool(read("use_kl_in_reward"), False),
        gradient_checkpointing=_bool(read("gradient_checkpointing"), False) if not megatron else False,
        recompute=(str(granularity) if granularity not in (None, "null", "") else None) if megatron else None,
        # with recompute off these are the spec's, what turning it on (with_features) recomputes with
        recompute_method=(str(read("recompute_method")) if read("recompute_method") else spec.recompute_method),
        recompute_layers=_int(read("recompute_num_layers"), 0) or spec.recompute_num_layers,
        recompute_modules=_modules(read("recompute_modules")),
        distributed_optimizer=_bool(read("use_distributed_optimizer"), True),
        optimizer_offload_fraction=min(1.0, max(0.0, _float(read("optimizer_offload_fraction"), 0.0)))
        if _bool(read("optimizer_cpu_offload"), False) else 0.0,
        entropy_chunking=_bool(read("entropy_from_logits_with_chunking"), False),
        entropy_checkpointing=_bool(read("entropy_checkpointing"), False),
        entropy_in_update=_float(read("entropy_coeff"), 0.0) != 0 or _bool(read("calculate_entropy"), False),
        fused_kernels=_bool(read("use_fused_kernels"), False),
    )


def _engine(spec, read) -> dict:
    """The rollout engine's share of the device and its own knobs."""
    max_model_len = read("max_model_len")
    return dict(
        rollout_engine=str(read("rollout_name") or "vllm"),
        gpu_memory_utilization=min(0.99, max(0.01, _float(read("gpu_memory_utilization"), spec.gpu_memory_utilization))),
        max_num_batched_tokens=_int(read("max_num_batched_tokens"), 8192), max_num_seqs=_int(read("max_num_seqs"), 256),
        max_model_len=_int(max_model_len, spec.token_budget) if max_model_len else spec.token_budget,
        # a rollout pool of its own never sleeps: the engine keeps its share between generations
        free_cache_engine=_bool(read("free_cache_engine"), True) if spec.mode not in SPLIT_MODES else False,
        enforce_eager=_bool(read("enforce_eager"), False),
    )


def _critic(read, micro: int, dynamic: bool) -> dict:
    """PPO with GAE: a value model trains beside the actor (read from imported configs; verl-deploy plans none)."""
    return dict(
        critic=str(read("adv_estimator") or "").strip().lower() == "gae",
        critic_param_offload=_bool(read("critic_param_offload"), False) or _bool(read("critic_param_offload_v07"), False),
        critic_optimizer_offload=(_bool(read("critic_optimizer_offload"), False)
                                  or _bool(read("critic_optimizer_offload_v07"), False)),
        critic_max_token_len=max(1, _int(read("critic_ppo_max_token_len_per_gpu"), 32768)),
        critic_micro_batch=max(1, _int(read("critic_ppo_micro_batch_size_per_gpu"), micro)),
        critic_dynamic_bsz=_bool(read("critic_use_dynamic_bsz"), dynamic),
        critic_gradient_checkpointing=_bool(read("critic_gradient_checkpointing"), True),
    )


def setup_from_plan(plan) -> Setup:
    """Read the memory inputs from a compiled plan (its spec, and the overrides verl will see)."""
    spec = plan.spec
    read = _reader(plan)
    batches = _batches(spec, read)
    return Setup(framework=spec.framework, device=spec.device, mode=spec.mode, verl_version=spec.verl_version,
                 nccl_version=nccl.parse_version(spec.nccl_version), nvls=nccl.nvls_capable(spec.device_name),
                 **_layout(spec, read), **batches, **_memory_features(spec, plan, read), **_engine(spec, read),
                 **_critic(read, batches["micro_batch"], batches["dynamic_bsz"]))
