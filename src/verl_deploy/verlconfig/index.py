"""A key index of verl's composed config: every key, what kind of value it holds, and
whether its section is turned into a dataclass (has ``_target_``).

Built once per (version, entry config) by composing verl's real YAML with Hydra, then
kept as JSON in the cache, so later checks need no Hydra import and take milliseconds.
The entry config is the recipe's own yaml when the source has it (a verl checkout with
``recipe/``, or a wheel's experimental config); otherwise the profile's declaration of
the recipe keys on top of the real base config.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from verl_deploy.verlconfig import compose_cache, fastyaml
from verl_deploy.verlconfig.locate import ConfigSource, cache_dir

INDEX_FORMAT = 3  # 2: value types; 3: types from the dataclasses' annotations


@dataclass(frozen=True)
class KeyIndex:
    """kinds: path -> "dict" | "list" | "null" | "value". targets: dict paths that carry `_target_`."""

    kinds: Mapping[str, str]
    targets: frozenset[str]
    origin: str
    # path -> "bool" | "int" | "float" | "str": the type of verl's default for a "value" key
    types: Mapping[str, str] | None = None

    def value_type(self, path: str) -> str | None:
        return (self.types or {}).get(path)

    def kind(self, path: str) -> str | None:
        return self.kinds.get(path)

    def nearest_existing(self, path: str) -> str:
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            parent = ".".join(parts[:cut])
            if parent in self.kinds:
                return parent
        return ""


def entry_yaml(source: ConfigSource, module: str, config_name: str, base_config: str,
               overlay: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The entry config as a dict (without its hydra/defaults header) and where it came from."""
    if config_name == base_config:  # verl.trainer.main_ppo: the base config is the entry's own
        return {}, f"verl's own {base_config} on {source.origin} {source.version}"
    real = source.recipe_config(module, config_name)
    if real is not None:
        data = yaml.safe_load(real.read_text(encoding="utf-8")) or {}
        data.pop("hydra", None)
        data.pop("defaults", None)
        return data, f"{real}"
    return dict(overlay), f"profile declaration of {config_name} on {source.origin} {source.version}"


def compose(source: ConfigSource, config_name: str, base_config: str, entry: Mapping[str, Any],
            overrides: list[str] | None = None):
    """Compose the entry config with Hydra against the real base config. Returns a DictConfig."""
    fastyaml.install()
    document = {"hydra": {"searchpath": [f"file://{source.base_dir}"]},
                "defaults": [base_config, "_self_"], **entry}
    # the entry's own name, unless it is the base config itself (it would then default to itself)
    name = config_name if config_name != base_config else f"verl_deploy_{base_config}"
    return compose_cache.compose(source.base_dir, name, yaml.safe_dump(document, sort_keys=False),
                                 list(overrides or []))


def _walk(node: Any, prefix: str, kinds: dict[str, str], targets: set[str],
          types: dict[str, str], declared=lambda target: {}) -> Iterator[None]:
    if isinstance(node, dict):
        if prefix:
            kinds[prefix] = "dict"
        fields: dict[str, str] = {}
        if "_target_" in node and prefix:
            targets.add(prefix)
            fields = declared(str(node["_target_"]))
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield from _walk(value, path, kinds, targets, types, declared)
            if str(key) in fields and kinds.get(path) in ("value", "null"):
                types[path] = fields[str(key)]  # the dataclass's annotation wins over the YAML default's type
    elif isinstance(node, list):
        kinds[prefix] = "list"
    else:
        kinds[prefix] = "null" if node is None else "value"
        if isinstance(node, (bool, int, float, str)) and not (isinstance(node, str) and "${" in node):
            # an interpolated default has no type until resolved; a YAML int may be a float field: "number"
            types[prefix] = "number" if type(node) is int else type(node).__name__
    yield None


def build(source: ConfigSource, module: str, config_name: str, base_config: str,
          overlay: Mapping[str, Any]) -> KeyIndex:
    """The index for one entry config, from the cache or by composing once with Hydra."""
    from omegaconf import OmegaConf  # only when composing

    entry, origin = entry_yaml(source, module, config_name, base_config, overlay)
    fingerprint = hashlib.sha256(json.dumps(
        [INDEX_FORMAT, str(source.root), source.version, config_name, base_config, entry,
         source.root.joinpath("verl", "workers", "config").is_dir()],  # the dataclasses' source: declared types
        sort_keys=True, default=str).encode()).hexdigest()[:16]
    cached = cache_dir() / "index" / f"{source.version}-{config_name}-{fingerprint}.json"
    if cached.is_file():
        try:
            data = json.loads(cached.read_text(encoding="utf-8"))
            os.utime(cached)  # recently used: the pruning keeps it
            return KeyIndex(data["kinds"], frozenset(data["targets"]), data["origin"], data["types"])
        except (OSError, ValueError, KeyError):
            pass
    cfg = compose(source, config_name, base_config, entry)
    container = OmegaConf.to_container(cfg, resolve=False)
    kinds: dict[str, str] = {}
    targets: set[str] = set()
    types: dict[str, str] = {}
    from verl_deploy.verlconfig.declared import fields_of

    for _ in _walk(container, "", kinds, targets, types, lambda target: fields_of(source.root, target)):
        pass
    index = KeyIndex(kinds, frozenset(targets), origin, types)
    _write_atomic(cached, {"kinds": kinds, "targets": sorted(targets), "origin": origin, "types": types})
    prune(cached.parent, keep=INDEX_CACHE_LIMIT)
    return index


# Each verl checkout path, version and entry config gets its own index file; without a bound a
# machine that checks many checkouts (or tests in temporary dirs) would keep one file per config forever.
INDEX_CACHE_LIMIT = 32


def prune(directory: Path, *, keep: int) -> None:
    """Keep the `keep` most recently used index files, remove the rest (best effort)."""
    try:
        files = [(p.stat().st_mtime, p) for p in directory.glob("*.json")]
    except OSError:
        return
    files.sort(key=lambda item: item[0], reverse=True)
    for _, path in files[keep:]:
        try:
            path.unlink()
        except OSError:
            pass


def _write_atomic(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".index-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs time
