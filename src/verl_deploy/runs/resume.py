"""The resume stage: an ended run's spec with the changes asked for -> confirm -> its next attempt -> supervise.

Like a launch (runs/launch.py), with the same record continued: the spec is the run's own plus the
changes, compiled once, confirmed, and started as the next attempt from the newest complete checkpoint
(attempts.with_resume_point, as every retry does) on the run's backend; the OOM ladder's retry budget
counts again from this attempt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from verl_deploy.backends.protocol import BackendError
from verl_deploy.findings import Finding, UserError, error
from verl_deploy.pipeline import Prepared, prepare_spec
from verl_deploy.runs.attempts import spec_of, start_attempt
from verl_deploy.runs.ckptlock import live_users
from verl_deploy.runs.launch import Confirm, prepare_backend, supervise_started
from verl_deploy.runs.record import RunRecord
from verl_deploy.runs.recovery import RESUME_REASON


@dataclass(frozen=True)
class ResumeRequest:
    """What `resume` changes in the run's spec, and how long the start may take."""

    features: Optional[str] = None  # `recompute,-offload`: added, or turned off with a leading -
    max_response_length: Optional[int] = None
    gpu_memory_utilization: Optional[float] = None
    start_timeout: float = 180.0


class ResumeError(Exception):
    def __init__(self, findings: list[Finding]):
        super().__init__("; ".join(f.line() for f in findings))
        self.findings = findings


def _feature_changes(spec, listed: str) -> dict:
    """`recompute,-offload` on top of the run's features: an added one is the user's, a removed one is gone
    from what the ladder and the estimate added too."""
    features, oom, estimate = list(spec.features), list(spec.oom_features), list(spec.estimate_features)
    for token in (t.strip() for t in listed.split(",")):
        if not token:
            continue
        name = token.lstrip("-+")
        features = [f for f in features if f.lstrip("-+") != name]
        if token.startswith("-"):
            oom, estimate = [f for f in oom if f != name], [f for f in estimate if f != name]
        features.append(token)
    return {"features": features, "oom_features": oom, "estimate_features": estimate}


def resume(record: RunRecord, request: ResumeRequest, *, confirm: Confirm,
           say: Callable[[str], None]) -> RunRecord:
    """Run the stage: ResumeError (findings) when refused; what the backend raises when it could not start."""
    prepared, changes = prepare_resume(record, features=request.features,
                                       max_response_length=request.max_response_length,
                                       gpu_memory_utilization=request.gpu_memory_utilization)
    confirm(prepared, f"resume run {record.id} ({record.backend} backend)", [])
    return start_resume(record, prepared, changes, start_timeout=request.start_timeout, say=say)


def prepare_resume(record: RunRecord, *, features: str | None = None, max_response_length: int | None = None,
                   gpu_memory_utilization: float | None = None) -> tuple[Prepared, dict]:
    """(the prepared spec of the next attempt, the fields changed) or ResumeError with every problem."""
    if record.state == "succeeded":
        raise ResumeError([error("run", f"run {record.id} already succeeded: there is nothing to resume",
                                 "start a new run with `verl-deploy launch` (another --ckpts-dir, or more "
                                 "--train-steps)", area="launch")])
    if record.state not in ("failed", "stopped"):
        raise ResumeError([error("run", f"run {record.id} is {record.state}: only an ended run is resumed",
                                 f"wait for its end, or `verl-deploy stop {record.id}` first", area="launch")])
    spec = spec_of(record)
    changes: dict = {}
    if features:
        changes.update(_feature_changes(spec, features))
    if max_response_length is not None:
        changes["max_response_length"] = max_response_length
    if gpu_memory_utilization is not None:
        changes["gpu_memory_utilization"] = gpu_memory_utilization
    if changes:
        try:
            spec = spec.with_changes(source="flag", **changes)
        except (UserError, ValueError) as exc:
            found = exc.findings if isinstance(exc, UserError) else [error("resume", str(exc).splitlines()[0])]
            raise ResumeError(found) from None
    prepared = prepare_spec(spec)
    if prepared.plan is None or not prepared.ok:
        raise ResumeError([f for f in prepared.findings if f.level == "error"])
    users = [u for u in live_users(spec.effective_ckpts_dir) if u != record.id]
    if users:
        raise ResumeError([error("ckpts_dir", f"run {users[0]} is live and uses {spec.effective_ckpts_dir}",
                                 f"stop it first (`verl-deploy stop {users[0]}`)", area="launch")])
    return prepared, changes


def start_resume(record: RunRecord, prepared: Prepared, changes: dict, *, start_timeout: float,
                 say: Callable[[str], None]) -> RunRecord:
    """The next attempt of the record, started from `prepared` (its Plan compiled once), with a supervisor;
    returns once its log advances."""
    spec = prepared.spec
    try:
        prepare_backend(record, spec, say)
    except BackendError as exc:
        raise ResumeError([error("container", str(exc), exc.fix, area="environment")]) from None
    try:
        (record.directory / "stop").unlink()  # the stop of the last attempt is not this attempt's
    except FileNotFoundError:
        pass
    record.state, record.failure, record.launcher_pid = "starting", None, os.getpid()
    record.save()
    shown = ", ".join(f"{k}={v}" for k, v in changes.items() if k not in ("oom_features", "estimate_features"))
    start_attempt(record, spec, RESUME_REASON + (f" ({shown})" if shown else ""), [], changes, prepared)
    return supervise_started(record, start_timeout)
