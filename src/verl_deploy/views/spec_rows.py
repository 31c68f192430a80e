"""A spec's fields as people read them: by section, each value with where it came from.

`plan`, the confirmation before a launch and the report's configuration all show fields this way.
Which section shows a field, and whether `plan` shows it at its default, is declared on the field
(spec.py `view=`, `deciding=`, and `when=` / `since=`: a mode's own settings decide only in that mode);
this module only orders the sections and formats the values.
"""

from __future__ import annotations

from typing import Mapping

from verl_deploy.profiles.modes import ignored_settings
from verl_deploy.secrets import mask_secret
from verl_deploy.spec import DECLARED, RunSpec, listing

UNSET = "—"
TITLES = ("Run", "Paths", "Hardware", "Hyper-parameters", "Parallelism", "Async", "Features", "Logging", "Extra")
# [(section, [field])] of `plan --all`, generated from the fields' `view=` declarations
SECTIONS: list[tuple[str, list[str]]] = listing("view", TITLES)
# The values that decide a run, besides the header's mode, algorithm, framework, device and verl release: `plan`
# shows these (those declared `when=` a mode... only in such a run) and whatever was set or detected; `plan --all`,
# every field.
DECIDING = frozenset(name for name, meta in DECLARED.items() if meta.deciding)


def shown_value(spec: RunSpec, name: str, superseded: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(value, source) for display; derived values show what they were derived as, a secret is masked, and a
    field an --override replaced (`superseded`: field -> override) names the override."""
    source = spec.sources.get(name, "default")
    value = getattr(spec, name)
    derived = spec.derived_values()
    if value is None and name in derived:
        value, source = derived[name], "derived"
    if name == "logger" and value != spec.loggers:  # what verl's trainer.logger gets (console, + swanlab when on)
        value, source = spec.loggers, source if value else "derived"
    if DECLARED[name].secret and value is not None:
        value = mask_secret(value.get_secret_value())
    if isinstance(value, list):
        value = ",".join(str(v) for v in value) if value else UNSET
    if value is None:
        value = UNSET
    replaced_by = (superseded or {}).get(name)
    if replaced_by is not None:  # verl receives the override, not the field: say so where the field is shown
        return f"{replaced_by} (instead of {value})", "flag --override"
    return str(value), source


def shown_fields(spec: RunSpec, superseded: Mapping[str, str], everything: bool) -> list[tuple[str, str, str, str]]:
    """(section, field, value, source) rows: every field, or the deciding ones (where they mean something in this
    run) plus every one not left at its default: set, detected, or derived to another value (--nodes' head as
    master_addr); what an unset field stands for is shown only where it decides the run."""
    rows = []
    ignored = ignored_settings(spec)
    for title, names in SECTIONS:
        for name in names:
            value, source = shown_value(spec, name, superseded)
            applies = spec.applies(name) and name not in ignored
            deciding = name in DECIDING and value != UNSET and applies
            if everything or source not in ("default", "derived") or deciding or _changed(spec, name):
                rows.append((title, name, value, source if applies else f"{source}; {not_used(spec, name, ignored)}"))
    return rows


def not_used(spec: RunSpec, name: str, ignored: Mapping[str, str]) -> str:
    """Why a field means nothing in this run: another mode's or release's setting, or one its trainer ignores."""
    return unused_note(name) if not spec.applies(name) else f"not used: {ignored[name]}"


def _changed(spec: RunSpec, name: str) -> bool:
    """Does the field hold a value other than its declared default (one the run derived, not one it stands for)?"""
    value = getattr(spec, name)
    return value is not None and value != RunSpec.model_fields[name].get_default(call_default_factory=True)


def unused_note(name: str) -> str:
    """Why a field means nothing in this run, from its declaration: "used with mode separate-async or fully-async"."""
    return DECLARED[name].condition()
