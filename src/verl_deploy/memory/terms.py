"""The memory terms, one function each, in bytes per device, with the formula that gave them.

Conventions (verl at 0.7-0.9, read from its workers): FSDP keeps the actor's parameters in fp32
(``model_dtype: fp32``, bf16 compute) sharded over the FSDP group, gradients in fp32 (freed after
the step), Adam's two moments in fp32; the reference model in bf16. Megatron keeps bf16
parameters split by TP x PP (routed experts by EP x ETP x PP), an fp32 gradient buffer, and
fp32 master weights + Adam moments (12 B/param) split over DP by the distributed optimizer.
Activations follow the usual transformer count (bf16) per token and layer; flash attention keeps
no score matrix. Logits are bf16 [tokens, vocab] (Megatron: fp32 over vocab/TP).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_deploy.memory import nccl
from verl_deploy.memory.model import ModelShape
from verl_deploy.memory.setup import Setup

GIB = 2 ** 30
ENTROPY_CHUNK = 2048  # verl's entropy_from_logits_with_chunking chunk size
WEIGHT_SYNC_BUCKET = 2 * GIB  # update_weights_bucket_megabytes default 2048
VERL = "verl v0.9.0 "
MCORE = "megatron-core 0.16.0 "
VLLM = "vLLM 0.24.0 "
SRC_FSDP_STATE = (VERL + "workers/engine/fsdp/transformer_impl.py:242 (training builds the model in fp32), "
                  "trainer/config/_generated_ppo_trainer.yaml:37 model_dtype fp32; torch.optim.AdamW keeps exp_avg, "
                  "exp_avg_sq in the parameters' dtype")
SRC_MCORE_STATE = (MCORE + "optimizer/distrib_optimizer.py:395 (fp32 main params of this rank's shard), "
                   "optimizer/__init__.py:615/652 (dense and expert params in separate optimizers, the expert one over "
                   "the expert-data-parallel group); " + VERL + "utils/megatron_utils.py:105 grad_reduce_in_fp32 True "
                   "(the gradient buffer is fp32)")


@dataclass(frozen=True)
class Term:
    bytes: float
    formula: str
    source: str = ""  # where the formula comes from: file:line in verl / megatron-core / vLLM, or a measured figure

    @property
    def gb(self) -> float:
        return self.bytes / GIB


def _b(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n:,.0f}"


# ---- weights, gradients, optimizer ------------------------------------------------------------

def actor_params(m: ModelShape, s: Setup) -> Term:
    if s.framework == "fsdp":
        return Term(m.params() * 4 / s.fsdp_shards, f"{_b(m.params())} params x 4 B (fp32) / {s.fsdp_shards} FSDP shards",
                    SRC_FSDP_STATE)
    dense = m.dense_params() * 2 / (s.tp * s.pp)
    expert = m.expert_params() * 2 / (s.ep * s.etp * s.pp)
    text = f"{_b(m.dense_params())} x 2 B / (TP {s.tp} x PP {s.pp})"
    if m.is_moe:
        text += f" + experts {_b(m.expert_params())} x 2 B / (EP {s.ep} x ETP {s.etp} x PP {s.pp})"
    return Term(dense + expert, text, SRC_MCORE_STATE)


def megatron_shard_params(m: ModelShape, s: Setup) -> float:
    """Parameters on one Megatron model-parallel rank."""
    return m.dense_params() / (s.tp * s.pp) + m.expert_params() / (s.ep * s.etp * s.pp)


def ref_params(m: ModelShape, s: Setup) -> Term:
    if not s.ref_loaded:
        return Term(0, "no reference model (use_kl_loss and use_kl_in_reward are off)",
                    VERL + "trainer/ppo/utils.py need_reference_policy")
    src = VERL + "workers/engine/fsdp/transformer_impl.py:243 (forward-only engines build the model in bf16)"
    if s.framework == "fsdp":
        return Term(m.params() * 2 / s.fsdp_shards, f"{_b(m.params())} x 2 B (bf16) / {s.fsdp_shards} FSDP shards", src)
    return Term(megatron_shard_params(m, s) * 2, "reference in bf16, split like the actor", SRC_MCORE_STATE)


def gradients(m: ModelShape, s: Setup) -> Term:
    if s.framework == "fsdp":
        return Term(m.params() * 4 / s.fsdp_shards, f"{_b(m.params())} x 4 B (fp32 grads) / {s.fsdp_shards} shards",
                    SRC_FSDP_STATE)
    return Term(megatron_shard_params(m, s) * 4, "fp32 gradient buffer of this rank's parameters", SRC_MCORE_STATE)


def optimizer_states(m: ModelShape, s: Setup) -> Term:
    """Adam: FSDP 8 B/param (moments; the fp32 params are the master copy), Megatron 12 B/param."""
    if s.framework == "fsdp":
        return Term(m.params() * 8 / s.fsdp_shards, f"{_b(m.params())} x 8 B (Adam m, v fp32) / {s.fsdp_shards} shards",
                    SRC_FSDP_STATE)
    # megatron-core's distributed optimizer shards dense params over the data-parallel group with context
    # parallel (world / (TP x PP)) and expert params over the expert-data-parallel group (world / (EP x ETP x PP)),
    # megatron/core/optimizer/__init__.py get_megatron_optimizer (expert_data_parallel_group for expert buffers)
    dense = m.dense_params() / (s.tp * s.pp)
    experts = m.expert_params() / (s.ep * s.etp * s.pp)
    dense_shards = max(1, s.world // max(1, s.tp * s.pp)) if s.distributed_optimizer else 1
    expert_shards = max(1, s.world // max(1, s.ep * s.etp * s.pp)) if s.distributed_optimizer else 1
    on_device = 1.0 - min(1.0, max(0.0, s.optimizer_offload_fraction))
    text = f"this rank's params x 12 B (fp32 master + Adam m, v) / DP x CP {dense_shards}" + \
        ("" if s.distributed_optimizer else " (no distributed optimizer)")
    if experts:
        text += f"; experts / expert-DP {expert_shards}"
    if on_device < 1:
        text += f" x {on_device:g} on device (optimizer_offload_fraction {s.optimizer_offload_fraction:g})"
    return Term((dense / dense_shards + experts / expert_shards) * 12 * on_device, text, SRC_MCORE_STATE)


SRC_FSDP1_ROOT = ("torch/distributed/fsdp/_runtime_utils.py:493-500 (FSDP1 never frees the root unit's gathered "
                  "params after the forward), _flat_param.py (a unit's params are split views of one flat parameter, "
                  "whose gradient is summed when every view's has arrived); " + VERL + "utils/fsdp_utils.py get_fsdp_wrap_policy (decoder layers "
                  "only: the embeddings and lm_head are the root's), apply_fsdp2 / _select_fsdp2_wrap_targets (FSDP2 "
                  "wraps embed_tokens and lm_head apart when untied)")


def fsdp_unsharded(m: ModelShape, s: Setup, *, training: bool) -> Term:
    """FSDP gathers each layer whole (bf16) while it runs, the next one prefetched, and the lm_head
    for the logits; the backward also holds the gathered layer's gradient before reduce-scatter. FSDP1 (actor.strategy
    fsdp) keeps its root unit gathered from the forward to the end of the backward: untied input embeddings too."""
    layer = (m.params() - m.vocab * m.hidden * (1 if m.tied_embeddings else 2)) / m.layers
    fsdp1 = s.fsdp_strategy == "fsdp"
    root_embeddings = m.vocab * m.hidden if (fsdp1 and not m.tied_embeddings) else 0
    # FSDP1's root is one flat parameter: the lm_head's gradient (a view's) is summed into it only when the
    # embeddings' arrives, at the end of the backward, so it stays alive while the layers are rebuilt
    root_grad = m.vocab * m.hidden if (fsdp1 and training) else 0
    held = 2 * layer + m.vocab * m.hidden + root_embeddings
    total = held * 2 + (layer * 2 if training else 0) + root_grad * 2
    return Term(total, f"2 gathered layers of {_b(layer)} + lm_head {_b(m.vocab * m.hidden)}"
                       + (f" + input embeddings {_b(root_embeddings)} (FSDP1 root unit)" if root_embeddings else "")
                       + " params x 2 B (bf16)" + (" + one layer's gradient" if training else "")
                       + (" + the lm_head's gradient, held to the end of the backward (FSDP1 root)" if root_grad else ""),
                "torch FSDP: all-gather of a unit's params in param_dtype bf16, the next unit prefetched "
                "(backward_prefetch), reduce-scatter of its full gradient" + ("; " + SRC_FSDP1_ROOT if fsdp1 else ""))


# ---- tokens per micro-batch -------------------------------------------------------------------

SRC_DYNAMIC = (VERL + "utils/seqlen_balancing.py:348 rearrange_micro_batches (micro-batches = ceil(rank tokens / "
               "(max_token_len_per_gpu x SP or CP)), at most one per sequence, rounded up to a multiple of the "
               "pipeline's microbatch group with VPP; sequences balanced over them by Karmarkar-Karp, so before 0.9.1 a "
               "micro-batch may pass the budget; 0.9.1 adds micro-batches until none does), workers/engine/utils.py:111; "
               "the update cuts each mini-batch (ppo_mini_batch_size x n / DP sequences), log-prob the rank's whole "
               "batch (engine_workers.py infer_batch)")
HARD_TOKEN_LIMIT = (0, 9, 1)  # the release whose rearrange_micro_batches keeps every micro-batch within the budget


def rank_sequences(s: Setup, *, log_prob: bool) -> int:
    """Sequences one DP rank cuts into micro-batches: its share of a mini-batch for the update, of the whole batch
    for log-prob."""
    batch = s.batch_size if log_prob else s.mini_batch_size
    return max(1, -(-batch * s.n_resp // max(1, s.dp)))


def dynamic_micro_batches(s: Setup, sequences: int, seq: int, budget: int) -> tuple[int, int]:
    """(micro-batches, sequences in the largest) verl's rearrange_micro_batches makes of a rank's sequences, all
    seq tokens long (then its balanced partition puts ceil(sequences / micro-batches) in the largest)."""
    from verl_deploy.verl_release import release_numbers

    cap = max(1, budget * (s.sp if s.framework == "fsdp" else s.cp))
    step = s.pp if s.framework == "megatron" and s.vpp and s.vpp > 1 else 1
    count = min(sequences, max(1, -(-sequences * seq // cap)))
    count = min(sequences, -(-count // step) * step)
    if release_numbers(s.verl_version) >= HARD_TOKEN_LIMIT:
        while -(-sequences // count) * seq > cap and count < sequences:
            count = min(sequences, count + step)
    return count, -(-sequences // count)


def tokens_per_device(s: Setup, *, log_prob: bool) -> tuple[int, str]:
    """Tokens one device holds in one forward: with dynamic batching the rank's sequences balanced over the
    micro-batches its token budget asks for (never more than the budget, and only what the rank gets), else
    micro-batch x length; all at this step's prompt + response length."""
    seq = s.prompt_len + s.response_len
    split = s.sp if s.framework == "fsdp" else s.cp
    sequences = rank_sequences(s, log_prob=log_prob)
    dynamic = s.log_prob_dynamic_bsz if log_prob else s.dynamic_bsz
    if dynamic:
        budget = s.log_prob_max_token_len if log_prob else s.max_token_len
        count, per_micro = dynamic_micro_batches(s, sequences, seq, budget)
        return (max(1, per_micro * seq // split),
                f"dynamic-batch budget {budget} tokens: the rank's {sequences} sequences of {seq} tokens in {count} "
                f"micro-batch(es) of at most {per_micro}" + (f" / {split}" if split > 1 else ""))
    micro = min(s.log_prob_micro_batch if log_prob else s.micro_batch, sequences)
    longer = max(0, (s.longest_response_len or 0) - s.response_len)
    if longer:  # the step's largest micro-batch: the longest response beside micro - 1 typical sequences
        return (max(1, (micro * seq + longer) // split),
                f"the largest micro-batch: {micro - 1} x {seq} tokens + one of {seq + longer} (the step's longest "
                f"response)" + (f" / {split}" if split > 1 else ""))
    return (max(1, micro * seq // split),
            f"micro-batch {micro} x {seq} tokens" + (f" / {split}" if split > 1 else ""))


# ---- activations and logits -------------------------------------------------------------------

SRC_ACT_HF = "measured: bf16 tensors an HF decoder layer saves for backward (norms, q/k/v, flash-attn out, SwiGLU)"
SRC_ACT_MCORE = (MCORE + "transformer/transformer_layer.py (TE LayerNormLinear keeps input + norm out), "
                 "fusions/fused_bias_swiglu.py:121 (fc1 out); Megatron-LM training/theoretical_memory_usage.py "
                 "compute_activation_memory (sbh(18 + 4f/h) / TP with sequence parallel) less its dropout masks")
SRC_RECOMPUTE = MCORE + "transformer/transformer_block.py:446 _checkpointed_forward (uniform: chunks of N layers, " \
    "block: the first N layers of a stage)"
SRC_PP = ("Megatron-LM training/theoretical_memory_usage.py compute_activation_memory: the first stage holds "
          "min(PP, micro-batches) in flight, x (1 + (PP-1)/(PP x VPP)) with virtual pipeline")


def layer_activation_bytes(m: ModelShape) -> int:
    """bf16 activations one token keeps for backward in one layer of the HF model FSDP trains (flash attention, SwiGLU)."""
    width = 5 * m.hidden + 2 * m.q_dim + 2 * m.kv_dim + 4 * m.mlp_act_width()
    if m.is_moe:
        width += 2 * m.experts_per_token * m.hidden  # token permutation for dispatch and combine
    return 2 * width


SRC_MOE_SAVES = (MCORE + "transformer/moe/experts.py:628-745 (TEGroupedMLP.forward multiplies the routing probs into the "
                 "activation, fc1 keeps its input), transformer/moe/token_dispatcher.py:833 (the all-to-all combine "
                 "unpermutes without probs), transformer/moe/moe_utils.py:289/380 (permute saves indices only; "
                 "unpermute's scatter_add needs no tokens): a top-k copy keeps its permuted input, not its output")


def _attention_saves(m: ModelShape) -> dict[str, float]:
    """Per token and layer, bytes the attention block keeps: the qkv LayerNormLinear its input and norm output
    (MLA: a separate input norm, its input and output), flash attention q, k, v and its output (the projection's
    input)."""
    h = m.hidden
    return {"attn_norm_in": 2 * h, "attn_norm_out": 2 * h, "qkv": 2 * m.q_dim + 4 * m.kv_dim, "attn_out": 2 * m.q_dim}


def _dense_mlp_saves(m: ModelShape) -> dict[str, float]:
    """A dense MLP: fc1's LayerNormLinear input and norm output, fc1's output (gate and up) and SwiGLU's (fc2's input)."""
    h, f = m.hidden, m.intermediate
    return {"mlp_in": 2 * h, "mlp_norm_out": 2 * h, "fc1": 4 * f, "act": 2 * f}


def _moe_saves(m: ModelShape, s: Setup) -> dict[str, float]:
    """An MoE layer: the pre-MLP norm (TENorm: its input, and its output, which the router and shared experts keep),
    per top-k copy its permuted input (fc1's input, all-gathered over ETP) and fc1 / SwiGLU at moe_intermediate,
    the shared experts' fc1 and SwiGLU, the router's fp32 logits and probs."""
    h, k, mi = m.hidden, m.experts_per_token, m.moe_intermediate
    return {"moe_norm_in": 2 * h, "moe_norm_out": 2 * h, "routed_in": k * s.etp * 2 * h, "routed_fc1": k * 4 * mi,
            "routed_act": k * 2 * mi, "shared": 6 * m.shared_expert_intermediate, "router": 8 * m.experts}


# recompute_granularity selective: what each of recompute_modules drops from a layer's saved tensors (the rest stays)
SELECTIVE_DROPS: dict[str, tuple[str, ...]] = {
    "core_attn": (),  # TE flash attention: the checkpoint keeps q, k, v; the output is the projection's input anyway
    "layernorm": ("attn_norm_out", "moe_norm_out"),  # only separate norms: MLA's input norm, MoE's pre-MLP norm
    "mlp": ("mlp_norm_out", "fc1", "act"),  # dense MLPs only: the checkpoint keeps its input
    "moe": ("routed_in", "routed_fc1", "routed_act", "shared", "router"),  # the MoE layer keeps its input
    "moe_act": ("routed_act",),  # output-discarding checkpoint of the experts' activation
    "shared_experts": ("shared",),
    "mla_up_proj": ("qkv",),  # MLA: q, k, v after the up-projection and RoPE, rebuilt from the latents
}
SRC_SELECTIVE = (MCORE + "transformer/transformer_config.py:411 recompute_modules (default [core_attn]), "
                 "transformer/transformer_layer.py:379-447 (layernorm only where the norm is not fused: "
                 "gpt_layer_specs.py:265 MoE pre_mlp_layernorm, MLA input_layernorm; mlp only for dense layers), "
                 "transformer/moe/moe_layer.py:432 (moe), moe/experts.py:737 (moe_act), "
                 "multi_latent_attention.py:838 (mla_up_proj), attention.py:1134 (core_attn)")


def _separate_norms(m: ModelShape) -> tuple[str, ...]:
    """Norm outputs that are tensors of their own (the TE spec fuses the others into LayerNormLinear)."""
    return ("attn_norm_out",) if m.kv_lora_rank else ()


def selective_dropped(m: ModelShape, s: Setup, moe_layer: bool) -> set[str]:
    """The saved parts selective recompute drops in one (MoE or dense) layer, from recompute_modules."""
    if s.recompute != "selective":
        return set()
    dropped: set[str] = set()
    for module in s.recompute_modules:
        parts = set(SELECTIVE_DROPS.get(module, ()))
        if module == "layernorm":
            parts &= set(_separate_norms(m)) | ({"moe_norm_out"} if moe_layer else set())
        if module == "mlp" and moe_layer:
            parts = set()
        if module == "mla_up_proj" and not m.kv_lora_rank:
            parts = set()
        dropped |= parts
    return dropped


def _layer_kinds(m: ModelShape, s: Setup) -> list[tuple[float, dict[str, float], bool]]:
    """(share of the layers, the parts one token keeps, whether MoE) for each kind of layer."""
    attention = _attention_saves(m)
    dense = {**attention, **_dense_mlp_saves(m)}
    if not m.is_moe:
        return [(1.0, dense, False)]
    share = m.moe_layers / m.layers
    kinds = [(share, {**attention, **_moe_saves(m, s)}, True)]
    return kinds + ([(1 - share, dense, False)] if share < 1 else [])


def megatron_layer_bytes(m: ModelShape, s: Setup, *, dropped: bool = False) -> int:
    """Bytes one token of the sequence keeps for backward in one Megatron layer, on one rank.

    The parts are _attention_saves, _dense_mlp_saves and _moe_saves (an MoE model's dense layers weighted by their
    share). With selective recompute, ``dropped=False`` gives what stays (recompute_modules' parts removed) and
    ``dropped=True`` what one layer rebuilds in the backward. verl turns sequence parallel on whenever TP > 1
    (workers/config/engine.py:237), so every part is split over TP. For a GeLU MLP the whole is Megatron's own
    sbh(18 + 4f/h) without its two dropout masks (verl's models have none)."""
    total = 0.0
    for share, parts, moe in _layer_kinds(m, s):
        gone = selective_dropped(m, s, moe)
        total += share * sum(v for k, v in parts.items() if (k in gone) == dropped)
    return int(total / s.tp)


def megatron_layer_peak_dropped(m: ModelShape, s: Setup) -> int:
    """The largest per-token bytes one layer rebuilds when its selectively recomputed modules run again."""
    most = 0.0
    for _share, parts, moe in _layer_kinds(m, s):
        gone = selective_dropped(m, s, moe)
        most = max(most, sum(v for k, v in parts.items() if k in gone))
    return int(most / s.tp)


def _layers_per_stage(m: ModelShape, s: Setup) -> int:
    return -(-m.layers // s.pp)


def micro_batches(s: Setup, tokens: int) -> int:
    """Micro-batches one DP rank runs per mini-batch (what the pipeline can keep in flight)."""
    seq = s.prompt_len + s.response_len
    per_rank = s.mini_batch_size * s.n_resp * seq / max(1, s.dp * s.cp)
    return max(1, int(-(-per_rank // max(1, tokens))))


def pipeline_in_flight(s: Setup, tokens: int) -> float:
    """Layers' worth of micro-batches the first stage holds, as a multiple of one stage's layers."""
    if s.pp <= 1:
        return 1.0
    if s.vpp and s.vpp > 1:
        return s.pp * (1 + (s.pp - 1) / (s.pp * s.vpp))
    return float(min(s.pp, micro_batches(s, tokens)))


def activations(m: ModelShape, s: Setup, tokens: int) -> Term:
    """Training forward kept for backward, with or without recompute / gradient checkpointing; the layer the
    backward rebuilds is recompute_working()."""
    keep = 2 * m.hidden  # a checkpointed layer (or chunk) keeps its input only
    layers = _layers_per_stage(m, s)
    working = recompute_working(m, s, tokens)
    if s.framework == "fsdp":
        full = layer_activation_bytes(m)
        if s.gradient_checkpointing:
            total = tokens * layers * keep + working
            text = f"{tokens} tokens x ({layers} layers x {keep} B checkpointed input + one layer {full} B)"
        else:
            total = tokens * layers * full
            text = f"{tokens} tokens x {layers} layers x {full} B (no gradient checkpointing)"
        return Term(total, text, SRC_ACT_HF)
    full = megatron_layer_bytes(m, s)
    keep_rank = keep / s.tp  # sequence parallel: the checkpointed input is this rank's shard
    chunk = max(1, s.recompute_layers or 1)
    in_flight = pipeline_in_flight(s, tokens)
    if s.recompute == "selective":  # each layer keeps what recompute_modules leave; one layer rebuilds the rest
        how = (f"{layers} layers x {full} B kept (selective: {', '.join(s.recompute_modules) or 'no modules'})"
               + (f" + one layer's {megatron_layer_peak_dropped(m, s)} B rebuilt" if working else ""))
        return Term(tokens * layers * full * in_flight + working,
                    f"{tokens} tokens x ({how}) per rank (TP {s.tp}, sequence parallel)",
                    SRC_ACT_MCORE + ("; " + SRC_MOE_SAVES if m.is_moe else "") + "; " + SRC_SELECTIVE
                    + ("; " + SRC_PP if s.pp > 1 else ""))
    stored_per_token, how = _megatron_stored(s, layers, full, keep_rank, chunk)
    working_layers = _rebuilt_layers(m, s)
    text = (f"{tokens} tokens x ({how}) per rank (TP {s.tp}, sequence parallel)"
            + (f" x {in_flight:g} micro-batches in flight (PP {s.pp}" + (f", VPP {s.vpp}" if s.vpp else "") + ")"
               if in_flight != 1 else "")
            + (f" + {working_layers} layer(s) recomputing" if working_layers else ""))
    return Term(tokens * stored_per_token * in_flight + working, text,
                SRC_ACT_MCORE + ("; " + SRC_MOE_SAVES if m.is_moe else "") + ("; " + SRC_RECOMPUTE if s.recompute == "full" else "") + ("; " + SRC_PP if s.pp > 1 else ""))


def _megatron_stored(s: Setup, layers: int, full: int, keep_rank: float, chunk: int) -> tuple[float, str]:
    """(bytes per token a Megatron rank keeps for the backward, how) with full recompute or none."""
    if s.recompute == "full" and s.recompute_method == "block":
        recomputed = min(layers, chunk)
        return (recomputed * keep_rank + (layers - recomputed) * full,
                f"{recomputed} recomputed layers x {keep_rank:.0f} B + {layers - recomputed} layers x {full} B")
    if s.recompute == "full":  # uniform (Megatron's default method): one input per chunk of N layers
        chunks = -(-layers // chunk)
        return chunks * keep_rank, f"{chunks} checkpointed chunks of {chunk} layers x {keep_rank:.0f} B"
    return layers * full, f"{layers} layers x {full} B"  # no recompute


def recompute_working(m: ModelShape, s: Setup, tokens: int) -> float:
    """Bytes of the layer(s) the backward rebuilds (gradient checkpointing, full or selective recompute): alive
    only while a checkpointed layer runs its backward (counted in activations())."""
    if s.framework == "fsdp":
        return float(tokens * layer_activation_bytes(m)) if s.gradient_checkpointing else 0.0
    if s.recompute == "selective":
        return float(tokens * megatron_layer_peak_dropped(m, s))
    return float(tokens * _rebuilt_layers(m, s) * megatron_layer_bytes(m, s))


def _rebuilt_layers(m: ModelShape, s: Setup) -> int:
    """Megatron layers the backward reruns at once: one with block recompute, a chunk with uniform, none without."""
    if s.recompute != "full":
        return 0
    return 1 if s.recompute_method == "block" else min(max(1, s.recompute_layers or 1), _layers_per_stage(m, s))


SRC_BACKWARD_ORDER = ("autograd runs the backward from the loss: the log-prob / cross-entropy and lm_head (output "
                      "layer) backward use the [tokens, vocab] logits and their gradient and free them before the "
                      "last checkpointed layer is run again (torch/utils/checkpoint.py recomputes a layer when its "
                      "backward is reached)")


def logits_beyond_recompute(logit: Term, working: float) -> Term:
    """The update's logits peak counted only where it passes the rebuilt layer: the two are never alive together,
    so the backward's peak is the saved activations plus the larger of the two."""
    if working <= 0:
        return logit
    kept = max(0.0, logit.bytes - working)
    return Term(kept, f"{logit.formula}; freed before the backward rebuilds a checkpointed layer "
                      f"({working / GIB:.1f} GiB, counted in activations): "
                      + (f"{kept / GIB:.1f} GiB beyond it" if kept else "the rebuilt layer is the larger"),
                logit.source + "; " + SRC_BACKWARD_ORDER)


def forward_activations(m: ModelShape, s: Setup, tokens: int) -> Term:
    """Forward without grad (log-prob): about two layers' worth alive at a time."""
    full = layer_activation_bytes(m) if s.framework == "fsdp" else megatron_layer_bytes(m, s.with_(recompute=None)) * s.tp
    return Term(tokens * 2 * full / s.tp, f"{tokens} tokens x 2 layers x {full} B" + (f" / TP {s.tp}" if s.tp > 1 else ""),
                "no_grad forward: a layer's input and output alive at once")


SRC_LOGITS_MCORE = (MCORE + "transformer/module.py:495 (Float16Module upcasts the last stage's logits to fp32; verl "
                    "wraps with it, utils/megatron_utils.py:241), tensor_parallel/cross_entropy.py:187 (exp_logits "
                    "saved); " + VERL + "workers/engine/megatron/transformer_impl.py:1197 (logits.clone() for "
                    "entropy), utils/megatron/tensor_parallel.py:126 (entropy saves its softmax)")
SRC_LOGITS_FSDP = (VERL + "workers/engine/fsdp/transformer_impl.py (HF lm_head output, bf16 under FSDP mixed "
                   "precision; log-probs row by row, utils/torch_functional.py:173), utils/torch_functional.py:231 "
                   "entropy_from_logits (bf16 softmax + products), :266 chunked (fp32 per 2048-token chunk)")


def logits(m: ModelShape, s: Setup, tokens: int, *, training: bool, entropy: bool) -> Term:
    """The [tokens, vocab] peak: logits, and entropy's softmax copies unless chunked/checkpointed."""
    vocab = m.vocab / s.tp
    if s.fused_kernels:  # the kernel tiles over vocab: per token only its log-prob, entropy and 3 running stats (fp32)
        return Term(tokens * 6 * 4, f"{tokens} tokens x 6 fp32 scalars (fused kernels: no [tokens, vocab] logits)",
                    VERL + "utils/kernel/linear_cross_entropy.py:77-80 (efficient_entropy_forward saves hidden, "
                           "weight, labels and per-token maximum/accumulate/entropy_b)")
    if s.framework == "megatron":
        # fp32 logits (Float16Module) + cross-entropy's saved exp (4) [+ the logits' grad in the backward (4)]
        per = 4 + 4 + (4 if training else 0)
        text = f"{tokens} tokens x vocab {m.vocab}/{s.tp} x {per} B (fp32 logits, cross-entropy exp" + \
            (", grad)" if training else ")")
        total = tokens * vocab * per
        if entropy:
            chunked = s.entropy_chunking and not training  # with grad, every chunk's softmax is saved anyway
            rows = min(tokens, ENTROPY_CHUNK) if chunked else tokens
            total += tokens * vocab * 4 + rows * vocab * 4
            text += " + entropy: the logits' fp32 clone and its softmax" + (f" over {rows}-token chunks" if chunked else "")
        return Term(total, text, SRC_LOGITS_MCORE)
    per = 2 + (2 if training else 0)  # bf16 logits (+ their grad); log-prob is taken row by row
    text = f"{tokens} tokens x vocab {m.vocab} x {per} B (bf16 logits" + (" + grad)" if training else ")")
    total = tokens * vocab * per
    if entropy:
        if s.entropy_chunking or (training and s.entropy_checkpointing):
            rows = min(tokens, ENTROPY_CHUNK)
            total += rows * vocab * 6
            text += f" + entropy over {rows}-token chunks x 6 B"
        else:
            total += tokens * vocab * 6
            text += " + entropy softmax copies x 6 B (no chunking)"
    return Term(total, text, SRC_LOGITS_FSDP)


def moe_dispatch_buffers(m: ModelShape, s: Setup, tokens: int) -> Term:
    """The all-to-all's send and receive buffers for one MoE layer's top-k token copies (bf16), alive while it runs."""
    if not m.is_moe or s.framework != "megatron":
        return Term(0, "dense model: no token dispatch")
    copies = tokens / s.tp * m.experts_per_token * s.etp
    return Term(copies * m.hidden * 2 * 2, f"{tokens}/{s.tp} tokens x top-{m.experts_per_token} x ETP {s.etp} x hidden "
                                         f"{m.hidden} x 2 B x 2 (dispatch and combine buffers)",
                MCORE + "transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher (all_to_all of permuted tokens)")


# ---- rollout ---------------------------------------------------------------------------------

def rollout_weights(m: ModelShape, s: Setup) -> Term:
    if m.is_moe and s.rollout_ep > 1:
        return Term(m.dense_params() * 2 / s.rollout_tp + m.expert_params() * 2 / s.rollout_ep,
                    f"{_b(m.dense_params())} x 2 B / rollout TP {s.rollout_tp} + experts {_b(m.expert_params())} "
                    f"x 2 B / rollout EP {s.rollout_ep}", VLLM + "model weights in the model's dtype, sharded by TP/EP")
    return Term(m.params() * 2 / s.rollout_tp, f"{_b(m.params())} x 2 B (bf16) / rollout TP {s.rollout_tp}",
                VLLM + "model weights in the model's dtype, sharded by TP")


def kv_per_token(m: ModelShape, s: Setup) -> Term:
    per = m.kv_bytes_per_token() / s.rollout_tp if not m.kv_lora_rank else m.kv_bytes_per_token()
    if m.kv_lora_rank:
        text = f"{m.layers} layers x (kv_lora_rank {m.kv_lora_rank} + rope {m.qk_rope_head_dim}) x 2 B (MLA latent)"
    else:
        text = (f"{m.layers} layers x {m.kv_heads} KV heads x {m.head_dim} head dim x 2 B x 2 (K, V) / rollout TP "
                f"{s.rollout_tp}")
    return Term(per, text, VLLM + "v1/kv_cache_interface.py AttentionSpec.page_size_bytes (2 x block x kv heads x "
                           "head size x dtype; MLA: one latent)")


def rollout_activation(m: ModelShape, s: Setup) -> Term:
    """vLLM's profiling peak: one batch of max_num_batched_tokens through a layer, and the sampler."""
    tokens = s.max_num_batched_tokens
    act = tokens * (4 * m.hidden + 2 * m.q_dim + 3 * m.mlp_act_width() / s.rollout_tp) * 2
    sampler = min(s.max_num_seqs, tokens) * m.vocab * 4 / s.rollout_tp
    return Term(act + sampler, f"max_num_batched_tokens {tokens} through one layer + {min(s.max_num_seqs, tokens)} "
                               f"sequences' fp32 logits",
                VLLM + "v1/worker/gpu_model_runner.py:6239 profile_run (_dummy_run of max_num_batched_tokens, "
                       ":6045 _dummy_sampler_run of max_num_seqs)")


# ---- allowances outside what the phases allocate --------------------------------------------------

CONTEXT_GB = {"gpu": 0.75, "npu": 1.5}  # the process's CUDA / CANN context and runtime workspaces
SRC_CONTEXT = ("assumed: CUDA context + cuBLAS/cuDNN workspaces of one process (~0.5-1 GiB on H100-class GPUs); "
               "CANN context + runtime on 910B/A3 (~1.5 GiB); one process holds trainer and engine (verl hybrid worker)")
HCCL_COMM_MIB = 2 * 200  # HCCL_BUFFSIZE 200 MB by default; a communicator holds two (CANN HCCL environment docs)
GRAPHS_GB = {"gpu": 1.0, "npu": 1.5}
FRAGMENTATION = 0.05  # of the usable memory, in the phases the caching allocator serves (training)


def device_context(s: Setup) -> Term:
    """Memory the device runtime keeps for the process, outside every torch allocation."""
    gb = CONTEXT_GB.get(s.device, 1.0)
    return Term(gb * GIB, f"{s.device.upper()} context and runtime of the worker process, {gb:g} GiB", SRC_CONTEXT)


def _local(size: int, stride: int, per_node: int) -> int:
    """Ranks of a group on one node: members `stride` ranks apart, ranks numbered node by node."""
    return max(1, min(size, per_node // max(1, stride))) if stride < per_node else 1


def communicator_groups(s: Setup, *, rollout_side: bool = True,
                        trainer_side: bool = True) -> list[tuple[str, int, int]]:
    """(group, ranks, ranks on one node) of the process groups a device's worker talks over, each one an NCCL/HCCL
    communicator with its own buffers: the trainer's (_megatron_groups, _fsdp_groups), the split modes' weight
    sync joining the two pools (checkpoint engine, nccl / hccl), and the engine's (_engine_groups)."""
    groups: list[tuple[str, int, int]] = []
    if trainer_side:
        groups += _megatron_groups(s) if s.framework == "megatron" else _fsdp_groups(s)
    if not s.colocated:  # both pools' devices on each node
        groups.append(("weight sync", s.world + s.rollout_world,
                       min(s.world + s.rollout_world, s.devices_per_node + s.rollout_devices_per_node)))
    if rollout_side:
        groups += _engine_groups(s)
    return groups


def _megatron_groups(s: Setup) -> list[tuple[str, int, int]]:
    """Megatron orders ranks tp-cp-dp-pp (experts: etp-ep-dp-pp) and keeps the world group apart: the distributed
    optimizer's grad-norm all-reduce runs over it (megatron-core distrib_optimizer.py get_grad_stats_parallel_group),
    as do verl's barriers."""
    per_node, groups = s.devices_per_node, []
    for name, size, stride in (("TP", s.tp, 1), ("CP", s.cp, s.tp), ("DP", s.dp, s.tp * s.cp),
                               ("PP", s.pp, s.tp * s.cp * s.dp)):
        if size > 1:
            groups.append((name, size, _local(size, stride, per_node)))
    if s.cp > 1:  # gradients and the distributed optimizer reduce over DP x CP (with_context_parallel=True)
        groups.append(("DP x CP", s.dp * s.cp, _local(s.dp * s.cp, s.tp, per_node)))
    expert_dp = s.world // max(1, s.ep * s.etp * s.pp)
    if s.ep > 1:
        groups.append(("EP", s.ep, _local(s.ep, s.etp, per_node)))
    if s.ep > 1 and expert_dp > 1:
        groups.append(("expert-DP", expert_dp, _local(expert_dp, s.etp * s.ep, per_node)))
    return groups + ([("world", s.world, min(s.world, per_node))] if s.world > 1 else [])


def _fsdp_groups(s: Setup) -> list[tuple[str, int, int]]:
    """verl's FSDP mesh is the world (the default group itself), or (replicate, shard) with fsdp_size beside the
    world; the Ulysses mesh (dp, sp) adds its SP group."""
    per_node, groups = s.devices_per_node, []
    shards, replicas = s.fsdp_shards, s.world // max(1, s.fsdp_shards)
    if shards > 1:
        groups.append(("FSDP", shards, _local(shards, 1, per_node)))
    if replicas > 1:
        groups += [("FSDP replicate", replicas, _local(replicas, shards, per_node)),
                   ("world", s.world, min(s.world, per_node))]
    if s.sp > 1:
        groups.append(("Ulysses SP", s.sp, _local(s.sp, 1, per_node)))
    return groups


def _engine_groups(s: Setup) -> list[tuple[str, int, int]]:
    """vLLM's TP group is two communicators on GPUs: its PyNccl one (all-reduce) and the torch group's (the logits'
    all-gather, distributed/device_communicators/base_device_communicator.py all_gather); vllm-ascend's
    NPUCommunicator has no PyHccl one yet, every collective goes through the torch group."""
    per_node, groups = s.rollout_devices_per_node, []
    if s.rollout_tp > 1:
        local = _local(s.rollout_tp, 1, per_node)
        groups.append(("rollout TP (torch group)", s.rollout_tp, local))
        if s.device != "npu":
            groups.insert(0, ("rollout TP (engine's own)", s.rollout_tp, local))
    if s.rollout_ep > 1:
        groups.append(("rollout EP", s.rollout_ep, _local(s.rollout_ep, 1, per_node)))
    return groups


def communicators(s: Setup, *, rollout_side: bool = True, trainer_side: bool = True) -> list[str]:
    """The names of the process groups (communicator_groups) a device's worker talks over."""
    return [name for name, _, _ in communicator_groups(s, rollout_side=rollout_side, trainer_side=trainer_side)]


def comm_buffers(s: Setup, *, rollout_side: bool = True, trainer_side: bool = True) -> Term:
    """NCCL/HCCL buffers of the communicators alive on the device (vLLM makes its own before it measures memory,
    so they are outside gpu_memory_utilization: vLLM 0.24.0 v1/worker/gpu_worker.py:318-341)."""
    groups = communicator_groups(s, rollout_side=rollout_side, trainer_side=trainer_side)
    if s.device == "npu":
        return Term(len(groups) * HCCL_COMM_MIB * 2 ** 20,
                    f"{len(groups)} communicators ({', '.join(n for n, _, _ in groups) or 'none'}) x {HCCL_COMM_MIB} "
                    f"MiB (HCCL_BUFFSIZE 200 MB x 2)",
                    "HCCL_BUFFSIZE default 200 MB, two per communicator (CANN docs); " + VLLM +
                    "v1/worker/gpu_worker.py:318")
    total, parts = 0, []
    hows: dict[str, int] = {}  # each distinct figure once, with the GPUs on a node it is for
    for name, _, local in groups:
        mib, how = nccl.communicator_mib(s.nccl_version, local, s.nvls)
        total += mib
        parts.append(f"{name} {mib}")
        hows.setdefault(how, local)
    detail = "; ".join(f"{local} of its GPUs on a node: {how}" for how, local in hows.items())
    return Term(total * 2 ** 20, f"{len(groups)} communicators (" + (", ".join(parts) or "none") + " MiB)"
                + (f" [{detail}]" if detail else ""),
                "NCCL v2.21.5 / v2.26.2 source (verl_deploy/memory/nccl.py gives file:line); " + VLLM +
                "v1/worker/gpu_worker.py:318")


def graphs_outside_budget(s: Setup) -> bool:
    """Whether the engine's captured graphs sit outside gpu_memory_utilization: vLLM 0.24 (verl 0.9's GPU image) and
    vLLM 0.20.2 (verl 0.8's) measure them and take them from the KV cache (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
    defaults to 1: envs.py, v1/worker/gpu_worker.py:467); the older vLLM of earlier verl images, SGLang and
    vllm-ascend's ACL graphs come on top."""
    if s.enforce_eager:
        return False
    return s.device == "npu" or s.rollout_engine == "sglang" or not s.verl_version.startswith(("0.8", "0.9", "1."))


def graph_memory(s: Setup) -> Term:
    """CUDA/ACL graphs the engine captured (enforce_eager off); they stay on the device while the engine sleeps
    (verl docs/perf/perf_tuning.rst: cudagraph memory cannot be offloaded)."""
    if s.enforce_eager:
        return Term(0, "enforce_eager: no graphs captured")
    gb = GRAPHS_GB.get(s.device, 1.0)
    where = "outside gpu_memory_utilization" if graphs_outside_budget(s) else \
        "inside gpu_memory_utilization (vLLM 0.24 takes them from the KV cache)"
    return Term(gb * GIB, f"captured graphs, {gb:g} GiB, {where}",
                "measured order of magnitude: vLLM logs 'Graph capturing finished ... took 0.5-1.5 GiB' at the "
                "default capture sizes; " + VLLM + "v1/worker/gpu_worker.py:444-492")


def engine_overhead(s: Setup, *, awake: bool = False) -> Term:
    """The engine's memory outside gpu_memory_utilization while it generates (awake), or what stays on the device
    while it sleeps: its communicators' buffers and its captured graphs (asleep always, awake where not in the budget)."""
    comm = comm_buffers(s, trainer_side=False)
    graphs = graph_memory(s)
    kept = graphs.bytes if (not awake or graphs_outside_budget(s)) else 0.0
    return Term(comm.bytes + kept, comm.formula + (f" + {graphs.formula}" if kept else ""),
                comm.source + "; " + graphs.source)


def fragmentation(usable_gb: float) -> Term:
    """What the caching allocator reserves but cannot hand out again in a training phase."""
    return Term(FRAGMENTATION * usable_gb * GIB, f"{FRAGMENTATION:.0%} of {usable_gb:.1f} GiB usable",
                "assumed 5 % of the device; verl #2828's OOM trace shows 6.77 GiB reserved-but-unused of 79.11 GiB")


# ---- critic (PPO with GAE) ---------------------------------------------------------------------

SRC_CRITIC = (VERL + "trainer/config/_generated_ppo_trainer.yaml critic (fsdp model_dtype fp32, Adam; "
              "enable_gradient_checkpointing true, ppo_max_token_len_per_gpu 32768); the value model is the "
              "backbone with a hidden x 1 head in place of the lm_head (AutoModelForTokenClassification)")


def critic_params_count(m: ModelShape) -> float:
    return m.params() - (0 if m.tied_embeddings else m.vocab * m.hidden) + m.hidden


def critic_state(m: ModelShape, s: Setup, *, params: bool, grads: bool, optimizer: bool) -> Term:
    """The critic's parameters, gradients and Adam state on one device (what is resident in a phase)."""
    n = critic_params_count(m)
    if s.framework == "fsdp":
        per = (4 if params else 0) + (4 if grads else 0) + (8 if optimizer else 0)
        return Term(n * per / s.fsdp_shards, f"critic {_b(n)} params x {per} B (fp32" + (" params" if params else "")
                    + (" + grads" if grads else "") + (" + Adam" if optimizer else "") + f") / {s.fsdp_shards} shards",
                    SRC_CRITIC)
    rank = (n - m.expert_params()) / (s.tp * s.pp) + m.expert_params() / (s.ep * s.etp * s.pp)
    shards = max(1, s.world // max(1, s.tp * s.pp)) if s.distributed_optimizer else 1
    total = rank * ((2 if params else 0) + (4 if grads else 0)) + (rank * 12 / shards if optimizer else 0)
    return Term(total, f"critic's rank params {_b(rank)} x (bf16 params, fp32 grads, 12 B optimizer / DP {shards})",
                SRC_CRITIC)
