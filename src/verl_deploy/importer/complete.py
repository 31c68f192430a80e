"""From the spec's fields to the same verl config: compose the launch the spec compiles to, and give an
override for every key that still differs and that an override may set (the script's own words, or
verl's value where the script relied on it and verl-deploy would change it), a few rounds until nothing
changes. Then sort what is left: paths (compared apart), keys verl reads alike (a one-item list, a
default verl reads when a key is absent, a key verl's own start-up replaces), keys the launch adds as a
copy of one the script sets, and the keys that still differ, each one a spec field or feature owns.
"""

from __future__ import annotations

import re
from typing import Any

from verl_deploy.compiler import compile_plan
from verl_deploy.hydra_text import format_value
from verl_deploy.importer import compose as composing
from verl_deploy.importer.fields import PATH_KNOBS, keys_of
from verl_deploy.importer.problems import ImportProblem
from verl_deploy.override_owners import beyond_feature, owner_flag
from verl_deploy.profiles import Profile
from verl_deploy.profiles.startup import as_verl_reads, without_unread_overlong

MAX_ROUNDS = 8  # rounds of overrides: the script's own words, then verl's values, then interpolated keys
_ABSENT = object()


def complete(result, original: composing.Composed, source, profile: Profile, validated) -> None:
    """Add an override for every key that differs and that an override may set; sort the rest into `result`."""
    aside_keys = {key for knob in PATH_KNOBS
                  for key in keys_of(profile, knob, result.framework, result.device, result.mechanism)}
    given: dict[str, tuple[str, str]] = {}  # key -> (override text, provenance)
    for round_ in range(MAX_ROUNDS + 1):
        result.overrides = _in_script_order(given)
        plan = compile_plan(validated(result), profile)
        generated = _compose_plan(plan, source, profile, result)
        diffs = composing.differences(original, generated)
        alike = _StartUp(original, generated, result, plan)
        if round_ == MAX_ROUNDS or not _add_fixes(result, diffs, aside_keys, plan, generated, given, alike, original):
            break
    result.overrides = _in_script_order(given)
    _classify(result, diffs, aside_keys, plan, original, profile, alike)


def _in_script_order(given: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """The overrides in the order the script gives them (Hydra applies them in order: `++ref.x` that makes the
    reference's section its own must come before a `+ref.y`), verl's kept values after them."""
    def line(item: tuple[str, str]) -> int:
        found = re.fullmatch(r"script line (\d+)", item[1])
        return int(found.group(1)) if found else 1 << 30
    return sorted(given.values(), key=line)


def _compose_plan(plan, source, profile: Profile, result) -> composing.Composed:
    try:
        return composing.compose(source, plan.entry_module, plan.config_name, plan.argv()[3:], profile,
                                 result.framework, result.mechanism)
    except composing.ComposeProblem as exc:
        raise ImportProblem(f"the generated launch does not compose with verl {result.version}: {exc}",
                            "report this script with `verl-deploy import --json`") from None


class _StartUp:
    """The two configs as verl reads them after its own start-up steps, without the overlong buffer keys its dapo
    reward manager does not read (profiles/startup.py)."""

    def __init__(self, original: composing.Composed, generated: composing.Composed, result, plan):
        self.original = without_unread_overlong(as_verl_reads(original.resolved, result.launch.entry, result.version),
                                                result.version)
        self.generated = without_unread_overlong(as_verl_reads(generated.resolved, plan.entry_module, result.version),
                                                 result.version)
        self.moved = self.original is not original.resolved or self.generated is not generated.resolved

    def same(self, key: str) -> bool:
        if not self.moved:
            return False
        a, b = self.original.get(key, _ABSENT), self.generated.get(key, _ABSENT)
        return (a is _ABSENT and b is _ABSENT) or (a is not _ABSENT and b is not _ABSENT and composing.same(a, b))


def _add_fixes(result, diffs, aside_keys: set[str], plan, generated: composing.Composed,
               given: dict[str, tuple[str, str]], alike: _StartUp, original: composing.Composed) -> bool:
    """Overrides for the differences an override may remove; True when one was added or changed. A round takes
    only the first kind there is: the script's own words, then verl's values of keys the script's config holds
    as they are, then keys it holds as an interpolation (those often follow a key fixed before, and need none)."""
    owners = {o.key: o for o in plan.overrides}
    tiers: list[dict[str, tuple[str, str]]] = [{}, {}, {}]
    for diff in diffs:
        if diff.key in aside_keys or alike.same(diff.key):
            continue
        sent = owners.get(diff.key)
        if _owned(plan, sent, diff):
            continue  # a field or feature owns the key: an override would be refused
        fix = _fix_for(diff, generated, sent, result)
        if fix is None or given.get(diff.key) == fix:
            continue
        own = result.launch.setting(diff.key)
        interpolated = isinstance(original.raw.get(diff.key), str) and "${" in original.raw[diff.key]
        tier = 0 if own is not None and fix[0] == own.text else 2 if interpolated else 1
        tiers[tier][diff.key] = fix
    chosen = next((tier for tier in tiers if tier), {})
    given.update(chosen)
    given.update(_sections_made_own(chosen, result, generated, given))
    return bool(chosen)


def _sections_made_own(chosen: dict[str, tuple[str, str]], result, generated: composing.Composed,
                       given: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """The script's earlier `++` settings in a section that, in the launch, follows another one (verl 0.9's
    ref.megatron.override_transformer_config is `${...actor...}`): the `++` makes the section the script's own,
    and a later `+ref...x` in it is refused by Hydra without it ("An item is already at ..."), even when the
    `++` itself sets a value the launch already reads through the interpolation."""
    needed: dict[str, tuple[str, str]] = {}
    for key, (text, _) in chosen.items():
        own = result.launch.setting(key)
        section = _interpolated_section(key, generated.raw)
        if own is None or own.text != text or section is None:
            continue
        for earlier in result.launch.settings:
            if earlier.line < own.line and earlier.prefix == "++" and earlier.key.startswith(section + ".") \
                    and earlier.key not in given and earlier.key not in chosen:
                needed[earlier.key] = (earlier.text, earlier.provenance)
    return needed


def _interpolated_section(key: str, raw: dict[str, Any]) -> str | None:
    """The nearest node above `key` that is an interpolation (`${...}`) in this composed config."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        value = raw.get(".".join(parts[:end]))
        if isinstance(value, str) and value.startswith("${"):
            return ".".join(parts[:end])
    return None


def _owned(plan, sent, diff: composing.Difference) -> bool:
    if sent is None or sent.origin == "--override" or owner_flag(sent.origin) is None:
        return False
    return not beyond_feature(plan, sent.origin, diff.key, None if diff.missing else str(diff.original))


def _classify(result, diffs, aside_keys: set[str], plan, original: composing.Composed, profile: Profile,
              alike: _StartUp) -> None:
    owners = {o.key: o for o in plan.overrides}
    result.aside = [d for d in diffs if d.key in aside_keys and not _same_path(d)]
    result.read_alike = [d for d in diffs if d.key in aside_keys and _same_path(d)]  # a path and the list of it
    result.remaining, result.mirrored = [], []
    for diff in diffs:
        if diff.key in aside_keys:
            continue
        key = _profile_key(profile, owners.get(diff.key), result)
        verdict = "alike" if alike.same(diff.key) else _verdict(diff, key, original)
        if verdict == "alike":
            result.read_alike.append(diff)
        elif verdict == "mirror":
            result.mirrored.append((diff, key.mirror))
        else:
            result.remaining.append(diff)
    plus = {o.key for o in plan.overrides if o.prefix in ("+", "++") and o.origin != "--override"}
    result.additions = [d for d in result.remaining if d.missing == "original" and d.key in plus]


def _verdict(diff: composing.Difference, key, original: composing.Composed) -> str:
    """alike (verl reads the two the same), mirror (a copy of a key the script sets) or differs."""
    if key is None:
        return "differs"
    if key.one_is_list and not diff.missing and _same_path(diff):
        return "alike"  # 'console' and [console] are one logger list to verl
    if diff.missing == "original":
        if key.has_absent and composing.same(key.absent, diff.generated):
            return "alike"  # verl reads this value when the key is absent: the same run
        if key.mirror and key.mirror in original.resolved and composing.same(original.resolved[key.mirror],
                                                                              diff.generated):
            return "mirror"
    return "differs"


def _profile_key(profile: Profile, sent, result):
    """The profile's Key behind an override the plan sends (None for the user's own overrides)."""
    if sent is None or sent.origin in ("", "--override"):
        return None
    try:
        found = profile.keys_for(sent.origin, result.framework, result.device, result.mechanism)
    except KeyError:
        return None
    return next((k for k in found if k.path == sent.key), None)


def _same_path(diff: composing.Difference) -> bool:
    a, b = diff.original, diff.generated
    a = a[0] if isinstance(a, list) and len(a) == 1 else a
    b = b[0] if isinstance(b, list) and len(b) == 1 else b
    return a == b


def _fix_for(diff: composing.Difference, generated: composing.Composed, sent, result) -> tuple[str, str] | None:
    where = result.launch.where(diff.key)
    if diff.missing == "original":  # only in the launch: delete it, when it is in the base config
        if sent is not None and sent.prefix in ("+", "++"):
            return None  # added by the plan itself: it cannot be deleted by an override (it is not in the base)
        return f"~{diff.key}", where or f"not in the script's config ({result.launch.entry})"
    own = result.launch.setting(diff.key)
    if own is not None and own.prefix != "~" and (sent is None or sent.prefix == own.prefix or own.prefix == "++") \
            and not (own.value or "").startswith("${"):
        return own.text, own.provenance  # the script's own words
    raw = diff.original  # the resolved value: an interpolation would follow the launch's other values
    prefix = "" if diff.key in generated.raw and (sent is None or sent.prefix == "") else "++"
    text = f"{prefix}{diff.key}={hydra_value(raw)}"
    return text, where or f"verl {result.version}'s default, kept (verl-deploy would send {diff.generated!r})"


_INTERPOLATION = re.compile(r"\$\{[^{}]*\}")


def hydra_value(value: Any) -> str:
    """A composed value back as Hydra override text (an interpolation stays one)."""
    if isinstance(value, str) and _INTERPOLATION.fullmatch(value):
        return value
    if isinstance(value, str) and "${" in value:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return format_value(value)
