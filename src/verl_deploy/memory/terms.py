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

from verl_deploy.memory.model import ModelShape
from verl_deploy.memory.setup import Setup

GIB = 2 ** 30
ENTROPY_CHUNK = 2048  # verl's entropy_from_logits_with_chunking chunk size
WEIGHT_SYNC_BUCKET = 2 * GIB  # update_weights_bucket_megabytes default 2048


@dataclass(frozen=True)
class Term:
    bytes: float
    formula: str

    @property
    def gb(self) -> float:
        return self.bytes / GIB


def _b(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n:,.0f}"


# ---- weights, gradients, optimizer ------------------------------------------------------------

def actor_params(m: ModelShape, s: Setup) -> Term:
    if s.framework == "fsdp":
        return Term(m.params() * 4 / s.fsdp_shards, f"{_b(m.params())} params x 4 B (fp32) / {s.fsdp_shards} FSDP shards")
    dense = m.dense_params() * 2 / (s.tp * s.pp)
    expert = m.expert_params() * 2 / (s.ep * s.etp * s.pp)
    text = f"{_b(m.dense_params())} x 2 B / (TP {s.tp} x PP {s.pp})"
    if m.is_moe:
        text += f" + experts {_b(m.expert_params())} x 2 B / (EP {s.ep} x ETP {s.etp} x PP {s.pp})"
    return Term(dense + expert, text)


def megatron_shard_params(m: ModelShape, s: Setup) -> float:
    """Parameters on one Megatron model-parallel rank."""
    return m.dense_params() / (s.tp * s.pp) + m.expert_params() / (s.ep * s.etp * s.pp)


def ref_params(m: ModelShape, s: Setup) -> Term:
    if not s.ref_loaded:
        return Term(0, "no reference model (use_kl_loss and use_kl_in_reward are off)")
    if s.framework == "fsdp":
        return Term(m.params() * 2 / s.fsdp_shards, f"{_b(m.params())} x 2 B (bf16) / {s.fsdp_shards} FSDP shards")
    return Term(megatron_shard_params(m, s) * 2, "reference in bf16, split like the actor")


def gradients(m: ModelShape, s: Setup) -> Term:
    if s.framework == "fsdp":
        return Term(m.params() * 4 / s.fsdp_shards, f"{_b(m.params())} x 4 B (fp32 grads) / {s.fsdp_shards} shards")
    return Term(megatron_shard_params(m, s) * 4, "fp32 gradient buffer of this rank's parameters")


def optimizer_states(m: ModelShape, s: Setup) -> Term:
    """Adam: FSDP 8 B/param (moments; the fp32 params are the master copy), Megatron 12 B/param."""
    if s.framework == "fsdp":
        return Term(m.params() * 8 / s.fsdp_shards, f"{_b(m.params())} x 8 B (Adam m, v fp32) / {s.fsdp_shards} shards")
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
    return Term((dense / dense_shards + experts / expert_shards) * 12 * on_device, text)


def fsdp_unsharded(m: ModelShape, s: Setup, *, training: bool) -> Term:
    """FSDP gathers each layer whole (bf16) while it runs, the next one prefetched, and the lm_head
    for the logits; the backward also holds the gathered layer's gradient before reduce-scatter."""
    layer = (m.params() - m.vocab * m.hidden * (1 if m.tied_embeddings else 2)) / m.layers
    held = 2 * layer + m.vocab * m.hidden
    total = held * 2 + (layer * 2 if training else 0)
    return Term(total, f"2 gathered layers of {_b(layer)} + lm_head {_b(m.vocab * m.hidden)} params x 2 B (bf16)"
                       + (" + one layer's gradient" if training else ""))


# ---- tokens per micro-batch -------------------------------------------------------------------

def tokens_per_device(s: Setup, *, log_prob: bool) -> tuple[int, str]:
    """Tokens one device holds in one forward: the dynamic-batch budget, or micro-batch x length."""
    seq = s.prompt_len + s.response_len
    split = s.sp if s.framework == "fsdp" else s.cp
    dynamic = s.log_prob_dynamic_bsz if log_prob else s.dynamic_bsz
    # the responses of one mini-batch spread over the DP ranks bound any micro-batch
    per_rank = max(1, s.mini_batch_size * s.n_resp * seq // max(1, s.dp * split))
    if dynamic:
        budget = s.log_prob_max_token_len if log_prob else s.max_token_len
        # a sequence longer than the budget is not split: it is one micro-batch on its own
        tokens = max(budget, -(-seq // split))
        return min(tokens, per_rank), f"dynamic-batch budget {budget} tokens"
    micro = s.log_prob_micro_batch if log_prob else s.micro_batch
    return min(micro * seq // split, per_rank), f"micro-batch {micro} x {seq} tokens" + (f" / {split}" if split > 1 else "")


# ---- activations and logits -------------------------------------------------------------------

def layer_activation_bytes(m: ModelShape) -> int:
    """bf16 activations one token keeps for backward in one layer (flash attention, SwiGLU)."""
    width = 5 * m.hidden + 2 * m.q_dim + 2 * m.kv_dim + 4 * m.mlp_act_width()
    if m.is_moe:
        width += 2 * m.experts_per_token * m.hidden  # token permutation for dispatch and combine
    return 2 * width


def _layers_per_stage(m: ModelShape, s: Setup) -> int:
    return -(-m.layers // s.pp)


def activations(m: ModelShape, s: Setup, tokens: int) -> Term:
    """Training forward kept for backward, with or without recompute / gradient checkpointing."""
    full = layer_activation_bytes(m)
    keep = 2 * m.hidden  # a checkpointed layer keeps its input only
    layers = _layers_per_stage(m, s)
    if s.framework == "fsdp":
        if s.gradient_checkpointing:
            total = tokens * (layers * keep + full)
            text = f"{tokens} tokens x ({layers} layers x {keep} B checkpointed input + one layer {full} B)"
        else:
            total = tokens * layers * full
            text = f"{tokens} tokens x {layers} layers x {full} B (no gradient checkpointing)"
        return Term(total, text)
    if s.recompute == "full":
        recomputed = layers if s.recompute_method != "block" else min(layers, s.recompute_layers or layers)
    else:
        recomputed = 0
    stored = tokens * (recomputed * keep + (layers - recomputed) * full) / s.tp
    working = tokens * full / s.tp if recomputed else 0  # the one layer being recomputed
    in_flight = min(s.pp, max(1, s.mini_batch_size * s.n_resp // max(1, s.dp))) if s.pp > 1 else 1
    text = (f"{tokens} tokens x ({recomputed} recomputed layers x {keep} B + {layers - recomputed} layers x {full} B) "
            f"/ TP {s.tp}" + (f" x {in_flight} micro-batches in flight (PP {s.pp})" if in_flight > 1 else "")
            + (" + one layer recomputing" if recomputed else ""))
    return Term(stored * in_flight + working, text)


def forward_activations(m: ModelShape, s: Setup, tokens: int) -> Term:
    """Forward without grad (log-prob): about two layers' worth alive at a time."""
    full = layer_activation_bytes(m)
    return Term(tokens * 2 * full / s.tp, f"{tokens} tokens x 2 layers x {full} B" + (f" / TP {s.tp}" if s.tp > 1 else ""))


def logits(m: ModelShape, s: Setup, tokens: int, *, training: bool, entropy: bool) -> Term:
    """The [tokens, vocab] peak: logits, and entropy's softmax copies unless chunked/checkpointed."""
    vocab = m.vocab / s.tp
    if s.framework == "megatron":
        per = 4 + 4 + (4 if training else 0)  # fp32 logits, vocab-parallel softmax, grad
        text = f"{tokens} tokens x vocab {m.vocab}/{s.tp} x {per} B (fp32 logits, softmax" + (", grad)" if training else ")")
    else:
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
    return Term(total, text)


# ---- rollout ---------------------------------------------------------------------------------

def rollout_weights(m: ModelShape, s: Setup) -> Term:
    if m.is_moe and s.rollout_ep > 1:
        return Term(m.dense_params() * 2 / s.rollout_tp + m.expert_params() * 2 / s.rollout_ep,
                    f"{_b(m.dense_params())} x 2 B / rollout TP {s.rollout_tp} + experts {_b(m.expert_params())} "
                    f"x 2 B / rollout EP {s.rollout_ep}")
    return Term(m.params() * 2 / s.rollout_tp, f"{_b(m.params())} x 2 B (bf16) / rollout TP {s.rollout_tp}")


def kv_per_token(m: ModelShape, s: Setup) -> Term:
    per = m.kv_bytes_per_token() / s.rollout_tp if not m.kv_lora_rank else m.kv_bytes_per_token()
    if m.kv_lora_rank:
        text = f"{m.layers} layers x (kv_lora_rank {m.kv_lora_rank} + rope {m.qk_rope_head_dim}) x 2 B (MLA latent)"
    else:
        text = (f"{m.layers} layers x {m.kv_heads} KV heads x {m.head_dim} head dim x 2 B x 2 (K, V) / rollout TP "
                f"{s.rollout_tp}")
    return Term(per, text)


def rollout_activation(m: ModelShape, s: Setup) -> Term:
    """vLLM's profiling peak: one batch of max_num_batched_tokens through a layer, and the sampler."""
    tokens = s.max_num_batched_tokens
    act = tokens * (4 * m.hidden + 2 * m.q_dim + 3 * m.mlp_act_width() / s.rollout_tp) * 2
    sampler = min(s.max_num_seqs, tokens) * m.vocab * 4 / s.rollout_tp
    return Term(act + sampler, f"max_num_batched_tokens {tokens} through one layer + {min(s.max_num_seqs, tokens)} "
                               f"sequences' fp32 logits")


def engine_overhead(s: Setup) -> Term:
    """Outside gpu_memory_utilization: runtime, communicators, and CUDA/ACL graphs unless eager."""
    base = 1.0 if s.device == "gpu" else 1.5
    graphs = 0.0 if s.enforce_eager else (1.0 if s.device == "gpu" else 1.5)
    return Term((base + graphs) * GIB, f"{base:g} GiB runtime" + ("" if s.enforce_eager else f" + {graphs:g} GiB graphs "
                                                                   "(enforce_eager off)"))
