"""Carry a config (spec fields + overrides) from one verl release to another.

Spec fields need no change: the target release's profile maps them to its keys (the reward keys'
move to reward.*, one-step-off's entry in verl.experimental). Overrides name verl keys, so each is
checked against the target release's composed config: kept when the key is there, mapped when it
moved (profiles/moves.py, else a candidate from the two releases' trees: a key gone from one and a
new key in the other with the same last name and the same default), and dropped with its name and
what replaced it when it is gone. The result is then checked like any plan (rules and the target's
config; `plan --verify` runs verl's own validation).
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Any

from verl_deploy.hydra_text import parse_override
from verl_deploy.profiles import Profile, profile_for
from verl_deploy.profiles.moves import ENTRY_MOVES, move_for
from verl_deploy.spec import DEFAULT_VERL_VERSION


class MigrateProblem(Exception):
    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


@dataclass
class Migration:
    source: str
    target: str
    values: dict[str, Any]
    moved: list[tuple[str, str, str]] = field(default_factory=list)  # (old, new, why)
    removed: list[tuple[str, str]] = field(default_factory=list)  # (override, what replaced it)
    entry_moves: list[tuple[str, str, str]] = field(default_factory=list)
    findings: list = field(default_factory=list)  # the target plan's findings

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def lines(self) -> list[str]:
        out = [f"migrated from verl {self.source} to verl {self.target}"]
        out += [f"  entry: {old} -> {new} ({why})" for old, new, why in self.entry_moves]
        out += [f"  moved: {old} -> {new} ({why})" for old, new, why in self.moved]
        out += [f"  removed: {text} ({why})" for text, why in self.removed]
        out += [f"  {f.line()}" for f in self.findings if f.level == "error"]
        return out

    def as_dict(self) -> dict:
        return {"source": self.source, "target": self.target, "ok": self.ok,
                "entry_moves": [{"old": o, "new": n, "why": w} for o, n, w in self.entry_moves],
                "moved": [{"old": o, "new": n, "why": w} for o, n, w in self.moved],
                "removed": [{"override": t, "why": w} for t, w in self.removed],
                "findings": [f.as_dict() for f in self.findings]}


def _keys_of_release(version: str, values: dict[str, Any], locate_source) -> dict[str, Any]:
    """Every key of the release's entry config for this mode and framework, with its default: from its key
    table (profiles/keys/), else composed from the release's tree. The entry's own keys, not every entry's:
    a key only the DAPO recipe's config holds needs `+` on main_ppo."""
    from verl_deploy.importer import compose as composing
    from verl_deploy.profiles.keytables import key_table

    profile = profile_for(version)
    if not isinstance(profile, Profile):
        raise MigrateProblem(profile.message, profile.fix)
    mode, framework = values.get("mode", "dapo"), values.get("framework", "megatron")
    module, config_name = profile.entry(mode, framework)
    table = key_table(version, config_name)
    if table is not None:
        return table
    try:
        return composing.compose(locate_source(version), module, config_name, [], profile, framework, mode).raw
    except composing.ComposeProblem as exc:
        raise MigrateProblem(f"verl {version}'s config does not compose: {exc}", "check the release") from None


def migrate_values(values: dict[str, Any], to: str, *, locate_source=None, check: bool = True) -> Migration:
    """The values moved to release `to`, and what changed on the way."""
    from verl_deploy.verlconfig.locate import ConfigUnavailable, locate

    locate_source = locate_source or (lambda version: locate(version, values.get("verl_dir")))
    source = str(values.get("verl_version") or DEFAULT_VERL_VERSION).lstrip("v")
    target = to.strip().lstrip("v")
    if isinstance(profile_for(target), Profile) is False:
        problem = profile_for(target)
        raise MigrateProblem(problem.message, problem.fix)  # type: ignore[union-attr]
    try:
        old_keys = _keys_of_release(source, values, locate_source)
        new_keys = _keys_of_release(target, values, locate_source)
    except ConfigUnavailable as exc:
        raise MigrateProblem(f"cannot read verl's configs: {exc}", "pass --verl-dir, or allow pip to reach PyPI") from None
    migration = Migration(source, target, dict(values))
    mode, framework = values.get("mode", "dapo"), values.get("framework", "megatron")
    old_entry = _entry(source, mode, framework)
    new_entry = _entry(target, mode, framework)
    for move in ENTRY_MOVES:
        if old_entry == move.old and new_entry == move.new:
            migration.entry_moves.append((move.old, move.new, move.why))
    kept: list[str] = []
    overrides = [(text, parse_override(text)) for text in values.get("overrides") or []]
    given = {parsed.key: parsed.value for _, parsed in overrides}
    for text, parsed in overrides:
        key = parsed.key
        follows = _follows(key, new_keys)
        if follows is not None:  # Hydra refuses a sub-key of a value: the section is the other one's now
            section, origin = follows
            twin = origin + key[len(section):]
            if twin not in given:
                then = " and takes what the actor's fields and features send"
            elif given[twin] == parsed.value:
                then = ", which the config sets to the same value"
            else:
                then = f", which its own setting gives (not {parsed.value})"
            migration.removed.append((text, f"in verl {target} {section} is {origin} (an interpolation), so it "
                                      f"reads {twin}{then}"))
            continue
        if _present(key, new_keys) or (parsed.prefix in ("+", "++") and not _present(key, old_keys)
                                       and not move_for(key, source, target)):
            kept.append(_prefix_for(parsed.prefix, key, new_keys) + key + _rest(parsed))
            continue
        moved = move_for(key, source, target)
        why = moved[1].why if moved else ""
        new_key = moved[0] if moved else _candidate(key, old_keys, new_keys)
        if new_key and (moved or new_key):
            why = why or "a key table candidate: gone from one release, new in the other, same name and default"
            kept.append(_prefix_for(parsed.prefix, new_key, new_keys) + new_key + _rest(parsed))
            migration.moved.append((key, new_key, why))
            continue
        near = _candidates(key, old_keys, new_keys)
        replaced = (f"verl {target} has no {key}; keys new in {target} with its name and default: {', '.join(near[:4])}"
                    if near else f"verl {target} has no {key} and no key that replaced it")
        migration.removed.append((text, replaced))
    migration.values["overrides"] = kept
    migration.values["verl_version"] = target
    if not kept:
        migration.values.pop("overrides", None)
    migration.values.pop("image", None)  # the image follows the release (images.py)
    if check:
        migration.findings = _check(migration.values)
    return migration


_FOLLOWED = re.compile(r"^\$\{(?:oc\.select:)?([\w.]+)")


def _follows(key: str, keys: dict[str, Any]) -> tuple[str, str] | None:
    """(section, the section it follows) when a node above `key` is, in this release, an interpolation of
    another section (verl 0.9's ref.megatron.override_transformer_config is the actor's)."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        section = ".".join(parts[:end])
        value = keys.get(section)
        if isinstance(value, str) and (found := _FOLLOWED.match(value)):
            return section, found.group(1)
    return None


def _entry(version: str, mode: str, framework: str) -> str:
    profile = profile_for(version)
    return profile.entry(mode, framework)[0] if isinstance(profile, Profile) else ""


def _present(key: str, keys: dict[str, Any]) -> bool:
    return key in keys or any(k.startswith(key + ".") for k in keys)


def _prefix_for(prefix: str, key: str, keys: dict[str, Any]) -> str:
    """`+` on a key the target now has would be refused by Hydra; a plain key it lacks needs `++`."""
    if prefix == "~":
        return "~"
    if prefix == "+" and key in keys and keys[key] is not None:
        return ""
    if prefix == "" and not _present(key, keys):
        return "++"
    return prefix


def _rest(parsed) -> str:
    return "" if parsed.value is None else "=" + parsed.value


def _candidates(key: str, old_keys: dict[str, Any], new_keys: dict[str, Any]) -> list[str]:
    """Keys new in the target with the same last name and default as this key (gone from the target)."""
    if key not in old_keys:
        return []
    leaf = key.rsplit(".", 1)[-1]
    return [k for k in new_keys if k not in old_keys and k.rsplit(".", 1)[-1] == leaf and new_keys[k] == old_keys[key]]


def _candidate(key: str, old_keys: dict[str, Any], new_keys: dict[str, Any]) -> str | None:
    """The one candidate move of a key, when there is exactly one."""
    found = _candidates(key, old_keys, new_keys)
    return found[0] if len(found) == 1 else None


def _check(values: dict[str, Any]) -> list:
    """The migrated config checked like any plan: rules and the target release's config."""
    from verl_deploy.findings import error
    from verl_deploy.pipeline import prepare
    from verl_deploy.findings import UserError

    try:
        prepared = prepare(flags={k: v for k, v in values.items()}, environ={})
    except UserError as exc:
        return list(exc.findings)
    except Exception as exc:  # a plan that cannot be built is a finding, not a crash
        return [error("config", f"the migrated config cannot be planned: {exc}", "report this config")]
    return prepared.findings


def render_migrated(text: str, migration: Migration) -> str:
    """The config text with the migrated values (comments and order kept where the values did not change)."""
    from verl_deploy.wizard.configfile import update_config

    changed = {k: v for k, v in migration.values.items()}
    if "overrides" not in migration.values:
        changed["overrides"] = None
    import re

    updated = update_config(text, changed)
    note = f"# migrated from verl {migration.source} by `verl-deploy migrate`"
    return re.sub(r"^(verl[-_]version: *[^#\n]*?)( +#[^\n]*)?$", lambda m: f"{m.group(1)}  {note}", updated,
                  count=1, flags=re.M)
