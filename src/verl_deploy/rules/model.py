"""Rules that compare the layout with the model's own shape (config.json): Megatron-core's
TransformerConfig / TransformerBlock / MoELayer checks and vLLM's parallel-config check."""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.rules.context import RuleContext

_UNEVEN = ("first_stage_layers", "last_stage_layers")


def megatron_tp_divides_heads(ctx: RuleContext) -> list[Finding]:
    """TransformerConfig.__post_init__: num_attention_heads and num_query_groups (KV heads) % TP == 0."""
    facts = ctx.facts
    if ctx.framework != "megatron" or facts.num_attention_heads is None:
        return []
    tp = ctx.tp
    heads, groups = facts.num_attention_heads, facts.num_key_value_heads or facts.num_attention_heads
    for what, count in (("attention heads", heads), ("KV groups (num_key_value_heads)", groups)):
        if count % tp:
            good = [d for d in range(1, count + 1) if heads % d == 0 and groups % d == 0]
            return [error("train_tp", f"training TP {tp} does not divide the model's {count} {what}: "
                          "Megatron refuses it", f"use a --train-tp from {good}")]
    return []


def megatron_pp_divides_layers(ctx: RuleContext) -> list[Finding]:
    """TransformerBlock (get_num_layers_to_build): num_layers % PP == 0 unless first/last stages are set."""
    if ctx.framework != "megatron" or ctx.facts.num_layers is None or any(ctx.get(k) for k in _UNEVEN):
        return []
    layers, pp = ctx.facts.num_layers, ctx.pp
    if layers % pp:
        good = [d for d in range(1, min(layers, 16) + 1) if layers % d == 0]
        return [error("train_pp", f"training PP {pp} does not divide the model's {layers} layers: Megatron "
                      "asserts num_layers % pipeline_model_parallel_size == 0", f"use a --train-pp from {good}")]
    return []


def rollout_tp_divides_heads(ctx: RuleContext) -> list[Finding]:
    """vLLM ModelConfig.verify_with_parallel_config: total attention heads % tensor_parallel_size == 0; and
    QKVParallelLinear splits the KV heads (kv % TP == 0) or replicates them (TP % kv == 0)."""
    heads = ctx.facts.num_attention_heads
    if heads is None or ctx.spec.rollout_engine != "vllm":
        return []
    kv = ctx.facts.num_key_value_heads or heads
    tp = ctx.number("rollout_tp", ctx.spec.rollout_tp)
    good = [d for d in range(1, min(heads, 16) + 1) if heads % d == 0 and (kv % d == 0 or d % kv == 0)]
    if heads % tp:
        return [error("gen_tp", f"rollout TP {tp} does not divide the model's {heads} attention heads: vLLM "
                      "refuses it", f"use a rollout TP (--gen-tp) from {good}")]
    if kv % tp and tp % kv:
        return [error("gen_tp", f"rollout TP {tp} neither divides nor is a multiple of the model's {kv} KV heads: "
                      "vLLM cannot shard them", f"use a rollout TP (--gen-tp) from {good}")]
    return []


def moe_ep_divides_experts(ctx: RuleContext) -> list[Finding]:
    """MoELayer: num_moe_experts % expert_model_parallel_size == 0; TransformerConfig: EP > 1 needs MoE."""
    if ctx.framework != "megatron":
        return []
    ep = ctx.number("expert_parallel", 1)
    experts = ctx.facts.num_experts
    if ep <= 1:
        return []
    if experts is None and ctx.facts.num_attention_heads is not None:  # config read, and it is a dense model
        return [error("override", f"expert_model_parallel_size {ep} on a dense model: Megatron needs "
                      "num_moe_experts for expert parallel", f"drop {ctx.key('expert_parallel')} or set it to 1")]
    if experts is not None and experts % ep:
        good = [d for d in range(1, min(experts, 64) + 1) if experts % d == 0]
        return [error("override", f"expert_model_parallel_size {ep} does not divide the model's {experts} "
                      "experts: Megatron asserts it", f"use an expert parallel size from {good}")]
    return []
