"""A verl step as phases, each the sum of the terms alive on one device at its peak.

Colocated (hybrid engine): the rollout engine takes ``gpu_memory_utilization`` of the device while
it generates; with ``free_cache_engine`` (verl's default) it sleeps during training and keeps
only its runtime and graphs. The trainer's state stays on the device between phases unless it is
offloaded, but verl loads offloaded parameters and optimizer state back for the actor update
(and parameters for log-prob and the weight sync). The split modes (one-step-off, separate-async,
fully-async) give the engine a pool of its own: its devices hold the engine with its own
``gpu_memory_utilization`` and the weights it receives, the trainer pool's devices hold the training
phases and never the engine. ``pool_of`` says which pool a phase runs on.
"""

from __future__ import annotations

from dataclasses import replace

from verl_deploy.memory import terms as t
from verl_deploy.memory.model import ModelShape
from verl_deploy.memory.setup import Setup

Phases = dict[str, dict[str, t.Term]]
ROLLOUT_POOL_PHASES = ("rollout",)  # in the split modes: what the rollout pool's devices run


def pool_of(s: Setup, phase: str) -> str:
    """The pool a phase runs on: "shared" when colocated, else "rollout" or "trainer"."""
    if s.colocated:
        return "shared"
    return "rollout" if phase in ROLLOUT_POOL_PHASES else "trainer"


def _resident(m: ModelShape, s: Setup, *, params_loaded: bool, optimizer_loaded: bool) -> dict[str, t.Term]:
    """Trainer state on the device, given what the phase loads back."""
    found: dict[str, t.Term] = {}
    if params_loaded or not s.param_offload:
        found["actor_params"] = t.actor_params(m, s)
    if s.framework == "megatron" and not s.grad_offload:
        found["grad_buffer"] = t.gradients(m, s)
    if optimizer_loaded or not s.optimizer_offload:
        found["optimizer"] = t.optimizer_states(m, s)
    ref = t.ref_params(m, s)
    if s.ref_loaded and not s.ref_param_offload:
        found["ref_params"] = ref
    if s.critic and not (s.critic_param_offload and s.critic_optimizer_offload):
        found["critic_state"] = t.critic_state(m, s, params=not s.critic_param_offload, grads=False,
                                               optimizer=not s.critic_optimizer_offload)
    return found


def _allowances(s: Setup, usable_gb: float, *, training: bool) -> dict[str, t.Term]:
    """What every phase carries beside its tensors: the runtime context, the trainer's communicators, and in the
    phases the caching allocator serves, its fragmentation."""
    found = {"device_context": t.device_context(s), "trainer_comm_buffers": t.comm_buffers(s, rollout_side=False)}
    if training:
        found["allocator_fragmentation"] = t.fragmentation(usable_gb)
    return found


def _engine_while_training(s: Setup, usable_gb: float) -> dict[str, t.Term]:
    if not s.colocated:
        return {}
    if not s.free_cache_engine:
        share = s.gpu_memory_utilization * usable_gb * t.GIB
        return {"rollout_engine_awake": t.Term(share, f"free_cache_engine off: gpu_memory_utilization "
                                                      f"{s.gpu_memory_utilization:g} x {usable_gb:.1f} GiB stays",
                                                      t.VLLM + "v1/worker/utils.py:410")}
    return {"rollout_engine_asleep": t.engine_overhead(s)}


def rollout_terms(m: ModelShape, s: Setup, usable_gb: float) -> dict[str, t.Term]:
    budget = s.gpu_memory_utilization * usable_gb * t.GIB
    found = {"engine_budget": t.Term(budget, f"gpu_memory_utilization {s.gpu_memory_utilization:g} x "
                                             f"{usable_gb:.1f} GiB (vLLM: share of the whole device)",
                                     t.VLLM + "v1/worker/utils.py:410 request_memory (total_memory x gmu)"),
             "engine_overhead": t.engine_overhead(s, awake=True)}
    found["device_context"] = t.device_context(s)
    if s.colocated:
        found.update(_resident(m, s, params_loaded=False, optimizer_loaded=False))
        found["trainer_comm_buffers"] = t.comm_buffers(s, rollout_side=False)
    else:  # its own pool: the weights arrive a bucket at a time while the engine holds its share
        found["sync_bucket"] = _sync_bucket("received")
    return found


def _sync_bucket(how: str) -> t.Term:
    return t.Term(t.WEIGHT_SYNC_BUCKET, f"update_weights_bucket_megabytes 2048, {how} a bucket at a time",
                  t.VERL + "trainer/config/_generated_ppo_trainer.yaml:340 (checkpoint_engine bucket)")


def kv_room(m: ModelShape, s: Setup, usable_gb: float) -> tuple[t.Term, t.Term]:
    """(KV cache the budget leaves, KV one max_model_len sequence needs)."""
    budget = s.gpu_memory_utilization * usable_gb * t.GIB
    weights, act = t.rollout_weights(m, s), t.rollout_activation(m, s)
    per_token = t.kv_per_token(m, s)
    graphs = t.graph_memory(s)
    inside = 0.0 if t.graphs_outside_budget(s) else graphs.bytes  # vLLM 0.24 takes its graphs from the KV cache
    left = budget - weights.bytes - act.bytes - inside
    return (t.Term(left, f"budget - rollout weights ({weights.formula}) - profiling peak ({act.formula})"
                         + (f" - {graphs.formula}" if inside else ""), t.VLLM + "v1/worker/gpu_worker.py:489"),
            t.Term(per_token.bytes * s.max_model_len, f"max_model_len {s.max_model_len} x KV per token "
                                                     f"({per_token.formula})", per_token.source))


def phase_terms(m: ModelShape, s: Setup, usable_gb: float) -> Phases:
    phases: Phases = {}
    load = {"actor_params": t.actor_params(m, s)}
    if s.framework == "megatron":
        load["grad_buffer"] = t.gradients(m, s)
    if s.ref_loaded and not s.ref_param_offload:
        load["ref_params"] = t.ref_params(m, s)
    phases["model_load"] = load

    phases["rollout"] = rollout_terms(m, s, usable_gb)
    if s.colocated:
        sync = _resident(m, s, params_loaded=True, optimizer_loaded=False)
        if s.free_cache_engine:  # woken weights first, the KV cache after the sync
            sync["rollout_weights"] = t.rollout_weights(m, s)
            sync["engine_overhead"] = t.engine_overhead(s)
        else:  # the engine never slept: its whole share (weights included) is there
            sync.update(_engine_while_training(s, usable_gb))
        sync["sync_bucket"] = _sync_bucket("loaded into the engine")
        sync.update(_allowances(s, usable_gb, training=True))
        phases["weight_sync"] = sync
    else:  # the trainer pool sends its weights to the rollout pool, its parameters loaded back for it
        send = _resident(m, s, params_loaded=True, optimizer_loaded=False)
        send["sync_bucket"] = _sync_bucket("sent")
        send.update(_allowances(s, usable_gb, training=True))
        phases["weight_sync"] = send

    tokens, why = t.tokens_per_device(s, log_prob=True)
    log_prob = _resident(m, s, params_loaded=True, optimizer_loaded=False)
    if s.framework == "fsdp":
        log_prob["unsharded"] = t.fsdp_unsharded(m, s, training=False)
    log_prob["activations"] = t.forward_activations(m, s, tokens)
    log_prob["logits"] = t.logits(m, s, tokens, training=False, entropy=True)
    log_prob["logits"] = _cut(log_prob["logits"], why, s.log_prob_dynamic_bsz)
    log_prob.update(_engine_while_training(s, usable_gb))
    log_prob.update(_allowances(s, usable_gb, training=True))
    phases["log_prob"] = log_prob

    if s.ref_loaded:  # the reference's own forward: its weights on the device, the actor's as they rest
        ref = _resident(m, s, params_loaded=False, optimizer_loaded=False)
        ref["ref_params"] = t.ref_params(m, s)
        if s.framework == "fsdp":
            ref["unsharded"] = t.fsdp_unsharded(m, s, training=False)
        ref["activations"] = t.forward_activations(m, s, tokens)
        ref["logits"] = t.logits(m, s, tokens, training=False, entropy=False)
        ref.update(_engine_while_training(s, usable_gb))
        ref.update(_allowances(s, usable_gb, training=True))
        phases["ref_log_prob"] = ref

    tokens, why = t.tokens_per_device(s, log_prob=False)
    update = _resident(m, s, params_loaded=True, optimizer_loaded=True)
    if s.framework == "fsdp":
        update["gradients"] = t.gradients(m, s)
        update["unsharded"] = t.fsdp_unsharded(m, s, training=True)
    else:
        update["grad_buffer"] = t.gradients(m, s)
    act = t.activations(m, s, tokens)
    update["activations"] = _cut(act, why, s.dynamic_bsz)
    update["logits"] = t.logits_beyond_recompute(t.logits(m, s, tokens, training=True, entropy=s.entropy_in_update),
                                                 t.recompute_working(m, s, tokens))
    dispatch = t.moe_dispatch_buffers(m, s, tokens)
    if dispatch.bytes:
        update["moe_dispatch"] = dispatch
    update.update(_engine_while_training(s, usable_gb))
    update.update(_allowances(s, usable_gb, training=True))
    phases["actor_update"] = update
    if s.critic:
        phases.update(critic_phases(m, s, usable_gb))
    return phases


def _cut(term: t.Term, why: str, dynamic: bool) -> t.Term:
    """A term sized by a micro-batch, with how the micro-batch was cut (and verl's code for it when dynamic)."""
    return replace(term, formula=term.formula + f"; {why}",
                   source=term.source + ("; " + t.SRC_DYNAMIC if dynamic else ""))


def critic_tokens(s: Setup) -> int:
    """Tokens one device holds in one critic forward: its own token budget or micro-batch."""
    return t.tokens_per_device(s.with_(dynamic_bsz=s.critic_dynamic_bsz, max_token_len=s.critic_max_token_len,
                                       micro_batch=s.critic_micro_batch), log_prob=False)[0]


def critic_phases(m: ModelShape, s: Setup, usable_gb: float) -> Phases:
    """PPO with GAE: the critic computes values (forward) and trains (forward + backward) on the same devices."""
    tokens = critic_tokens(s)
    critic_setup = s.with_(gradient_checkpointing=s.critic_gradient_checkpointing)
    others = _resident(m, s, params_loaded=False, optimizer_loaded=False)
    others.pop("critic_state", None)
    values = dict(others)
    values["critic_state"] = t.critic_state(m, s, params=True, grads=False, optimizer=not s.critic_optimizer_offload)
    if s.framework == "fsdp":
        values["unsharded"] = t.fsdp_unsharded(m, s, training=False)
    values["activations"] = t.forward_activations(m, s, tokens)
    values.update(_engine_while_training(s, usable_gb))
    values.update(_allowances(s, usable_gb, training=True))
    update = dict(others)
    update["critic_state"] = t.critic_state(m, s, params=True, grads=True, optimizer=True)
    if s.framework == "fsdp":
        update["unsharded"] = t.fsdp_unsharded(m, s, training=True)
    update["activations"] = t.activations(m, critic_setup, tokens)
    update.update(_engine_while_training(s, usable_gb))
    update.update(_allowances(s, usable_gb, training=True))
    return {"critic_values": values, "critic_update": update}
