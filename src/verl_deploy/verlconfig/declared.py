"""The types verl's config dataclasses declare for their fields, read from verl's source (never run).

A section with `_target_: verl.workers.config.SamplingConfig` becomes that dataclass when verl starts;
its annotations (`temperature: float = 1.0`) are the declared types. The YAML default alone can mislead
(`val_kwargs.temperature: 0` is an int in YAML, a float field in the dataclass).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SCALARS = {"bool", "int", "float", "str"}


@functools.lru_cache(maxsize=64)
def _classes(path: Path) -> dict[str, dict[str, str]]:
    """class name -> {field: scalar type} for the dataclass-style classes of one source file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    found: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str] = {}
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                kind = _scalar(item.annotation)
                if kind:
                    fields[item.target.id] = kind
        found[node.name] = fields
    return found


def _scalar(annotation: ast.expr) -> str | None:
    """`float`, `Optional[int]`, `int | None` -> the scalar type; anything else None."""
    if isinstance(annotation, ast.Name):
        return annotation.id if annotation.id in SCALARS else None
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name) \
            and annotation.value.id == "Optional":
        return _scalar(annotation.slice)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        parts = [annotation.left, annotation.right]
        named = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        return _scalar(named[0]) if len(named) == 1 else None
    return None


def fields_of(root: Path, target: str) -> dict[str, str]:
    """{field: type} of the class a `_target_` names, looked up in the module (file or package) it names."""
    module, _, name = target.rpartition(".")
    if not module.startswith("verl."):
        return {}
    base = root.joinpath(*module.split("."))
    files = [base.with_suffix(".py")] if base.with_suffix(".py").is_file() else sorted(base.glob("*.py"))
    for file in files:
        classes = _classes(file)
        if name in classes:
            return classes[name]
    return {}
