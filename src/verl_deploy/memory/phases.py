"""A verl step as phases, each the sum of the terms alive on one device at its peak.

Colocated (hybrid engine): the rollout engine takes ``gpu_memory_utilization`` of the device while
it generates; with ``free_cache_engine`` (verl's default) it sleeps during training and keeps
only its runtime and graphs. The trainer's state stays on the device between phases unless it is
offloaded, but verl loads offloaded parameters and optimizer state back for the actor update
(and parameters for log-prob and the weight sync). One-step-off: rollout devices hold only the
engine; trainer devices never do.
"""

from __future__ import annotations

from verl_deploy.memory import terms as t
from verl_deploy.memory.model import ModelShape
from verl_deploy.memory.setup import Setup

Phases = dict[str, dict[str, t.Term]]


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
    return found


def _engine_while_training(s: Setup, usable_gb: float) -> dict[str, t.Term]:
    if not s.colocated:
        return {}
    if not s.free_cache_engine:
        share = s.gpu_memory_utilization * usable_gb * t.GIB
        return {"rollout_engine_awake": t.Term(share, f"free_cache_engine off: gpu_memory_utilization "
                                                      f"{s.gpu_memory_utilization:g} x {usable_gb:.1f} GiB stays")}
    return {"rollout_engine_asleep": t.engine_overhead(s)}


def rollout_terms(m: ModelShape, s: Setup, usable_gb: float) -> dict[str, t.Term]:
    budget = s.gpu_memory_utilization * usable_gb * t.GIB
    found = {"engine_budget": t.Term(budget, f"gpu_memory_utilization {s.gpu_memory_utilization:g} x "
                                             f"{usable_gb:.1f} GiB (vLLM: share of the whole device)"),
             "engine_overhead": t.engine_overhead(s)}
    if s.colocated:
        found.update(_resident(m, s, params_loaded=False, optimizer_loaded=False))
    return found


def kv_room(m: ModelShape, s: Setup, usable_gb: float) -> tuple[t.Term, t.Term]:
    """(KV cache the budget leaves, KV one max_model_len sequence needs)."""
    budget = s.gpu_memory_utilization * usable_gb * t.GIB
    weights, act = t.rollout_weights(m, s), t.rollout_activation(m, s)
    per_token = t.kv_per_token(m, s)
    left = budget - weights.bytes - act.bytes
    return (t.Term(left, f"budget - rollout weights ({weights.formula}) - profiling peak ({act.formula})"),
            t.Term(per_token.bytes * s.max_model_len, f"max_model_len {s.max_model_len} x KV per token "
                                                     f"({per_token.formula})"))


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
        sync["sync_bucket"] = t.Term(t.WEIGHT_SYNC_BUCKET, "update_weights_bucket_megabytes 2048")
        phases["weight_sync"] = sync

    tokens, why = t.tokens_per_device(s, log_prob=True)
    log_prob = _resident(m, s, params_loaded=True, optimizer_loaded=False)
    if s.framework == "fsdp":
        log_prob["unsharded"] = t.fsdp_unsharded(m, s, training=False)
    log_prob["activations"] = t.forward_activations(m, s, tokens)
    log_prob["logits"] = t.logits(m, s, tokens, training=False, entropy=True)
    log_prob["logits"] = t.Term(log_prob["logits"].bytes, log_prob["logits"].formula + f"; {why}")
    log_prob.update(_engine_while_training(s, usable_gb))
    phases["log_prob"] = log_prob

    if s.ref_loaded:  # the reference's own forward: its weights on the device, the actor's as they rest
        ref = _resident(m, s, params_loaded=False, optimizer_loaded=False)
        ref["ref_params"] = t.ref_params(m, s)
        if s.framework == "fsdp":
            ref["unsharded"] = t.fsdp_unsharded(m, s, training=False)
        ref["activations"] = t.forward_activations(m, s, tokens)
        ref["logits"] = t.logits(m, s, tokens, training=False, entropy=False)
        ref.update(_engine_while_training(s, usable_gb))
        phases["ref_log_prob"] = ref

    tokens, why = t.tokens_per_device(s, log_prob=False)
    update = _resident(m, s, params_loaded=True, optimizer_loaded=True)
    if s.framework == "fsdp":
        update["gradients"] = t.gradients(m, s)
        update["unsharded"] = t.fsdp_unsharded(m, s, training=True)
    else:
        update["grad_buffer"] = t.gradients(m, s)
    act = t.activations(m, s, tokens)
    update["activations"] = t.Term(act.bytes, act.formula + f"; {why}")
    update["logits"] = t.logits(m, s, tokens, training=True, entropy=s.entropy_in_update)
    update.update(_engine_while_training(s, usable_gb))
    phases["actor_update"] = update
    return phases
