"""The fake host's model and data files, importable without pytest (the benchmarks build the same host).

conftest.py re-exports these for the tests.
"""

from __future__ import annotations

import json
from pathlib import Path

TINY_MODEL = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 512,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 16, "intermediate_size": 128,
              "vocab_size": 1000, "torch_dtype": "bfloat16", "max_position_embeddings": 40960}


def make_model(root: Path, config: dict, *, shards: int = 2, drop_shard: bool = False, tokenizer: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {f"model.layers.{i}.weight": name for i, name in enumerate(names)}
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    for name in names[: -1 if drop_shard else None]:
        (root / name).write_bytes(b"\0" * 1024)
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
        (root / "tokenizer_config.json").write_text("{}")
    return root


TRAIN_ROWS = 512  # more than the default generation batch (96): verl's drop_last loader needs one whole batch


def write_train_rows(source: Path, target: Path, rows: int) -> None:
    """The synthetic DAPO rows repeated to `rows` rows (DAPO-Math-17k itself repeats its prompts)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    copies = -(-rows // table.num_rows)
    pq.write_table(pa.concat_tables([table] * copies).slice(0, rows), target)
