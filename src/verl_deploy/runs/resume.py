"""Resuming an ended run: its spec with the changes asked for, a new attempt of the same record, a new supervisor.

The attempt starts from the newest complete checkpoint (control.with_resume_point, as every retry does);
the OOM ladder's retry budget counts again from this attempt.
"""

from __future__ import annotations

import os
from typing import Callable

from verl_deploy.findings import Finding, error
from verl_deploy.runs.record import RunRecord

RESUME_REASON = "resumed by `verl-deploy resume`"


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


def prepare_resume(record: RunRecord, *, features: str | None = None, max_response_length: int | None = None,
                   gpu_memory_utilization: float | None = None):
    """(the prepared spec of the next attempt, the fields changed) or ResumeError with every problem."""
    from verl_deploy.pipeline import prepare_spec
    from verl_deploy.runs.ckptlock import live_users
    from verl_deploy.runs.control import spec_of

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
        from verl_deploy.findings import UserError

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


def start_resume(record: RunRecord, spec, changes: dict, *, start_timeout: float,
                 say: Callable[[str], None]) -> RunRecord:
    """The next attempt of the record, started, with a supervisor; returns once its log advances."""
    from verl_deploy.runs.control import spawn_supervisor, start_attempt
    from verl_deploy.runs.launch import verify_started

    if record.backend == "docker":
        from verl_deploy.backends.docker import DockerError, ensure_container

        try:
            ensure_container(spec, say=say, warn=lambda text: say(f"warning: {text}"))
        except DockerError as exc:
            raise ResumeError([error("container", str(exc), exc.fix, area="environment")]) from None
    try:
        (record.directory / "stop").unlink()  # the stop of the last attempt is not this attempt's
    except FileNotFoundError:
        pass
    record.state, record.failure, record.launcher_pid = "starting", None, os.getpid()
    record.save()
    shown = ", ".join(f"{k}={v}" for k, v in changes.items() if k not in ("oom_features", "estimate_features"))
    start_attempt(record, spec, RESUME_REASON + (f" ({shown})" if shown else ""), [], changes)
    record.supervisor_pid = spawn_supervisor(record.id)
    record.save()
    return verify_started(record, start_timeout)
