"""The YAML config `init` writes: one commented line per field, readable and reloadable.

A new file: values are dumped one at a time by PyYAML so quoting is always right; its sections and
comments (the help of the field's flag) come from the fields' declarations in spec.py. An existing
file is updated in place with ruamel.yaml's round-trip mode (PyYAML drops comments, so it cannot):
the user's comments, order, spelling (`verl-version`) and every field init did not ask about stay as
written; only the answers that changed are replaced. Secrets are never written here.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

import yaml

from verl_deploy.spec import DECLARED, SECRET_FIELDS, listing

# the file's sections, in this order; which fields each holds is declared on the fields (spec.py `config=`)
SECTIONS = ("hardware", "container", "paths", "run", "swanlab", "features", "hyper-parameters")


def _help() -> dict[str, str]:
    """Each field's comment: the help of its flag."""
    return {name: meta.help for name, meta in DECLARED.items()}


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000).strip()
    return text[:-4].rstrip() if text.endswith("\n...") else text.removesuffix("...").strip()


def render_config(values: Mapping[str, Any]) -> str:
    helps = _help()
    lines = [f"# verl-deploy configuration, written by `verl-deploy init` on {datetime.now():%Y-%m-%d %H:%M}.",
             "# Read by: verl-deploy plan|generate|launch --config THIS_FILE. Flags and environment variables",
             "# override what is here. The SwanLab API key is not stored here (SWANLAB_API_KEY, or the 0600 key file).",
             ""]
    written = set()
    for title, names in listing("config", SECTIONS):
        present = [n for n in names if n in values and values[n] is not None and n not in SECRET_FIELDS]
        if not present:
            continue
        lines.append(f"# -- {title}")
        for name in present:
            if helps.get(name):
                lines.append(f"# {helps[name]}")
            lines.append(f"{name}: {_scalar(values[name])}")
            written.add(name)
        lines.append("")
    rest = [n for n in values if n not in written and n not in SECRET_FIELDS and values[n] is not None]
    if rest:
        lines.append("# -- other")
        lines += [f"{name}: {_scalar(values[name])}" for name in rest]
    return "\n".join(lines).rstrip() + "\n"


def update_config(text: str, values: Mapping[str, Any]) -> str:
    """`text` (an existing config) with `values` set: comments, order, other keys and key spelling kept."""
    from io import StringIO

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    from ruamel.yaml.util import load_yaml_guess_indent

    rt = YAML()  # round-trip: keeps comments and layout
    rt.preserve_quotes = True
    rt.width = 10_000
    _, indent, sequence_offset = load_yaml_guess_indent(text)
    if indent:  # the file's own list indentation (`  - item` or `- item`); ruamel guesses the sequence's
        offset = sequence_offset or 0
        rt.indent(mapping=max(2, indent - offset), sequence=indent, offset=offset)
    data = rt.load(text)
    if data is None:
        data = CommentedMap()
    if not isinstance(data, dict):
        raise ValueError("the file is not a mapping of field: value")
    spelled = {str(key).replace("-", "_"): key for key in data}
    for name, value in values.items():
        if name in SECRET_FIELDS:
            continue
        key = spelled.get(name, name)
        if value is None:  # an answer that clears a value: the field goes back to its default
            data.pop(key, None)
            continue
        if key in data and data[key] == value:
            continue  # unchanged: keep the user's own formatting
        data[key] = list(value) if isinstance(value, tuple) else value
    out = StringIO()
    rt.dump(data, out)
    return out.getvalue()


def write_config(path: str | os.PathLike, values: Mapping[str, Any], *, existing: str | None = None) -> Path:
    """Atomic write: a reader never sees half a file. With `existing`, that text is updated, not replaced."""
    target = Path(path)
    text = render_config(values) if existing is None else update_config(existing, values)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, target)
    return target
