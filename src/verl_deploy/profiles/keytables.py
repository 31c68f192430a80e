"""verl's config keys per release, with their defaults and comments: data files under keys/, written by
tools/key_tables.py from each release's real tree. `migrate` reads them to find keys that moved."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

KEYS_DIR = Path(__file__).parent / "keys"
# libyaml's parser where PyYAML has it: a table is 100-220 KB and the pure-Python scanner took 0.2-0.4 s of every
# `plan` (the rules read defaults from it); the safe constructor and resolver are the same classes either way
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def table_path(version: str) -> Path:
    return KEYS_DIR / f"verl-{version}.yaml"


@functools.lru_cache(maxsize=16)
def _load(version: str) -> dict[str, Any] | None:
    path = table_path(version)
    if not path.is_file():
        return None
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER) or {}


@functools.lru_cache(maxsize=64)
def key_table(version: str, config: str | None = None) -> dict[str, Any] | None:
    """key -> default for the release: the keys of its entry config `config`, or of every entry config
    verl-deploy runs. None without a table, or when the table does not hold that config."""
    data = _load(version)
    if data is None or (config is not None and config not in (data.get("configs") or [])):
        return None
    return {key: (entry or {}).get("default") for key, entry in (data.get("keys") or {}).items()
            if config is None or config in ((entry or {}).get("configs") or [config])}


def comment(version: str, key: str) -> str:
    data = _load(version) or {}
    return str(((data.get("keys") or {}).get(key) or {}).get("comment") or "")
