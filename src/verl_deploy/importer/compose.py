"""Compose a script's effective verl config, and a plan's, with Hydra against the real config tree of
a release (verlconfig), and compare the two key by key."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from verl_deploy.verlconfig import index
from verl_deploy.verlconfig.locate import ConfigSource


class ComposeProblem(Exception):
    """Hydra refused the overrides or the config (the message is Hydra's first line)."""


class ConfigNotFound(ComposeProblem):
    """The entry's config name is not a config this release (or the recipe checkouts given) ships."""


@dataclass
class Composed:
    resolved: dict[str, Any]  # flat path -> value, interpolations resolved
    raw: dict[str, Any]  # flat path -> value as written (an interpolation stays `${...}`)


def _entry_config(source: ConfigSource, module: str, config_name: str, profile, framework: str,
                  mode: str | None) -> tuple[str, dict[str, Any]]:
    """(base config, entry document) for a config name: a base config itself, the entry's own yaml in
    this tree, or the profile's declaration of that yaml."""
    if config_name in set(profile.base_configs.values()):
        return config_name, {}
    real = source.recipe_config(module, config_name)
    if real is not None:
        data = yaml.safe_load(real.read_text(encoding="utf-8")) or {}
        base = next((d for d in data.get("defaults", []) if isinstance(d, str) and d != "_self_"),
                    profile.base_configs[framework])
        data.pop("hydra", None)
        data.pop("defaults", None)
        return base, data
    if mode is None:
        raise ConfigNotFound(f"{config_name}.yaml of {module} is not in {source.root}")
    return profile.base_configs[framework], dict(profile.recipe_overlays[(mode, framework)])


# One process composes the same launch more than once (`import` composes the plan it writes to check it, then
# to name what is left; `migrate` each side per check), and a compose is ~0.15 s of Hydra. Kept per process,
# keyed on everything the compose reads but the release's files, which do not change while a command runs
# (a launch that reads the environment, `${oc.env:...}`, is composed each time).
_composed: dict[tuple, Composed] = {}
_COMPOSED_KEPT = 64


def compose(source: ConfigSource, module: str, config_name: str, overrides: Iterable[str], profile,
            framework: str, mode: str | None) -> Composed:
    """The config verl would compose for this launch; a copy, so a caller may change it."""
    try:
        base, entry = _entry_config(source, module, config_name, profile, framework, mode)
    except KeyError:  # a config name the profile does not declare either (the recipe overlays are per mode)
        raise ConfigNotFound(f"{config_name}.yaml of {module} is not in {source.root}") from None
    name = config_name if config_name != base else f"{config_name}_as_entry"  # a config cannot list itself
    texts = tuple(overrides)
    entry_text = json.dumps(entry, sort_keys=True, default=str)
    if "oc.env" in entry_text or any("oc.env" in text for text in texts):  # resolves from this process's environment
        return _compose(source, name, base, entry, texts)
    key = (source, name, base, entry_text, texts)
    if key not in _composed:
        if len(_composed) >= _COMPOSED_KEPT:
            del _composed[next(iter(_composed))]  # the oldest
        _composed[key] = _compose(source, name, base, entry, texts)
    return copy.deepcopy(_composed[key])


def _compose(source: ConfigSource, name: str, base: str, entry: dict[str, Any], overrides: tuple[str, ...]) -> Composed:
    from omegaconf import OmegaConf

    try:
        cfg = index.compose(source, name, base, entry, list(overrides))
    except Exception as exc:  # Hydra's errors are of many types; its first line says what
        text = str(exc).strip().splitlines()
        raise ComposeProblem(text[0] if text else type(exc).__name__) from None
    raw = OmegaConf.to_container(cfg, resolve=False)
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an interpolation that resolves only at run time (oc.env of an unset variable)
        resolved = raw
    return Composed(flatten(resolved), flatten(raw))


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{a: {b: 1}} -> {"a.b": 1}; lists and empty dicts are values."""
    out: dict[str, Any] = {}
    if isinstance(node, dict) and node:
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    else:
        out[prefix] = node
    return out


@dataclass(frozen=True)
class Difference:
    key: str
    original: Any
    generated: Any
    missing: str = ""  # "generated": the key is only in the original; "original": only in the launch

    def line(self) -> str:
        if self.missing == "generated":
            return f"{self.key}: the script has {self.original!r}, the generated launch does not have the key"
        if self.missing == "original":
            return f"{self.key}: the generated launch has {self.generated!r}, the script does not have the key"
        return f"{self.key}: the script gives {self.original!r}, the generated launch {self.generated!r}"


_ABSENT = object()


def same(a: Any, b: Any) -> bool:
    """Equal as verl reads them: 1 and 1.0 are one number; True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def differences(original: Composed, generated: Composed, aside: Iterable[str] = ()) -> list[Difference]:
    """Every key whose value differs, is only in one of the two; keys in `aside` are not compared."""
    skip = set(aside)
    found: list[Difference] = []
    for key in sorted(set(original.resolved) | set(generated.resolved)):
        if key in skip:
            continue
        a = original.resolved.get(key, _ABSENT)
        b = generated.resolved.get(key, _ABSENT)
        if (a == {} and b is _ABSENT and _has_children(generated, key)) or \
                (b == {} and a is _ABSENT and _has_children(original, key)):
            continue  # an empty section on one side, keys under it on the other: those keys are compared
        if a is _ABSENT:
            found.append(Difference(key, None, b, "original"))
        elif b is _ABSENT:
            found.append(Difference(key, a, None, "generated"))
        elif not same(a, b):
            found.append(Difference(key, a, b))
    return found


def _has_children(composed: Composed, key: str) -> bool:
    return any(path.startswith(key + ".") for path in composed.resolved)


def source_with_recipe(wheel: ConfigSource, *recipe_roots: Path) -> ConfigSource:
    """A wheel's configs seen together with checkouts' recipe/ (DAPO's yaml is not in the wheel)."""
    if not recipe_roots:
        return wheel
    return _Combined(wheel.version, wheel.root, wheel.origin, tuple(Path(r) for r in recipe_roots))


@dataclass(frozen=True)
class _Combined(ConfigSource):
    recipe_roots: tuple[Path, ...] = ()

    def recipe_config(self, module: str, config_name: str) -> Path | None:
        for root in (*self.recipe_roots, self.root):
            candidate = root / Path(*module.split(".")[:-1]) / "config" / f"{config_name}.yaml"
            if candidate.is_file():
                return candidate
        return None
