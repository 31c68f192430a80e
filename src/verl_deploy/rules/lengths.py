"""Length and sampling rules: the rollout context window, the dynamic-batch token budget, temperature."""

from __future__ import annotations

from verl_deploy.findings import Finding, error, warning
from verl_deploy.rules.context import A, RuleContext


def rollout_context_fits_model(ctx: RuleContext) -> list[Finding]:
    """vLLM's context window against the model's max_position_embeddings.
    0.6.x (rollout mode sync, vllm_rollout_spmd): prompt + response <= max_position_embeddings x rope factor.
    0.7.0 (async server): max_model_len is forced to max_position_embeddings; the key is ignored, runs.
    0.7.1+ (async server): a set max_model_len must be <= max_position_embeddings."""
    limit = ctx.facts.max_position_embeddings
    if limit is None:
        return []
    if ctx.version < (0, 7, 0):
        allowed = int(limit * (ctx.facts.rope_factor or 1.0))
        if ctx.get(A + "rollout.mode", "sync") == "sync" and ctx.sequence_length > allowed:
            return [error("max_response_length", f"prompt + response = {ctx.sequence_length} tokens exceeds the "
                          f"model's context ({allowed}): verl {ctx.spec.verl_version}'s vLLM rollout asserts it",
                          f"lower --max-response-length / --max-prompt-length to a sum of at most {allowed}")]
        return []
    if ctx.version == (0, 7, 0):
        if ctx.sequence_length > limit:
            return [warning("max_response_length", f"prompt + response = {ctx.sequence_length} tokens exceeds the "
                            f"model's context ({limit}); verl 0.7.0 caps each response at {limit} - prompt tokens",
                            f"lower --max-response-length so prompt + response is at most {limit}")]
        return []
    max_model_len = ctx.get(A + "rollout.max_model_len")
    if max_model_len is not None and ctx.number(A + "rollout.max_model_len", 0) > limit:
        return [error("max_response_length", f"rollout.max_model_len {max_model_len} (prompt + response) exceeds "
                      f"the model's max_position_embeddings {limit}: verl {ctx.spec.verl_version}'s vLLM server "
                      "refuses to start", f"lower --max-response-length / --max-prompt-length to a sum of at most "
                      f"{limit}")]
    return []


_BUDGETS = (A + "actor.ppo_max_token_len_per_gpu", A + "ref.log_prob_max_token_len_per_gpu",
            A + "rollout.log_prob_max_token_len_per_gpu")


def dynamic_batch_token_budget(ctx: RuleContext) -> list[Finding]:
    """seqlen_balancing (rearrange_micro_batches): max_token_len x (CP on Megatron, Ulysses SP on FSDP) must be
    at least the longest (padded) sequence, prompt + response."""
    if not ctx.dynamic:
        return []
    scale = ctx.cp if ctx.framework == "megatron" else ctx.sp
    for key in _BUDGETS:
        budget = ctx.get(key)
        if budget is None:
            continue
        if ctx.number(key, 0) * scale < ctx.sequence_length:
            return [error("override" if key in _user_keys(ctx) else "max_token_len",
                          f"{key.rsplit('.', 1)[-1]} {budget} x {scale} is below the longest sequence "
                          f"{ctx.sequence_length} (prompt + response): verl asserts max_token_len >= the sequence "
                          "length with dynamic batching", f"set {key} to at least {ctx.sequence_length}")]
    return []


def _user_keys(ctx: RuleContext) -> set[str]:
    return {o.key for o in ctx.plan.overrides if o.origin == "--override"}


def validation_temperature(ctx: RuleContext) -> list[Finding]:
    """validate_config: val_kwargs.do_sample needs rollout.temperature > 0 (where validate_config runs)."""
    temperature = ctx.real(A + "rollout.temperature", 1.0)
    if temperature > 0:
        return []
    if ctx.flag(A + "rollout.val_kwargs.do_sample") and ctx.validate_config_runs:
        return [error("temperature", f"temperature {temperature:g} with validation sampling on: verl "
                      f"{ctx.spec.verl_version}'s validate_config requires a temperature above 0",
                      "use --temperature 1.0 (DAPO samples n responses per prompt)")]
    return [warning("temperature", "temperature 0 makes every response to a prompt the same, so DAPO's group "
                    "advantages are all zero", "use --temperature 1.0")]
