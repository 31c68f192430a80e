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
from verl_deploy.profiles import SUPPORTED, Profile, profile_for
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
    trainer: list[dict[str, str]] = field(default_factory=list)  # the trainer chosen ({old, new, why, other})
    changed: list[tuple[str, Any, Any, str]] = field(default_factory=list)  # fields set for it (field, old, new, why)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # fields it does not read ("field=value", why)
    findings: list = field(default_factory=list)  # the target plan's findings

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def lines(self) -> list[str]:
        out = [f"migrated from verl {self.source} to verl {self.target}"]
        out += [f"  trainer: {t['old']} -> {t['new']}: {t['why']}; {t['other']}" if t["old"] != t["new"] else
                f"  trainer: {t['new']} {t['why']}; {t['other']}" for t in self.trainer]
        out += [f"  set: {name}: {_shown(old)} -> {new} ({why})" for name, old, new, why in self.changed]
        out += [f"  dropped: {text} ({why})" for text, why in self.dropped]
        out += [f"  entry: {old} -> {new} ({why})" for old, new, why in self.entry_moves]
        out += [f"  moved: {old} -> {new} ({why})" for old, new, why in self.moved]
        out += [f"  removed: {text} ({why})" for text, why in self.removed]
        out += [f"  {f.line()}" for f in self.findings if f.level == "error"]
        return out

    def as_dict(self) -> dict:
        return {"source": self.source, "target": self.target, "ok": self.ok,
                "trainer": self.trainer,
                "set": [{"field": f, "old": o, "new": n, "why": w} for f, o, n, w in self.changed],
                "dropped_fields": [{"field": t, "why": w} for t, w in self.dropped],
                "entry_moves": [{"old": o, "new": n, "why": w} for o, n, w in self.entry_moves],
                "moved": [{"old": o, "new": n, "why": w} for o, n, w in self.moved],
                "removed": [{"override": t, "why": w} for t, w in self.removed],
                "findings": [f.as_dict() for f in self.findings]}


def _shown(value: Any) -> str:
    return "(unset)" if value is None else str(value)


def _mechanism(values: dict[str, Any], version: str) -> str:
    """The profile key of the verl entry these values run on `version` (modes.mechanism: GRPO and DAPO from
    verl's core run main_ppo, whatever the release's default DAPO source is)."""
    from pydantic import ValidationError

    from verl_deploy.profiles.modes import mechanism
    from verl_deploy.spec import RunSpec

    fields = {k: v for k, v in values.items() if k in RunSpec.model_fields and k != "overrides"}
    try:
        return mechanism(RunSpec(**{**fields, "verl_version": version}))
    except (ValidationError, ValueError, TypeError):
        return str(values.get("mode", "dapo"))


def _keys_of_release(version: str, values: dict[str, Any], locate_source) -> dict[str, Any]:
    """Every key of the release's entry config for what these values run, with its default: from its key
    table (profiles/keys/), else composed from the release's tree. The entry's own keys, not every entry's:
    a key only the DAPO recipe's config holds needs `+` on main_ppo."""
    from verl_deploy.importer import compose as composing
    from verl_deploy.profiles.keytables import key_table

    profile = profile_for(version)
    if not isinstance(profile, Profile):
        raise MigrateProblem(profile.message, profile.fix)
    kind, framework = _mechanism(values, version), values.get("framework", "megatron")
    module, config_name = profile.entry(kind, framework)
    table = key_table(version, config_name)
    if table is not None:
        return table
    try:
        return composing.compose(locate_source(version), module, config_name, [], profile, framework, kind).raw
    except composing.ComposeProblem as exc:
        raise MigrateProblem(f"verl {version}'s config does not compose: {exc}", "check the release") from None


def migrate_values(values: dict[str, Any], to: str, *, locate_source=None, check: bool = True,
                   dapo_source: str | None = None, mode: str | None = None) -> Migration:
    """The values moved to release `to`, and what changed on the way. A trainer verl's core has taken over on `to`
    (DAPO's recipe, one-step-off) moves to its successor unless `dapo_source` / `mode` keep it (mechanisms.py)."""
    from verl_deploy.importer.mechanisms import ChoiceProblem, choose
    from verl_deploy.verlconfig.locate import ConfigUnavailable, locate

    locate_source = locate_source or (lambda version: locate(version, values.get("verl_dir")))
    source = str(values.get("verl_version") or DEFAULT_VERL_VERSION).lstrip("v")
    target = to.strip().lstrip("v")
    problem = profile_for(target)
    if not isinstance(problem, Profile):
        raise MigrateProblem(problem.message, f"pass --to with a supported version ({SUPPORTED})")
    try:
        choice = choose(values, source, target, dapo_source=dapo_source, mode=mode)
    except ChoiceProblem as exc:
        raise MigrateProblem(str(exc), exc.fix) from None
    try:
        old_keys = _keys_of_release(source, values, locate_source)
        new_keys = _keys_of_release(target, choice.values, locate_source)
    except ConfigUnavailable as exc:
        raise MigrateProblem(f"cannot read verl's configs: {exc}", "pass --verl-dir, or allow pip to reach PyPI") from None
    migration = Migration(source, target, dict(choice.values), trainer=choice.trainer, changed=choice.changed,
                          dropped=choice.dropped)
    migration.entry_moves = _entry_moves(values, choice.values, source, target)
    kept = _Carrier(migration, old_keys, new_keys).carry(values.get("overrides") or [])
    migration.values["overrides"] = kept
    migration.values["verl_version"] = target
    if not kept:
        migration.values.pop("overrides", None)
    migration.values.pop("image", None)  # the image follows the release (images.py)
    if check:
        migration.findings = _check(migration.values)
    return migration


def _entry_moves(values: dict[str, Any], chosen: dict[str, Any], source: str,
                 target: str) -> list[tuple[str, str, str]]:
    old_entry, new_entry = _entry(source, values), _entry(target, chosen)
    return [(m.old, m.new, m.why) for m in ENTRY_MOVES if old_entry == m.old and new_entry == m.new]


class _Carrier:
    """Each override of the source release, carried to the target: kept, moved (with why) or removed (with why)."""

    def __init__(self, migration: Migration, old_keys: dict[str, Any], new_keys: dict[str, Any]):
        self.m, self.old_keys, self.new_keys = migration, old_keys, new_keys

    def carry(self, texts: list[str]) -> list[str]:
        overrides = [(text, parse_override(text)) for text in texts]
        given = {parsed.key: parsed.value for _, parsed in overrides}
        kept: list[str] = []
        for text, parsed in overrides:
            if self._follows(text, parsed, given):
                continue
            carried = self._kept(parsed) or self._moved(parsed)
            if carried is None:
                self.m.removed.append((text, self._replaced(parsed.key)))
            else:
                kept.append(carried)
        return kept

    def _follows(self, text: str, parsed, given: dict[str, Any]) -> bool:
        """Removed (True) when a node above the key is, in the target, an interpolation of another section: Hydra
        refuses a sub-key of a value, and the section reads the other one's keys now."""
        follows = _follows(parsed.key, self.new_keys)
        if follows is None:
            return False
        section, origin = follows
        twin = origin + parsed.key[len(section):]
        if twin not in given:
            then = " and takes what the actor's fields and features send"
        elif given[twin] == parsed.value:
            then = ", which the config sets to the same value"
        else:
            then = f", which its own setting gives (not {parsed.value})"
        self.m.removed.append((text, f"in verl {self.m.target} {section} is {origin} (an interpolation), so it "
                                     f"reads {twin}{then}"))
        return True

    def _kept(self, parsed) -> str | None:
        key = parsed.key
        added_here = parsed.prefix in ("+", "++") and not _present(key, self.old_keys) and \
            not move_for(key, self.m.source, self.m.target)
        if _present(key, self.new_keys) or added_here:
            return _prefix_for(parsed.prefix, key, self.new_keys) + key + _rest(parsed)
        return None

    def _moved(self, parsed) -> str | None:
        key = parsed.key
        moved = move_for(key, self.m.source, self.m.target)
        new_key = moved[0] if moved else _candidate(key, self.old_keys, self.new_keys)
        if not new_key:
            return None
        why = moved[1].why if moved else "a key table candidate: gone from one release, new in the other, same name " \
                                         "and default"
        self.m.moved.append((key, new_key, why))
        return _prefix_for(parsed.prefix, new_key, self.new_keys) + new_key + _rest(parsed)

    def _replaced(self, key: str) -> str:
        near = _candidates(key, self.old_keys, self.new_keys)
        target = self.m.target
        if near:
            return f"verl {target} has no {key}; keys new in {target} with its name and default: {', '.join(near[:4])}"
        return f"verl {target} has no {key} and no key that replaced it"


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


def _entry(version: str, values: dict[str, Any]) -> str:
    profile = profile_for(version)
    if not isinstance(profile, Profile):
        return ""
    return profile.entry(_mechanism(values, version), values.get("framework", "megatron"))[0]


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
    """The config text with the migrated values (comments and order kept where the values did not change). A
    null the config already holds stays (verl's null: keep every checkpoint, count the steps from the epochs);
    a field the new trainer does not read goes."""
    import yaml

    from verl_deploy.wizard.configfile import update_config

    before = yaml.safe_load(text) or {}
    before = {str(k).replace("-", "_"): v for k, v in before.items()} if isinstance(before, dict) else {}
    changed = {k: v for k, v in migration.values.items() if not (v is None and k in before and before[k] is None)}
    if "overrides" not in migration.values:
        changed["overrides"] = None
    for text_of_field, _ in migration.dropped:
        name = text_of_field.split("=", 1)[0]
        if "." not in name:  # a spec field (the others are verl keys of the old trainer's own config)
            changed[name] = None
    updated = update_config(text, changed)
    note = f"# migrated from verl {migration.source} by `verl-deploy migrate`"
    return re.sub(r"^(verl[-_]version: *[^#\n]*?)( +#[^\n]*)?$", lambda m: f"{m.group(1)}  {note}", updated,
                  count=1, flags=re.M)
