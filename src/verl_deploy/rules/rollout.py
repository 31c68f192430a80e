"""Rollout-engine settings verl checks when it builds the rollout: the RolloutConfig dataclass, the rollout
replicas it places on the nodes, and the vLLM engine arguments it derives (LoRA rank)."""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.rules.context import RuleContext

# verl/workers/rollout/vllm_rollout/utils.py get_vllm_max_lora_rank: the ranks vLLM's LoRA kernels take
# (a literal list on 0.6.x/0.7.0, vLLM's MaxLoRARanks from 0.7.1; 512 is the largest in both)
VLLM_MAX_LORA_RANK = 512


def _rollout_tp(ctx: RuleContext) -> int:
    return ctx.number("rollout_tp", ctx.spec.rollout_tp)


def rollout_expert_parallel_is_tp_times_dp(ctx: RuleContext) -> list[Finding]:
    """RolloutConfig.__post_init__: with vLLM or SGLang, an expert_parallel_size > 1 must equal the rollout's
    tensor_model_parallel_size x data_parallel_size (every release from 0.6.0)."""
    ep = ctx.number("rollout_ep", 1)
    if ep <= 1 or ctx.spec.rollout_engine not in ("vllm", "sglang"):
        return []
    tp, dp = _rollout_tp(ctx), ctx.number("rollout_dp", 1)
    if ep == tp * dp:
        return []
    return [error("override", f"{ctx.key('rollout_ep')}={ep}: verl {ctx.spec.verl_version}'s RolloutConfig asserts "
                  f"expert_parallel_size == rollout TP x DP = {tp} x {dp} = {tp * dp}",
                  f"--override {ctx.key('rollout_ep')}={tp * dp} (or 1: no expert parallel in the rollout)")]


def rollout_pipeline_parallel_unsupported(ctx: RuleContext) -> list[Finding]:
    """RolloutConfig.__post_init__: vLLM, SGLang and TensorRT-LLM rollouts raise NotImplementedError for
    pipeline_model_parallel_size > 1 (every release from 0.6.0)."""
    pp = ctx.number("rollout_pp", 1)
    if pp <= 1:
        return []
    return [error("override", f"{ctx.key('rollout_pp')}={pp}: verl {ctx.spec.verl_version}'s RolloutConfig raises "
                  f"'not implemented pipeline_model_parallel_size > 1' for the {ctx.spec.rollout_engine} rollout",
                  f"drop the --override of {ctx.key('rollout_pp')} (use --gen-tp to spread the rollout instead)")]


def _rollout_devices_per_node(ctx: RuleContext) -> int:
    """The rollout's devices per node: its own pool's in the split modes, the trainer's node otherwise."""
    pool = {"one-step-off": "rollout_pool_gpus", "fully-async": "rollout_pool_gpus",
            "separate-async": "v1_rollout_gpus"}.get(ctx.spec.mode)  # a rollout pool of its own
    return (ctx.number(pool, 0) if pool else 0) or ctx.number("n_gpus_per_node", ctx.spec.trainer_devices)


def rollout_replica_fits_nodes(ctx: RuleContext) -> list[Finding]:
    """RolloutReplica.__init__ (the async server's replicas; the only rollout from 0.7.0): a replica's world
    TP x DP x PP must divide by min(devices per node, world), i.e. a replica larger than a node fills whole
    nodes."""
    if ctx.version < (0, 7, 0) and str(ctx.get("rollout_mode", "sync")) != "async":
        return []  # 0.6.x's sync rollout has no replicas
    world = _rollout_tp(ctx) * ctx.number("rollout_dp", 1) * ctx.number("rollout_pp", 1)
    per_node = _rollout_devices_per_node(ctx)
    if per_node <= 0 or world <= 0 or world % min(per_node, world) == 0:
        return []
    heads, kv = ctx.facts.num_attention_heads, ctx.facts.num_key_value_heads or ctx.facts.num_attention_heads
    fits = [tp for tp in range(1, per_node + 1) if per_node % tp == 0 and
            (heads is None or (heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)))]  # vLLM's own head checks
    return [error("gen_tp", f"rollout TP {world} spans nodes of {per_node} devices without filling them: verl "
                  f"{ctx.spec.verl_version}'s RolloutReplica asserts the replica's world ({world}) divides by the "
                  f"devices per node ({per_node})", f"use a --gen-tp that divides {per_node} (one of {fits}), or a "
                  f"multiple of {per_node}")]


def vllm_rollout_tp_divides_node(ctx: RuleContext) -> list[Finding]:
    """vLLMHttpServer.launch_server: with rollout data parallel (0.8.0+: data_parallel_size > 1; 0.6.0-0.7.1: expert
    parallel on, which RolloutConfig makes TP x DP), each node runs devices-per-node / TP vLLM data-parallel ranks
    and asserts the devices per node divide by TP. A replica within one node passes its own size (TP x DP),
    which always does; a replica spanning nodes passes the node's device count."""
    if ctx.spec.rollout_engine != "vllm":
        return []
    if ctx.version < (0, 7, 0) and str(ctx.get("rollout_mode", "sync")) != "async":
        return []  # 0.6.x's sync rollout starts no server
    tp, dp = _rollout_tp(ctx), ctx.number("rollout_dp", 1)
    gate = dp > 1 if ctx.version >= (0, 8, 0) else ctx.number("rollout_ep", 1) > 1
    per_node = _rollout_devices_per_node(ctx)
    world = tp * dp * ctx.number("rollout_pp", 1)
    if not gate or tp <= 0 or per_node <= 0 or world <= per_node or per_node % tp == 0:
        return []
    fits = [d for d in range(1, per_node + 1) if per_node % d == 0]
    return [error("gen_tp", f"rollout TP {tp} with rollout DP {dp} spans nodes of {per_node} devices: verl "
                  f"{ctx.spec.verl_version}'s vLLM server asserts 'gpus_per_node should be divisible by "
                  "tensor_model_parallel_size'", f"use a --gen-tp that divides {per_node} (one of {fits}), or drop "
                  f"the --override of {ctx.key('rollout_dp')}")]


def vllm_weight_bucket_fits_embedding(ctx: RuleContext) -> list[Finding]:
    """0.7.1's vLLM ServerAdapter.update_weights (the legacy workers' colocated rollout) sends the actor's weights
    through BucketedWeightSender, which asserts every tensor fits the bucket of
    rollout.checkpoint_engine.update_weights_bucket_megabytes (2048 by default). The largest is the embedding (or
    LM head), vocab x hidden, sent in the actor's own dtype: fp32 on FSDP (fsdp_config.model_dtype), bf16 on
    Megatron. 0.8.0 sends a tensor larger than the bucket on its own (it asserts only with shared memory)."""
    if ctx.version != (0, 7, 1) or ctx.spec.rollout_engine != "vllm" or ctx.engine_workers:
        return []
    vocab, hidden = ctx.facts.vocab_size, ctx.facts.hidden_size
    if not vocab or not hidden:
        return []
    wide = ctx.framework == "fsdp" and str(ctx.get("model_dtype", "fp32")).lower() in ("fp32", "float32")
    largest = vocab * hidden * (4 if wide else 2)
    bucket_mb = ctx.number("weights_bucket_mb", 2048)
    if largest <= bucket_mb << 20:
        return []
    needed = -(-largest // (512 << 20)) * 512  # MB, rounded up to a multiple of 512
    key = ctx.key("weights_bucket_mb")
    return [error("overrides", f"the embedding ({vocab} x {hidden}, {'fp32' if wide else 'bf16'}) is "
                  f"{largest / 2**20:.0f} MB, more than the {bucket_mb} MB weight-update bucket: verl "
                  f"{ctx.spec.verl_version}'s vLLM weight sender asserts every tensor fits it at the first weight "
                  "sync", f"--override {key}={needed}")]


def vllm_lora_rank(ctx: RuleContext) -> list[Finding]:
    """get_vllm_max_lora_rank (verl/workers/rollout/vllm_rollout/utils.py, 0.6.1+): a LoRA rank above vLLM's
    largest (512) raises ValueError, from validate_config (0.7.1+) or when the vLLM engine is built."""
    if ctx.spec.rollout_engine != "vllm" or ctx.version < (0, 6, 1):
        return []
    rank = ctx.number("lora_rank_new", 0) if ctx.version >= (0, 9, 0) else 0
    if rank <= 0:
        rank = ctx.number("lora_rank", 0)
    if rank <= VLLM_MAX_LORA_RANK or (ctx.version >= (0, 9, 0) and ctx.flag("lora_merge", False)):
        return []
    key = ctx.key("lora_rank_new") if ctx.version >= (0, 9, 0) and ctx.number("lora_rank_new", 0) > 0 else \
        ctx.key("lora_rank")
    return [error("override", f"{key}={rank}: verl {ctx.spec.verl_version} raises 'lora_rank must be less than or "
                  f"equal to {VLLM_MAX_LORA_RANK}' for the vLLM rollout", f"--override {key}={VLLM_MAX_LORA_RANK} "
                  "(or a smaller rank: 8, 16, 32, 64, 128, 256, 320)")]
