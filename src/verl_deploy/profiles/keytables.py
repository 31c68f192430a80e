"""verl's config keys per release, with their defaults and comments: data files under keys/, written by
tools/key_tables.py from each release's real tree. `migrate` reads them to find keys that moved."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

KEYS_DIR = Path(__file__).parent / "keys"


def table_path(version: str) -> Path:
    return KEYS_DIR / f"verl-{version}.yaml"


@functools.lru_cache(maxsize=16)
def key_table(version: str) -> dict[str, Any] | None:
    """key -> default for the release (every entry config verl-deploy runs), or None without a table."""
    path = table_path(version)
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {key: (entry or {}).get("default") for key, entry in (data.get("keys") or {}).items()}


def comment(version: str, key: str) -> str:
    path = table_path(version)
    if not path.is_file():
        return ""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return str(((data.get("keys") or {}).get(key) or {}).get("comment") or "")
