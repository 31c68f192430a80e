"""Probe: HuggingFace model directories — candidates under the search roots, and a deep look at the chosen one."""

from __future__ import annotations

import os
import time
from pathlib import Path

from verl_deploy import boundedread
from verl_deploy.preflight.context import Context
from verl_deploy.preflight.report import Area

MAX_DEPTH = 4
MAX_DIRS = 20_000  # a search never walks more directories than this
SEARCH_SECONDS = 1.5
MAX_CONFIG_BYTES = 4_000_000  # config.json: a few KiB in a real model
MAX_INDEX_BYTES = 64_000_000  # model.safetensors.index.json: one line per tensor
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
SKIP_DIRS = {"__pycache__", "node_modules", ".git", ".cache", "proc", "sys"}


def walk(roots: list[str], wanted, *, depth: int = MAX_DEPTH, limit: int = MAX_DIRS,
         seconds: float = SEARCH_SECONDS) -> tuple[list[str], bool]:
    """Breadth-first over the roots, `wanted(dir_entries)` picks results; bounded in depth, count and time.

    Returns (found, complete): complete is False when a bound stopped the search.
    """
    deadline = time.monotonic() + seconds
    queue = [(root, 0) for root in roots if os.path.isdir(root)]
    found: list[str] = []
    visited = 0
    while queue:
        if visited >= limit or time.monotonic() > deadline:
            return found, False
        path, level = queue.pop(0)
        visited += 1
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            continue
        found.extend(wanted(path, entries))
        if level < depth:
            queue.extend((e.path, level + 1) for e in entries
                         if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and e.name not in SKIP_DIRS)
    return found, True


def _is_model_dir(path: str, entries) -> list[str]:
    names = {e.name for e in entries}
    return [path] if "config.json" in names and (names & {"model.safetensors.index.json", "model.safetensors",
                                                          "pytorch_model.bin", "pytorch_model.bin.index.json"}
                                                 or any(n.endswith(".safetensors") for n in names)) else []


def find_models(roots: list[str]) -> tuple[list[str], bool]:
    return walk(roots, _is_model_dir)


def parameter_count(config: dict) -> int | None:
    """Parameters of a decoder-only transformer from its config (dense or MoE), for size estimates."""
    try:
        hidden, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
        heads = config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads", heads)
        head_dim = config.get("head_dim") or hidden // heads
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    experts = config.get("num_experts") or config.get("n_routed_experts")
    if experts:
        inner = config.get("moe_intermediate_size") or config.get("intermediate_size", 0)
        mlp = experts * 3 * hidden * inner + experts * hidden
    else:
        mlp = 3 * hidden * config.get("intermediate_size", 4 * hidden)
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return int(layers * (attention + mlp + 2 * hidden) + embeddings)


def inspect_model(path: str) -> tuple[dict, list[tuple[str, str, str, str]]]:
    """(facts, rows) for one directory; rows are (status, check, value, fix)."""
    rows: list[tuple[str, str, str, str]] = []
    root = Path(path)
    facts: dict = {"path": path}
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a directory"
        rows.append(("error", "model", f"{path} {what}", "pass --model-path with a HuggingFace model directory"))
        return facts, rows
    try:
        config = boundedread.read_json(root / "config.json", MAX_CONFIG_BYTES)
    except FileNotFoundError:
        rows.append(("error", "config.json", f"missing in {path}", "point --model-path at the directory holding config.json "
                     "(a verl checkpoint must be merged first: python -m verl.model_merger merge ...)"))
        return facts, rows
    except (OSError, ValueError) as exc:
        rows.append(("error", "config.json", f"cannot be read: {exc}", "re-download the model"))
        return facts, rows
    if not isinstance(config, dict):
        rows.append(("error", "config.json", "is not a JSON object", "re-download the model"))
        return facts, rows
    architectures = config.get("architectures") or []
    facts.update({
        "architecture": architectures[0] if architectures else None, "model_type": config.get("model_type"),
        "num_layers": config.get("num_hidden_layers"), "hidden_size": config.get("hidden_size"),
        "num_heads": config.get("num_attention_heads"), "num_kv_heads": config.get("num_key_value_heads"),
        "vocab_size": config.get("vocab_size"), "dtype": config.get("torch_dtype") or config.get("dtype"),
        "parameters": parameter_count(config),
    })
    if not architectures:
        rows.append(("error", "config.json", "names no architecture", "use a HuggingFace causal LM directory"))
    else:
        billions = f", {facts['parameters'] / 1e9:.1f}B parameters" if facts["parameters"] else ""
        rows.append(("ok", "config.json", f"{architectures[0]}, {facts['num_layers']} layers, hidden {facts['hidden_size']}, "
                     f"{facts['num_heads']}/{facts['num_kv_heads']} heads, {facts['dtype']}{billions}", ""))
    rows.append(_weights(root))
    names = {p.name for p in root.iterdir()}
    if names & set(TOKENIZER_FILES) and ("tokenizer_config.json" in names or "tokenizer.json" in names):
        rows.append(("ok", "tokenizer", ", ".join(sorted(names & {*TOKENIZER_FILES, "tokenizer_config.json"})), ""))
    else:
        rows.append(("error", "tokenizer", "no tokenizer files (tokenizer.json / tokenizer_config.json)",
                     "copy the tokenizer files from the original model into this directory"))
    return facts, rows


def _weights(root: Path) -> tuple[str, str, str, str]:
    index = root / "model.safetensors.index.json"
    if index.exists():
        try:
            shards = sorted(set(boundedread.read_json(index, MAX_INDEX_BYTES)["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
            return ("error", "weights", f"{index.name} cannot be read: {exc}", "re-download the model")
        missing = [s for s in shards if not (root / s).is_file() or (root / s).stat().st_size == 0]
        if missing:
            return ("error", "weights", f"{len(missing)} of {len(shards)} shards missing or empty: {', '.join(missing[:3])}",
                    "re-download the missing shards")
        size = sum((root / s).stat().st_size for s in shards)
        return ("ok", "weights", f"{len(shards)} safetensors shards, {size / (1 << 30):.1f} GiB", "")
    files = sorted(p for p in root.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    if files:
        return ("ok", "weights", f"{len(files)} weight file(s), {sum(p.stat().st_size for p in files) / (1 << 30):.1f} GiB", "")
    return ("error", "weights", "no *.safetensors or *.bin files", "download the weights into the model directory")


def probe_model_candidates(context: Context) -> Area:
    area = Area("models", "Models")
    found, complete = find_models(context.search_roots)
    area.data = {"candidates": found, "search_roots": context.search_roots, "complete": complete}
    roots = ", ".join(context.search_roots)
    area.info("candidates", (", ".join(found[:8]) + (f" (+{len(found) - 8} more)" if len(found) > 8 else ""))
              if found else f"none under {roots}",
              "" if found else "pass --search-root DIR, or --model-path")
    return area


def judge_model(area: Area, context: Context) -> dict:
    """Deep check of the chosen model (on the host; in the container only its presence)."""
    path = context.spec.model_path
    if not os.path.exists(path) and context.runner.where != "host" and context.runner.exists(path):
        area.ok("model", f"{path} exists in {context.runner.where} (not inspected from the host)")
        return {}
    facts, rows = inspect_model(path)
    for status, check, value, fix in rows:
        if status == "error" and check == "model" and area.data.get("candidates"):
            fix = "pass --model-path; found here: " + ", ".join(area.data["candidates"][:3])
        getattr(area, status)(check, value, fix)
    area.data["model"] = facts
    return facts
