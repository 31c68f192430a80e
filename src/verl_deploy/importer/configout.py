"""Write an imported script as the YAML config `--config` reads: one field a line, each with where it
came from (`script line N`, the environment variable the script reads, or verl's default), then the
overrides with theirs. Written atomically: a reader never sees half a file."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from verl_deploy.importer.build import Imported

FIRST = ("mode", "framework", "device", "verl_version")


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000).strip()
    return text.removesuffix("...").strip()


def render(result: Imported, script: str) -> str:
    lines = [f"# verl-deploy configuration, imported by `verl-deploy import` from {script}",
             f"# on {datetime.now():%Y-%m-%d %H:%M}: verl {result.version} ({result.version_why}).",
             "# Read by: verl-deploy plan|generate|launch --config THIS_FILE. Flags and environment variables",
             "# override what is here."]
    env_fields = result.environment_fields()
    if env_fields:
        lines.append("# The script reads these from the environment; here they are the fields beside them, set to")
        lines.append("# the script's defaults (the same variables set them again when verl-deploy runs):")
        lines += [f"#   {name} -> {field}" for name, field in sorted(env_fields.items())]
    others = sorted(n for n in result.reading.environment if n not in env_fields)
    if others:
        lines.append("# Other environment variables the script reads (not part of this config): " + ", ".join(others))
    if result.unreadable:
        lines.append("# Not read from the script (a static reader cannot know them):")
        lines += [f"#   line {u.line}: {u.why}" for u in result.unreadable]
    if result.field_problems:
        lines.append("# Values a spec field cannot hold (verl-deploy's own value is used):")
        lines += [f"#   {p}" for p in result.field_problems]
    if result.remaining:
        lines.append(f"# {len(result.remaining)} key(s) still differ from the script's config "
                     "(`verl-deploy import --check` lists them)")
    lines.append("")
    values = result.values
    order = [n for n in FIRST if n in values] + [n for n in values if n not in FIRST]
    for name in order:
        where = result.provenance.get(name, "")
        lines.append(f"{name}: {_scalar(values[name])}" + (f"  # {where}" if where else ""))
    if result.overrides:
        lines.append("overrides:")
        for text, where in result.overrides:
            lines.append(f"  - {_scalar(text)}  # {where}")
    return "\n".join(lines) + "\n"


def write(path: str | os.PathLike, text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target
