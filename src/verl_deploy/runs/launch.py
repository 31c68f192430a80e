"""The launch stage: LaunchRequest -> gates -> confirm -> rehearse? -> write -> start -> supervise.

The CLI builds a `LaunchRequest` from its options and calls `launch`. The Plan is compiled once, by
the gates (runs/gate.py), and that same Plan is confirmed, written as the first attempt's scripts and
started; only a rehearsal (a changed spec) and a start whose checkpoint makes it resume (a changed
override) compile their own. `launch` returns once the training's log advances (seed 001 stage 8),
with the run's record; the detached supervisor watches it from there. `resume` (runs/resume.py)
shares the start: the backend made ready, the attempt started, a supervisor, the same check.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from verl_deploy.backends.protocol import Backend, BackendError
from verl_deploy.findings import Finding
from verl_deploy.pipeline import Prepared
from verl_deploy.runs.attempts import LaunchError, backend_for, spec_data, start_attempt
from verl_deploy.runs.ckptlock import launch_lock, live_users
from verl_deploy.runs.gate import Gate, gather
from verl_deploy.runs.record import TERMINAL, RunRecord, new_run_id, reload
from verl_deploy.runs.rehearse import Rehearsal, RehearsalFailed, rehearse
from verl_deploy.runs.request import LaunchRequest
from verl_deploy.runs.supervisor import spawn_supervisor
from verl_deploy.spec import RunSpec

Say = Callable[[str], None]
# shown the compiled plan, what is asked (`launch (docker backend)`) and the warnings; returns to go on, or raises
Confirm = Callable[[Prepared, str, list[Finding]], None]


@dataclass
class LaunchOutcome:
    """What the stage did: the gates (always), the rehearsal (when asked), the started run (unless refused,
    a dry run, or --rehearse-only)."""

    gate: Gate
    record: Optional[RunRecord] = None
    rehearsal: Optional[Rehearsal] = None


def launch(request: LaunchRequest, *, confirm: Confirm, say: Say, announce: Optional[Say] = None) -> LaunchOutcome:
    """Run the stage. LaunchError (one line) when the run failed to start after the confirmation; RehearsalFailed
    when the rehearsal failed (the real run is then never started)."""
    gate = gather(request, announce=announce)
    if request.dry_run or not gate.ok:
        return LaunchOutcome(gate)
    prepared, kind = gate.prepared, gate.chosen or "local"
    assert prepared is not None
    confirm(prepared, f"launch ({kind} backend)", gate.warnings)
    outcome = LaunchOutcome(gate)
    if request.rehearse or request.rehearse_only:
        outcome.rehearsal = _rehearse(request, gate, say)
        if request.rehearse_only:
            return outcome
    outcome.record = start_run(prepared.spec, request, gate, say, prepared=prepared, force=request.force,
                               calibrated=calibrated_features(prepared))
    return outcome


def _rehearse(request: LaunchRequest, gate: Gate, say: Say) -> Rehearsal:
    """The rehearsal's runs, each started like the real one on the same backend (runs/rehearse.py)."""
    assert gate.prepared is not None
    try:
        return rehearse(gate.prepared.spec, start=lambda part: start_run(part, request, gate, say), say=say)
    except LaunchError as exc:
        raise RehearsalFailed(f"the rehearsal could not start: {exc}; the real run was not started",
                              "see `verl-deploy status` and `verl-deploy logs`") from None


def calibrated_features(prepared: Prepared) -> dict:
    """The estimate's features that came from the calibration log (an OOM seen before), with what it saw."""
    observed = getattr(prepared.memory, "observed", None) or {}
    if not observed:
        return {}
    seen = "; ".join(observed.values())
    return {name: seen for name in prepared.spec.estimate_features}


def start_run(spec: RunSpec, request: LaunchRequest, gate: Gate, say: Say, *, prepared: Optional[Prepared] = None,
              force: bool = False, calibrated: Optional[dict] = None) -> RunRecord:
    """A new run of `spec` on the gate's backend: its record, the backend made ready, attempt 1 (from `prepared`,
    the spec's compiled Plan, when given), its supervisor; returns once the log advances."""
    record = _new_record(spec, request, gate, say, force=force, calibrated=calibrated)
    try:
        prepare_backend(record, spec, say).login(spec, say)
    except BackendError as exc:
        _fail(record, f"{exc} — fix: {exc.fix}" if exc.fix else str(exc), exc.failure_class)
    try:
        start_attempt(record, spec, "launch", [], {}, prepared)
    except Exception as exc:  # a backend or script problem: recorded, then one line for the user
        _fail(record, str(exc), "start_failed")
    return supervise_started(record, request.start_timeout)


def _new_record(spec: RunSpec, request: LaunchRequest, gate: Gate, say: Say, *, force: bool,
                calibrated: Optional[dict]) -> RunRecord:
    """The run's record on disk, unless a live run uses its checkpoint directory (checked under the launch lock)."""
    record = RunRecord(id=new_run_id(), backend=gate.chosen or "local", spec=spec_data(spec),
                       notify=list(request.notify), stall_seconds=request.stall_seconds,
                       preempt_oom=request.preempt_oom,
                       backend_options=dict(gate.backend_options), launcher_pid=os.getpid(),
                       calibrated_features=dict(calibrated or {}))
    with launch_lock():
        users = live_users(spec.effective_ckpts_dir)
        if users and not force:
            raise LaunchError(f"run {users[0]} is live and uses the checkpoint directory {spec.effective_ckpts_dir}: "
                              f"this run would resume from its checkpoints. Stop it (`verl-deploy stop {users[0]}`), "
                              f"use another --ckpts-dir, or pass --force")
        if users:
            say(f"--force: run {users[0]} also uses {spec.effective_ckpts_dir}")
        record.directory.mkdir(parents=True, exist_ok=True)
        record.save()
    return record


def prepare_backend(record: RunRecord, spec: RunSpec, say: Say) -> Backend:
    """The run's backend, with what starting needs made ready (its container); BackendError when it cannot be."""
    backend = backend_for(record)
    backend.prepare(spec, say)
    return backend


def _fail(record: RunRecord, message: str, kind: str) -> None:
    """The launch stopped before the training started: a class saying where, the cause and its fix."""
    cause, _, fix = message.partition(" — fix: ")
    record.state = "failed"
    record.failure = {"class": kind, "phase": "launch", "cause": cause, "retryable": False,
                      "fix": fix or "see the cause; `verl-deploy launch --dry-run` lists what blocks a launch",
                      "decision": "nothing was started"}
    record.save()
    raise LaunchError(message)


def supervise_started(record: RunRecord, start_timeout: float) -> RunRecord:
    """The started attempt gets its supervisor; then wait until its log advances."""
    record.supervisor_pid = spawn_supervisor(record.id)
    record.save()
    return verify_started(record, start_timeout)


def verify_started(record: RunRecord, timeout: float) -> RunRecord:
    """Seed 001 stage 8: the training process exists and its log advances, within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = reload(record)
        log = Path(current.current.log) if current.current else None
        if current.state in TERMINAL or (log and log.is_file() and log.stat().st_size > 0):
            return current
        time.sleep(0.1)
    log_path = record.current.log if record.current else "its log"
    raise LaunchError(f"the training did not write to {log_path} within {timeout:g} s; "
                      f"see `verl-deploy logs {record.id}` and `verl-deploy status {record.id}`")
