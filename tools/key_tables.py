"""Maintainer tool: write verl's config key table of each release to src/verl_deploy/profiles/keys/.

For each release, every entry config verl-deploy runs (each mode, Megatron and FSDP) is
composed with Hydra from that release's real tree (the wheel's configs, as `plan` reads them); every
key is written with its default, the configs that hold it when not all do, and the comment verl's YAML
has above it (or beside it). `migrate` reads these tables: a key in one release and not the next, with the same default and last name as a
new key there, is a candidate move.

Run: python tools/key_tables.py [RELEASE ...]   (default: every release verl-deploy has a profile for)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from verl_deploy.importer import compose as composing  # noqa: E402
from verl_deploy.profiles import profile_for  # noqa: E402
from verl_deploy.profiles.entries import RELEASES  # noqa: E402
from verl_deploy.profiles.keytables import KEYS_DIR, table_path  # noqa: E402
from verl_deploy.verlconfig.locate import locate  # noqa: E402

KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:(.*)$")


def comments_of(config_dir: Path) -> dict[str, str]:
    """key path within its file -> the comment above (or beside) it, for every yaml under config_dir."""
    found: dict[str, str] = {}
    for path in sorted(config_dir.rglob("*.yaml")):
        if path.name.startswith("_generated"):
            continue
        stack: list[tuple[int, str]] = []
        pending: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                pending.append(stripped.lstrip("#").strip())
                continue
            match = KEY_LINE.match(line)
            if not match:
                if not stripped:
                    pending = []
                continue
            indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            inline = rest.split(" #", 1)[1].strip() if " #" in rest else ""
            text = " ".join(p for p in pending if p) or inline
            if text:
                found.setdefault(".".join(k for _, k in stack), text[:300])
            pending = []
    return found


def comment_for(key: str, comments: dict[str, str]) -> str:
    """The comment of the longest key path (within one file) that ends this composed key."""
    parts = key.split(".")
    for start in range(len(parts)):
        text = comments.get(".".join(parts[start:]))
        if text:
            return text
    return ""


def table(version: str) -> dict:
    """Every key of every entry config the release's profile runs; a key that only some of them hold lists
    those in `configs` (a plain override of it would be refused by the others)."""
    profile = profile_for(version)
    source = locate(version)
    comments = comments_of(source.base_dir)
    keys: dict[str, dict] = {}
    holders: dict[str, list[str]] = {}
    configs: list[str] = []
    for (mode, framework), name in profile.config_names.items():
        if name in configs:
            continue
        module = profile.entry_modules[mode]
        try:
            composed = composing.compose(source, module, name, [], profile, framework, mode).raw
        except composing.ComposeProblem as exc:  # a recipe entry a wheel does not carry
            print(f"{version}: {name} skipped ({exc})", file=sys.stderr)
            continue
        configs.append(name)
        for key, default in composed.items():
            if not key:
                continue
            holders.setdefault(key, []).append(name)
            if key not in keys:
                entry = {"default": default}
                text = comment_for(key, comments)
                if text:
                    entry["comment"] = text
                keys[key] = entry
    for key, names in holders.items():
        if len(names) < len(configs):
            keys[key]["configs"] = names
    return {"release": version, "source": f"{source.origin} {source.root.name}", "configs": configs,
            "keys": dict(sorted(keys.items()))}


def main(versions: list[str]) -> None:
    KEYS_DIR.mkdir(parents=True, exist_ok=True)
    for version in versions or list(RELEASES):
        data = table(version)
        table_path(version).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000),
                                       encoding="utf-8")
        print(f"{version}: {len(data['keys'])} keys -> {table_path(version).relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
