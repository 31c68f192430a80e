"""The configuration section of a run's report, as `verl-deploy plan` shows it.

Same sections, same field names, same values (derived ones such as `gen_tp` as what they were
derived to, lists joined, an override that replaced a field named), with where each value came
from. Fields that are unset and derive nothing (a container, a proxy) are left out rather than
shown as None, and so are a mode's own settings in a run of another mode (RunSpec.applies). The
spec is the one the run's current attempt was launched with (the record's, which holds every
change recovery made); the superseded fields come from that attempt's plan.json.
"""

from __future__ import annotations

from verl_deploy.profiles.modes import ignored_settings
from verl_deploy.spec import SECRET_FIELDS, RunSpec
from verl_deploy.views.spec_rows import SECTIONS, UNSET, shown_value


def config_rows(spec_data: dict, superseded: dict | None = None) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """[(section title, [(field, value, source)])] for a record's spec; [] when it no longer validates."""
    data = dict(spec_data)
    sources = data.pop("sources", {}) or {}
    data.pop("swanlab_api_key", None)  # never stored; the record says only whether SwanLab was on
    try:
        spec = RunSpec(**data, sources=sources)
    except Exception:  # noqa: BLE001 - a record from another version: the raw rows below instead
        return []
    sections = []
    ignored = ignored_settings(spec)
    for title, names in SECTIONS:
        rows = []
        for name in names:
            if name in SECRET_FIELDS:
                continue
            value, source = shown_value(spec, name, superseded)
            if value in (UNSET, "", "False") and source == "default":
                continue  # unset and nothing derived from it: not part of this run's configuration
            if source in ("default", "derived") and (not spec.applies(name) or name in ignored):
                continue  # another mode's (release's) setting, or one this run's trainer ignores: left alone
            rows.append((name, value, source))
        if rows:
            sections.append((title, rows))
    return sections
