"""The model's shape, read from its config.json: what the memory terms need (sizes, not weights).

Parameters are counted from the architecture (embeddings, attention with GQA or MLA, dense or MoE
MLP, norms), split into the part every tensor-parallel rank shards (``dense``) and the routed
experts (``expert``) that expert parallelism shards. When the model directory is not on this
host (plans are often made away from the cluster), a few well-known public architectures are
recognised by the directory's name (``architectures.yaml``) and the estimate says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

from verl_deploy import boundedread

MAX_CONFIG_BYTES = 1_000_000
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "bf16": 2, "fp16": 2, "fp32": 4}


class ModelConfigError(ValueError):
    """config.json is missing a field the estimate needs, or is not a decoder LM config."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_expert_intermediate: int = 0
    moe_layers: int = 0
    kv_lora_rank: int = 0  # MLA (DeepSeek): the KV cache holds the latent, not K and V
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0
    v_head_dim: int = 0
    qk_nope_head_dim: int = 0
    dtype_bytes: int = 2
    source: str = "config.json"
    architecture: str = ""  # config.json's architectures[0] (or model_type)

    @property
    def identity(self) -> str:
        """What makes two models the same for memory: architecture and dimensions, never the directory's name
        (a lesson keyed on the name `model` made a later, different model start with offload and recompute)."""
        parts = [self.architecture or "?", f"h{self.hidden}", f"L{self.layers}", f"a{self.heads}/{self.kv_heads}",
                 f"d{self.head_dim}", f"i{self.intermediate}", f"v{self.vocab}"]
        if self.is_moe:
            parts += [f"e{self.experts}x{self.experts_per_token}", f"mi{self.moe_intermediate}",
                      f"s{self.shared_expert_intermediate}", f"ml{self.moe_layers}"]
        if self.kv_lora_rank:
            parts.append(f"mla{self.kv_lora_rank}/{self.qk_rope_head_dim}")
        return " ".join(parts)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0 and self.moe_layers > 0

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def attention_params(self) -> int:
        h = self.hidden
        if self.kv_lora_rank:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * self.heads * qk) if self.q_lora_rank else h * self.heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + \
                self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.heads * self.v_head_dim * h
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h

    def expert_params(self) -> int:
        """Routed experts of all MoE layers (what expert parallelism divides)."""
        return self.moe_layers * self.experts * 3 * self.hidden * self.moe_intermediate

    def dense_params(self) -> int:
        """Everything but the routed experts: embeddings, attention, dense MLPs, shared experts, router, norms."""
        h = self.hidden
        dense_layers = self.layers - self.moe_layers
        mlp = dense_layers * 3 * h * self.intermediate
        moe_rest = self.moe_layers * (h * self.experts + 3 * h * self.shared_expert_intermediate)
        embeddings = self.vocab * h * (1 if self.tied_embeddings else 2)
        return embeddings + self.layers * (self.attention_params() + 2 * h) + mlp + moe_rest + h

    def params(self) -> int:
        return self.dense_params() + self.expert_params()

    def active_params(self) -> int:
        if not self.is_moe:
            return self.params()
        return self.dense_params() + self.moe_layers * self.experts_per_token * 3 * self.hidden * self.moe_intermediate

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """KV cache of one token over all layers: layers x KV heads x head dim x 2 (K and V) x dtype."""
        b = dtype_bytes or self.dtype_bytes
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * b
        return self.layers * self.kv_heads * self.head_dim * 2 * b

    def mlp_act_width(self) -> int:
        """Width of one token's MLP intermediate in a typical layer (MoE: top-k experts' worth)."""
        if self.is_moe:
            return self.experts_per_token * self.moe_intermediate + self.shared_expert_intermediate
        return self.intermediate


def _int(data: Mapping[str, Any], *names: str, default: int | None = None) -> int:
    for name in names:
        value = data.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and value >= 0:
            return int(value)
    if default is not None:
        return default
    raise ModelConfigError(f"config.json has no usable {names[0]}")


def shape_from_config(data: Mapping[str, Any], name: str = "model", source: str = "config.json") -> ModelShape:
    """The shape from a Hugging Face config dict (text config of a VL model)."""
    if not isinstance(data, Mapping):
        raise ModelConfigError("config.json is not a JSON object")
    text = data.get("text_config")
    if isinstance(text, Mapping) and "hidden_size" not in data:
        data = {**data, **text}
    hidden = _int(data, "hidden_size", "d_model")
    layers = _int(data, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(data, "num_attention_heads", "n_head")
    if not (0 < hidden <= 1_000_000 and 0 < layers <= 10_000 and 0 < heads <= 10_000):
        raise ModelConfigError("config.json has out-of-range sizes")
    kv_heads = _int(data, "num_key_value_heads", default=heads)
    head_dim = _int(data, "head_dim", default=hidden // heads)
    experts = _int(data, "num_experts", "n_routed_experts", "num_local_experts", default=0)
    moe_layers = 0
    if experts:
        first_dense = _int(data, "first_k_dense_replace", default=0)
        step = max(1, _int(data, "decoder_sparse_step", "moe_layer_freq", default=1))
        only = data.get("mlp_only_layers") or []
        moe_layers = sum(1 for i in range(first_dense, layers) if (i + 1) % step == 0 and i not in only)
    shared = _int(data, "shared_expert_intermediate_size", default=0)
    if not shared and experts and data.get("n_shared_experts"):
        shared = _int(data, "n_shared_experts") * _int(data, "moe_intermediate_size", default=0)
    dtype = str(data.get("torch_dtype") or data.get("dtype") or "bfloat16").replace("torch.", "")
    return ModelShape(
        name=name, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads or heads, head_dim=head_dim,
        intermediate=_int(data, "intermediate_size", "ffn_hidden_size", default=4 * hidden),
        vocab=_int(data, "vocab_size"), tied_embeddings=bool(data.get("tie_word_embeddings", False)),
        experts=experts, experts_per_token=_int(data, "num_experts_per_tok", "moe_topk", default=0),
        moe_intermediate=_int(data, "moe_intermediate_size", default=0), shared_expert_intermediate=shared,
        moe_layers=moe_layers, kv_lora_rank=_int(data, "kv_lora_rank", default=0),
        qk_rope_head_dim=_int(data, "qk_rope_head_dim", default=0), q_lora_rank=_int(data, "q_lora_rank", default=0),
        v_head_dim=_int(data, "v_head_dim", default=0), qk_nope_head_dim=_int(data, "qk_nope_head_dim", default=0),
        dtype_bytes=DTYPE_BYTES.get(dtype, 2), source=source, architecture=_architecture(data),
    )


def _architecture(data: Mapping[str, Any]) -> str:
    names = data.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0][:80]
    return str(data.get("model_type") or "")[:80]


@lru_cache(maxsize=1)
def builtin_architectures() -> dict[str, dict]:
    text = (Path(__file__).with_name("architectures.yaml")).read_text(encoding="utf-8")
    return {str(k): dict(v) for k, v in (yaml.safe_load(text) or {}).items()}


def _canonical(name: str) -> str:
    name = name.lower().rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[-_](instruct|base|chat|it|\d{4})$", "", re.sub(r"[-_](instruct|base|chat)(?=[-_]|$)", "", name))


def builtin_shape(model_path: str) -> ModelShape | None:
    """A known public architecture whose name is the model directory's name (ignoring -Instruct/-Base)."""
    wanted = _canonical(model_path)
    for name, data in builtin_architectures().items():
        if _canonical(name) == wanted:
            return shape_from_config(data, name, source=f"built-in architecture of {name} (no config.json read)")
    return None


def load_shape(model_path: str) -> tuple[ModelShape | None, str]:
    """(shape, how it was found). Reads <model_path>/config.json defensively; falls back on the name."""
    config = Path(model_path) / "config.json"
    try:
        if config.is_file():
            if config.stat().st_size > MAX_CONFIG_BYTES:
                return None, f"{config} is larger than {MAX_CONFIG_BYTES} bytes; not read"
            name = Path(model_path).name or "model"
            return shape_from_config(boundedread.read_json(config, MAX_CONFIG_BYTES), name, str(config)), str(config)
    except (OSError, boundedread.UnreadableFile, ModelConfigError) as exc:
        fallback = builtin_shape(model_path)
        note = f"{config} could not be used ({exc})"
        return fallback, note + (f"; used {fallback.source}" if fallback else "")
    fallback = builtin_shape(model_path)
    if fallback:
        return fallback, fallback.source
    return None, f"no config.json at {config} and {Path(model_path).name!r} is not a known architecture"
