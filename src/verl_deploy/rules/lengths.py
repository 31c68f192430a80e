"""Length and sampling rules: the rollout context window, the dynamic-batch token budget, temperature."""

from __future__ import annotations

from verl_deploy.findings import Finding, error, warning
from verl_deploy.rules.context import RuleContext


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
        if ctx.get("rollout_mode", "sync") == "sync" and ctx.sequence_length > allowed:
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
    max_model_len = ctx.get("max_model_len")
    if max_model_len is not None and ctx.number("max_model_len", 0) > limit:
        return [error("max_response_length", f"{ctx.key('max_model_len')} {max_model_len} (prompt + response) exceeds "
                      f"the model's max_position_embeddings {limit}: verl {ctx.spec.verl_version}'s vLLM server "
                      "refuses to start", f"lower --max-response-length / --max-prompt-length to a sum of at most "
                      f"{limit}")]
    return []


_BUDGETS = ("actor_max_token_len", "ref_log_prob_max_token_len", "log_prob_max_token_len")


def dynamic_batch_token_budget(ctx: RuleContext) -> list[Finding]:
    """seqlen_balancing (rearrange_micro_batches): max_token_len x (CP on Megatron, Ulysses SP on FSDP) must be
    at least the longest (padded) sequence, prompt + response."""
    if not ctx.dynamic:
        return []
    scale = ctx.cp if ctx.framework == "megatron" else ctx.sp
    for knob in _BUDGETS:
        budget, key = ctx.get(knob), ctx.key(knob) or knob
        if budget is None:
            continue
        if ctx.number(knob, 0) * scale < ctx.sequence_length:
            return [error("override" if ctx.from_override(knob) else "max_token_len",
                          f"{key.rsplit('.', 1)[-1]} {budget} x {scale} is below the longest sequence "
                          f"{ctx.sequence_length} (prompt + response): verl asserts max_token_len >= the sequence "
                          "length with dynamic batching", f"set {key} to at least {ctx.sequence_length}")]
    return []


def validation_temperature(ctx: RuleContext) -> list[Finding]:
    """validate_config: val_kwargs.do_sample needs rollout.temperature > 0 (where validate_config runs)."""
    temperature = ctx.real("temperature", 1.0)
    if temperature > 0:
        return []
    if ctx.flag("val_do_sample") and ctx.validate_config_runs:
        return [error("temperature", f"temperature {temperature:g} with validation sampling on: verl "
                      f"{ctx.spec.verl_version}'s validate_config requires a temperature above 0",
                      "use --temperature 1.0 (DAPO samples n responses per prompt)")]
    return [warning("temperature", "temperature 0 makes every response to a prompt the same, so DAPO's group "
                    "advantages are all zero", "use --temperature 1.0")]


def _vllm_max_model_len(ctx: RuleContext) -> tuple[int | None, str]:
    """The max_model_len verl hands vLLM, and where it comes from: 0.6.x's sync rollout takes rollout.max_model_len
    or prompt + response; 0.7.0's async server replaces it with the model's max_position_embeddings; 0.7.1+ keeps a
    set one (else max_position_embeddings)."""
    given = ctx.number("max_model_len", 0) if ctx.get("max_model_len") is not None else None
    if ctx.version < (0, 7, 0):
        return given or ctx.sequence_length, "rollout max_model_len"
    if ctx.version == (0, 7, 0) or given is None:
        return ctx.facts.max_position_embeddings, "the model's max_position_embeddings"
    return given, "rollout max_model_len"


def rollout_batched_tokens_fit(ctx: RuleContext) -> list[Finding]:
    """vLLM's SchedulerConfig (the engine verl starts with rollout.max_num_batched_tokens, max_num_seqs,
    enable_chunked_prefill and max_model_len) raises when max_num_batched_tokens < max_num_seqs, and, with chunked
    prefill off, when max_num_batched_tokens < max_model_len (a prompt must fit one scheduler step)."""
    if ctx.spec.rollout_engine != "vllm" or ctx.get("max_num_batched_tokens") is None:
        return []
    tokens = ctx.number("max_num_batched_tokens", 8192)
    seqs = ctx.number("max_num_seqs", ctx.default("max_num_seqs", 1024))
    if tokens < seqs:
        return [error("max_response_length", f"rollout max_num_batched_tokens {tokens} is below max_num_seqs {seqs} "
                      f"(verl {ctx.spec.verl_version}'s default): vLLM raises 'max_num_batched_tokens must be greater "
                      "than or equal to max_num_seqs' when the rollout starts",
                      f"--override {ctx.key('max_num_seqs')}={tokens} (or raise --max-prompt-length + "
                      f"--max-response-length to {seqs} or more)")]
    if ctx.flag("chunked_prefill", False):
        return _sync_rollout_chunked_prefill(ctx, tokens)
    model_len, source = _vllm_max_model_len(ctx)
    if model_len is None or tokens >= model_len:
        return []
    fix = (f"turn chunked prefill on (--features chunked_prefill), or --override "
           f"{ctx.key('max_num_batched_tokens')}={model_len}")
    if ctx.version == (0, 7, 0):  # the launch cannot send a max_model_len 0.7.0 keeps
        return [warning("max_response_length", f"verl 0.7.0 starts vLLM with max_model_len = {source} {model_len}, "
                        f"above max_num_batched_tokens {tokens} with chunked prefill off: vLLM's scheduler check "
                        "refuses that pair", fix)]
    return [error("override" if ctx.from_override("max_num_batched_tokens") else "max_response_length",
                  f"rollout max_num_batched_tokens {tokens} is below {source} {model_len} with chunked prefill off: "
                  "vLLM raises 'max_num_batched_tokens is smaller than max_model_len' when the rollout starts", fix)]


def _sync_rollout_chunked_prefill(ctx: RuleContext, tokens: int) -> list[Finding]:
    """0.6.x's sync vLLM rollout (vllm_rollout_spmd) raises the other way round: max_num_batched_tokens below
    max_model_len *with* chunked prefill on ('Enable chunked prefill, max_num_batched_tokens is smaller than
    max_model_len'); vLLM refuses the same pair with it off, so only a budget >= max_model_len starts."""
    if ctx.version >= (0, 7, 0) or str(ctx.get("rollout_mode", "sync")) != "sync":
        return []
    model_len, source = _vllm_max_model_len(ctx)
    if model_len is None or tokens >= model_len:
        return []
    return [error("override" if ctx.from_override("max_num_batched_tokens") else "max_response_length",
                  f"rollout max_num_batched_tokens {tokens} is below {source} {model_len} with chunked prefill on: "
                  f"verl {ctx.spec.verl_version}'s vLLM rollout raises 'Enable chunked prefill, max_num_batched_tokens "
                  "is smaller than max_model_len'", f"--override {ctx.key('max_num_batched_tokens')}={model_len}")]
