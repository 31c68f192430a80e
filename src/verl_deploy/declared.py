"""How a RunSpec field is declared once, and the listings generated from that declaration.

A field of ``RunSpec`` says everything about itself in its ``Field``: its flag(s) and their help and
panel, its environment variable(s), the config-file section `init` writes it in, the wizard round that
asks it (and the question), the section of `plan` and of the confirmation that show it, the runs it
means something in (`when` a mode, algorithm... is chosen, `since` a verl release), whether it is a
secret, and the knob the compiler sends it as. The CLI options, the environment map, the config
file's sections, the wizard's rounds and the views are generated from it (``spec.listing``); only the
knob -> verl key mapping lives elsewhere, in the profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from pydantic import Field
from pydantic.fields import FieldInfo

from verl_deploy.verl_release import release_numbers

# the listings a field can appear in, each ordered by sections (the consumers name the sections' order)
TABLES = ("panel", "view", "summary", "config", "round")
START = "start"  # `follows={"view": START}`: the field leads its section in that listing


@dataclass(frozen=True)
class FieldMeta:
    """What one RunSpec field declares about itself beyond its type, default and constraints."""

    flags: tuple[str, ...] = ()  # the first is the flag; the others are aliases
    help: str = ""
    panel: Optional[str] = None  # --help panel
    env: tuple[str, ...] = ()  # environment variables, lowest priority first (a later one wins)
    config: Optional[str] = None  # section of the config file `init` writes
    round: Optional[str] = None  # the wizard round that asks it
    ask: Optional[str] = None  # the wizard's question, when the round asks it as plain text
    view: Optional[str] = None  # section of `plan` (and of the report's configuration)
    summary: Optional[str] = None  # group of the confirmation before a launch
    deciding: bool = False  # `plan` shows it even at its default: it decides the run
    # the field means something only when each named field holds one of the values (e.g. {"mode": [...]}):
    # `plan` shows it as deciding, and the confirmation and the report show it, only then
    when: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    since: Optional[str] = None  # ... and only from this verl release on (the release that has it)
    yes_no: bool = False  # `--flag yes|no`, not a switch
    repeat: bool = False  # the flag is given once per value (`--mount A --mount B`), not comma separated
    secret: bool = False  # never in a file, argv, a script or output (masked when shown)
    knob: Optional[str] = None  # the compiler sends the value as this knob (profiles map knobs to verl keys)
    # where a listing puts the field when that differs from the declaration order: right after the named
    # field of the same section (fields naming the same one keep their declared order), or START
    follows: Mapping[str, str] = field(default_factory=dict)

    @property
    def flag(self) -> Optional[str]:
        return self.flags[0] if self.flags else None

    @classmethod
    def of(cls, info: FieldInfo) -> "FieldMeta":
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        declared: Any = extra.get("verl_deploy")
        if not isinstance(declared, dict):
            return cls()
        values: dict[str, Any] = {k: tuple(v) if k in ("flags", "env") else v for k, v in declared.items()}
        values["when"] = {name: tuple(allowed) for name, allowed in values.get("when", {}).items()}
        return cls(**values)

    def condition(self) -> str:
        """Where the field means something, from `when` and `since`: "used with mode dapo and verl 0.9.0+"."""
        needs = [f"{key} {' or '.join(allowed)}" for key, allowed in self.when.items()]
        if self.since:
            needs.append(f"verl {self.since}+")
        return "used with " + " and ".join(needs)

    def applies(self, values: Mapping[str, Any]) -> bool:
        """Does the field mean something in a run of these field values (`when` and `since` hold)?"""
        if any(str(values.get(name)) not in allowed for name, allowed in self.when.items()):
            return False
        return self.since is None or release_numbers(str(values.get("verl_version", ""))) >= release_numbers(self.since)



def spec_field(default: Any = ..., *, flags: str | Iterable[str] = (), help: str = "", panel: str | None = None,
               env: str | Iterable[str] = (), config: str | None = None, round: str | None = None,
               ask: str | None = None, view: str | None = None, summary: str | None = None, deciding: bool = False,
               when: Mapping[str, Iterable[str]] | None = None, since: str | None = None, yes_no: bool = False,
               repeat: bool = False, secret: bool = False, knob: str | None = None,
               follows: Mapping[str, str] | None = None, **constraints: Any) -> Any:
    """A pydantic Field carrying the field's declaration (in json_schema_extra, so the schema shows it too)."""
    declared: dict[str, Any] = {
        "flags": [flags] if isinstance(flags, str) else list(flags), "help": help, "panel": panel,
        "env": [env] if isinstance(env, str) else list(env), "config": config, "round": round, "ask": ask,
        "view": view, "summary": summary, "deciding": deciding,
        "when": {name: list(allowed) for name, allowed in (when or {}).items()}, "since": since,
        "yes_no": yes_no, "repeat": repeat, "secret": secret, "knob": knob,
        "follows": dict(follows or {}),
    }
    assert not set(declared["follows"]) - set(TABLES), declared["follows"]
    unset = {k for k, v in declared.items() if v in (None, False, "", [], {})}
    return Field(default, json_schema_extra={"verl_deploy": {k: v for k, v in declared.items() if k not in unset}},
                 **constraints)


def sections(metas: Mapping[str, FieldMeta], table: str,
             titles: Iterable[str] | None = None) -> list[tuple[str, list[str]]]:
    """[(section, [field])] of one listing: the sections in the order of `titles` (else first use), the
    fields in declaration order, moved where a field `follows` another in this listing."""
    members: dict[str, list[str]] = {}
    for name, meta in metas.items():
        section = getattr(meta, table)
        if section:
            members.setdefault(section, []).append(name)
    order = list(titles) if titles is not None else list(members)
    unknown = set(members) - set(order)
    assert not unknown, f"{table}: sections {sorted(unknown)} are not among {order}"
    return [(title, _placed(members.get(title, []), metas, table)) for title in order]


def _placed(names: list[str], metas: Mapping[str, FieldMeta], table: str) -> list[str]:
    """Declaration order, then each field with a `follows` for this table moved right after the field it names."""
    anchor_of = {name: metas[name].follows[table] for name in names if table in metas[name].follows}
    placed = [name for name in names if name not in anchor_of]
    last_after: dict[str, str] = {}  # anchor -> the follower put after it last (the next goes after that one)
    pending = [name for name in names if name in anchor_of]
    while pending:
        ready = [name for name in pending if anchor_of[name] == START or anchor_of[name] in placed]
        assert ready, f"{table}: {pending} follow fields that are not in their section"
        for name in ready:
            anchor = anchor_of[name]
            behind = last_after.get(anchor)
            index = placed.index(behind) + 1 if behind else (0 if anchor == START else placed.index(anchor) + 1)
            placed.insert(index, name)
            last_after[anchor] = name
        pending = [name for name in pending if name not in ready]
    return placed
