"""Check every override against verl's real config, with Hydra's rules, before anything is written.

Hydra's rules (hydra-core 1.3): a plain ``key=v`` needs the key to exist; ``+key=v`` fails
when the key holds a non-null scalar; ``++`` always composes. On top of Hydra, verl turns
sections with ``_target_`` into dataclasses, so a new key under such a section composes but
is rejected when verl starts: that is an error here too.
"""

from __future__ import annotations

import difflib
from typing import Iterable

from verl_deploy.compiler import Override, Plan
from verl_deploy.findings import Finding, error, warning
from verl_deploy.verlconfig import index as key_index
from verl_deploy.verlconfig.locate import ConfigUnavailable, locate


def suggestions(key: str, index: key_index.KeyIndex, limit: int = 3) -> list[str]:
    """The nearest real keys: same last segment first, then by spelling."""
    leaves = [k for k in index.kinds if index.kinds[k] != "dict"]
    last = key.rsplit(".", 1)[-1]
    same_leaf = [k for k in leaves if k.rsplit(".", 1)[-1] == last]
    close = difflib.get_close_matches(key, leaves, n=limit, cutoff=0.75)
    if not close:
        close = [k for k in difflib.get_close_matches(key, list(index.kinds), n=limit, cutoff=0.6)]
    ranked: list[str] = []
    for candidate in [*close, *sorted(same_leaf, key=lambda k: -difflib.SequenceMatcher(None, k, key).ratio())]:
        if candidate not in ranked and candidate != key:
            ranked.append(candidate)
    return ranked[:limit]


def _fix_for_unknown(key: str, index: key_index.KeyIndex) -> str:
    near = suggestions(key, index)
    if near:
        return "did you mean " + " or ".join(near) + "?"
    return "check the key name against verl's config (verl/trainer/config)"


def check_override(override: Override, index: key_index.KeyIndex, is_open=lambda key: False) -> list[Finding]:
    field = "override" if override.origin == "--override" else f"profile:{override.origin}"
    key, prefix = override.key, override.prefix
    text = override.text()
    kind = index.kind(key)
    if not key or any(not part for part in key.split(".")):
        return [error(field, f"{text!r} has no valid key", "write KEY=VALUE, e.g. trainer.save_freq=20")]
    if prefix == "~":
        return [] if kind is not None else [error(field, f"cannot delete {key}: not in verl's config",
                                                    _fix_for_unknown(key, index))]
    if kind is None:
        parent = index.nearest_existing(key)
        parent_kind = index.kind(parent) if parent else "dict"
        if parent_kind not in ("dict", "null"):
            return [error(field, f"{key}: {parent} is a {parent_kind}, it has no sub-keys", _fix_for_unknown(key, index))]
        if prefix == "":
            return [error(field, f"unknown verl config key {key}", _fix_for_unknown(key, index)
                          + f" (to add a new key use +{key}=...)")]
        if parent in index.targets and not is_open(key):
            return [error(field, f"{key} is not a field of {parent}: verl builds that section into a dataclass "
                          "and rejects unknown fields at start", _fix_for_unknown(key, index))]
        return []
    if prefix == "+" and kind == "value":
        return [error(field, f"+{key}: the key already exists in verl's config, so Hydra refuses '+'",
                      f"write {key}=... without '+'")]
    if kind == "value" and override.raw is not None:  # a user's text (a knob's value is the spec's, checked)
        return check_value(override, index.value_type(key), field)
    return []


def _hydra_value(override: Override) -> object:
    """The value as Hydra hands it to verl's config: 7 an int, 0.5 a float, true a bool, abc or '7' text."""
    from verl_deploy.hydra_text import _parser

    return _parser().parse_override(override.text()).value()


# "number": a YAML int default without a dataclass annotation (it may be a float field)
ACCEPTS = {"bool": (bool,), "int": (int,), "float": (int, float), "number": (int, float)}


def check_value(override: Override, declared: str | None, field: str) -> list[Finding]:
    """The value against the type of verl's default for the key (and the rollout engine's range)."""
    from verl_deploy.profiles.value_ranges import out_of_range

    if override.raw is None or "${" in override.raw:
        return []  # an interpolation is resolved by verl, at start
    try:
        value = _hydra_value(override)
    except Exception:  # the grammar check reports unparsable text
        return []
    key = override.key
    if value is not None and declared in ACCEPTS:
        wrong = isinstance(value, bool) != (declared == "bool") or not isinstance(value, ACCEPTS[declared])
        if wrong:
            shown = override.raw if len(override.raw) <= 40 else override.raw[:37] + "..."
            want = {"bool": "true or false", "int": "a whole number"}.get(declared, "a number")
            return [error(field, f"{key}={shown}: verl's config declares {key} as {declared}, and {shown!r} is "
                          f"{_kind(value)}", f"give {key} {want}")]
    if declared == "number" and isinstance(value, float) and not value.is_integer():
        return [warning(field, f"{key}={override.raw}: verl's default for {key} is a whole number (its type is "
                        "not declared anywhere verl-deploy can read)", f"check that {key} takes a fraction")]
    why = out_of_range(key, value)
    if why:
        return [error(field, f"{key}={override.raw}: {key.rsplit('.', 1)[-1]} {why}", "give a value in that range")]
    return []


def _kind(value: object) -> str:
    if isinstance(value, float) and not isinstance(value, bool):
        return "a fraction" if not value.is_integer() else "a float"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (list, dict)):
        return f"a {type(value).__name__}"
    return "text"


def check_grammar(overrides: Iterable[Override]) -> list[Finding]:
    """User overrides are Hydra text; parse them with Hydra's own parser (the spec already did: this
    keeps a plan built another way from reaching verl unparsed)."""
    from verl_deploy.hydra_text import OverrideSyntaxError, parse_override

    found: list[Finding] = []
    for override in overrides:
        if override.origin != "--override":
            continue
        try:
            parse_override(override.text())
        except OverrideSyntaxError as exc:
            found.append(error("override", str(exc), exc.fix))
    return found


def validate_plan(plan: Plan, *, download: bool = True, announce=None) -> tuple[list[Finding], str | None]:
    """Findings for the plan's overrides, and a line saying what they were checked against."""
    spec = plan.spec
    try:
        source = locate(spec.verl_version, spec.verl_dir, download=download, announce=announce)
    except ConfigUnavailable as exc:
        level = error if spec.strict else warning
        return [level("verl_version", f"overrides not checked against verl's config: {exc}",
                      "pass --verl-dir with a verl checkout, or allow pip to reach PyPI", area="verl")], None
    found: list[Finding] = []
    if spec.verl_dir and source.version.split(".dev")[0] != spec.verl_version and spec.sources.get(
            "verl_version", "default") not in ("default", "derived"):
        found.append(warning("verl_version", f"--verl-dir holds verl {source.version}, not {spec.verl_version}",
                             "drop --verl-version to use the checkout's version"))
    base = plan.profile.base_configs[spec.framework]
    overlay = plan.profile.recipe_overlays[(plan.mechanism, spec.framework)]
    try:
        idx = key_index.build(source, plan.entry_module, plan.config_name, base, overlay)
    except Exception as exc:  # Hydra reports config problems as many exception types
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [error("verl_version", f"verl {source.version}'s config did not compose: {message}",
                      "check --verl-dir, or report this with `verl-deploy plan --json`", area="verl")], None
    found += check_grammar(plan.overrides)
    for override in plan.overrides:
        found += check_override(override, idx, plan.profile.is_open)
    return found, f"verl {source.version} ({source.origin}: {source.root}); entry config: {idx.origin}"
