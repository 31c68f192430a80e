"""Starting an attempt of a run: its spec resumed from the newest complete checkpoint, its scripts, its backend.

Every attempt (the launch's, a recovery's, a `resume`'s) starts here. Each writes its own scripts
(attempt-N/scripts) from a compiled Plan: the launch passes the Plan it compiled and confirmed, a
retry compiles its changed spec. The attempt also writes `attempt-N/handle.json` (backend, process
group or job) beside the record, so `stop` can end the training even when run.json is damaged.
"""

from __future__ import annotations

import os
from pathlib import Path

from verl_deploy.backends.protocol import Backend
from verl_deploy.backends.registry import make_backend
from verl_deploy.pipeline import Prepared
from verl_deploy.runs.checkpoints import resume_point
from verl_deploy.runs.handles import write_handle
from verl_deploy.runs.record import Attempt, RunRecord
from verl_deploy.spec import RunSpec


class LaunchError(Exception):
    """One line for the user (`message — fix: fix` when there is a fix)."""


def backend_for(record: RunRecord, *, with_spec: bool = True) -> Backend:
    """The run's backend, built again from its record (`with_spec=False`: what stopping or evidence needs)."""
    spec = spec_of(record) if with_spec else None
    container, run_dir = record.spec.get("container"), str(record.spec.get("run_dir") or "/verl")
    if spec is not None:
        container, run_dir = spec.container, spec.run_dir
    return make_backend(record.backend, record.backend_options, spec, container, run_dir)


def spec_data(spec: RunSpec) -> dict:
    data = spec.model_dump(mode="json", exclude={"swanlab_api_key"})
    data["sources"] = dict(spec.sources)
    return data


def spec_of(record: RunRecord) -> RunSpec:
    """The run's spec; the SwanLab key comes back from SWANLAB_API_KEY or the 0600 key file, never from disk here."""
    from verl_deploy.boundedread import UnreadableFile
    from verl_deploy.secrets import load_swanlab_key

    data = dict(record.spec)
    sources = data.pop("sources", {})
    try:
        key = os.environ.get("SWANLAB_API_KEY") or load_swanlab_key()
    except UnreadableFile:  # damaged since launch: the attempt runs without it, as with no key file
        key = None
    if key:
        data["swanlab_api_key"] = key
    return RunSpec(**data, sources=sources)


def compiled(spec: RunSpec, prepared: Prepared | None = None) -> Prepared:
    """The spec's Prepared: the one given when it was compiled from this very spec, else compiled now."""
    from verl_deploy.pipeline import prepare_spec

    if prepared is not None and prepared.spec is spec:
        return prepared
    return prepare_spec(spec)


def write_scripts(prepared: Prepared, directory: Path, backend: Backend | None = None) -> None:
    """The attempt's scripts, and the files its backend adds (submit.sbatch, rayjob.yaml) from the same plan."""
    from verl_deploy.findings import Finding
    from verl_deploy.render import plan_document, write_outputs

    if prepared.plan is None or not prepared.ok:
        raise LaunchError("; ".join(f.line() for f in prepared.findings if f.level == "error"))
    document = plan_document(prepared.plan, prepared.findings, prepared.checked_against, prepared.memory)
    extra = backend.extra_files(prepared.plan, directory) if backend else {}
    written = write_outputs(prepared.plan, directory, document, force=True, extra=extra)
    if isinstance(written, Finding):
        raise LaunchError(written.line())


def with_resume_point(spec: RunSpec, previous: Attempt | None) -> tuple[RunSpec, dict]:
    """The spec resuming from the newest complete checkpoint (verl's `auto` when that is the tracked one).

    The resume overrides a previous attempt got from here are dropped first: each attempt looks again.
    The spec comes back as it was (the same object) when nothing changes.
    """
    ours = set((previous.resume or {}).get("overrides", [])) if previous else set()
    overrides = [o for o in spec.overrides if o not in ours]
    point = resume_point(spec.effective_ckpts_dir, spec.framework)
    added: list[str] = []
    if point.overrides_tracker:
        from verl_deploy.profiles import knob_overrides

        added = (knob_overrides(spec, resume_mode="resume_path", resume_from_path=point.folder) if point.folder
                 else knob_overrides(spec, resume_mode="disable"))
    if overrides != list(spec.overrides) or added:
        spec = spec.with_changes(source="recovery", overrides=[*overrides, *added])
    info = {"from_step": point.step, "tracked_step": point.tracked, "overrides": added,
            "skipped": [{"step": step, "missing": why} for step, why in point.skipped]}
    return spec, info


def _resume_note(info: dict, step_reached: int, retry: bool) -> str:
    """Where the attempt starts from, and why when a torn checkpoint was passed over."""
    start = info["from_step"]
    redone = f", {step_reached - start} step(s) redone" if retry and start is not None and step_reached > start else ""
    where = f"resuming from step {start}{redone}" if start is not None else (
        "no checkpoint yet: from the start" if retry and not info["skipped"] else "from the start")
    if info["skipped"]:
        first = info["skipped"][0]
        return f"; global_step_{first['step']} is incomplete ({first['missing']}): {where}"
    return f"; {where}" if retry or start is not None else ""


def features_of(spec: RunSpec, calibrated: dict, predicted: dict | None = None) -> tuple[list[str], dict]:
    """Every feature on for this spec, and where each came from (the calibration log named as such, and a feature
    added before a predicted OOM as "predicted OOM at response length N")."""
    from verl_deploy import features as registry

    states, _ = registry.resolve(framework=spec.framework, device=spec.device, mask=spec.mask,
                                 user_features=spec.features, no_default_features=spec.no_default_features,
                                 oom_features=spec.oom_features, estimate_features=spec.estimate_features)
    on = [s for s in states if s.on]
    origins = {s.name: ("calibration" if s.why == "estimate" and s.name in calibrated else str(s.why)) for s in on}
    for name, origin in (predicted or {}).items():
        if origins.get(name) == "oom":
            origins[name] = str(origin)
    return [s.name for s in on], origins


def start_attempt(record: RunRecord, spec: RunSpec, reason: str, added: list[str], changes: dict,
                  prepared: Prepared | None = None) -> Attempt:
    """The next attempt of the record, started; `prepared`: the spec's compiled Plan, when the caller has it."""
    n = len(record.attempts) + 1
    attempt_dir = record.directory / f"attempt-{n}"
    resumed, resume = with_resume_point(spec, record.current)
    backend = backend_for(record)
    write_scripts(compiled(resumed, prepared if resumed is spec else None), attempt_dir / "scripts", backend)
    attempt = Attempt(n=n, features=added, reason=reason + _resume_note(resume, record.step, n > 1),
                      resumed_from_step=resume["from_step"], changes=changes, resume=resume)
    attempt.features_on, attempt.feature_origins = features_of(resumed, record.calibrated_features,
                                                               record.predicted_features)
    attempt.handle = backend.start(attempt_dir / "scripts", attempt_dir)
    attempt.handle.devices = backend.device_access(attempt.handle)  # what the live view may read from here
    attempt.log = attempt.handle.log
    write_handle(record, resumed, attempt)
    if len(resumed.nodes) > 1:
        backend.start_nodes(resumed, attempt_dir / "scripts", attempt.handle)
        write_handle(record, resumed, attempt)
    record.attempts.append(attempt)
    record.spec = spec_data(resumed)
    record.state = "running"
    record.scan = {key: record.scan[key] for key in ("skipped", "first_skipped") if key in record.scan}  # a new log
    record.save()
    return attempt
