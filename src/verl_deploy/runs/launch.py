"""`launch` after the confirmation: run record, container, SwanLab, scripts, start, supervisor, verify."""

from __future__ import annotations

import time
from typing import Callable

from verl_deploy.runs.control import LaunchError, spawn_supervisor, spec_data, start_attempt
from verl_deploy.runs.record import TERMINAL, RunRecord, new_run_id, reload
from verl_deploy.spec import RunSpec


def launch(spec: RunSpec, *, backend: str, notify_urls: list[str], stall_seconds: float, start_timeout: float,
           say: Callable[[str], None], backend_options: dict | None = None, force: bool = False,
           calibrated: dict | None = None) -> RunRecord:
    """`calibrated`: the estimate's features that the calibration log asked for (name -> what it saw)."""
    import os

    from verl_deploy.runs.ckptlock import launch_lock, live_users

    record = RunRecord(id=new_run_id(), backend=backend, spec=spec_data(spec), notify=list(notify_urls),
                       stall_seconds=stall_seconds, backend_options=dict(backend_options or {}),
                       launcher_pid=os.getpid(), calibrated_features=dict(calibrated or {}))
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
    if backend == "docker":
        from verl_deploy.backends.docker import DockerError, ensure_container

        try:
            ensure_container(spec, say=say, warn=lambda text: say(f"warning: {text}"))
        except DockerError as exc:
            _fail(record, f"{exc} — fix: {exc.fix}", "container_failed")
    if backend in ("local", "docker") and spec.swanlab_on and spec.swanlab_api_key is not None and spec.swanlab_mode == "cloud":
        from verl_deploy.swanlab_setup import SwanLabSetupError, setup_swanlab

        try:
            for step in setup_swanlab(spec, spec.swanlab_api_key.get_secret_value()).steps:
                say(f"swanlab: {step}")
        except SwanLabSetupError as exc:
            _fail(record, f"{exc} — fix: {exc.fix}", "swanlab_login_failed")
    try:
        start_attempt(record, spec, "launch", [], {})
    except Exception as exc:  # a backend or script problem: recorded, then one line for the user
        _fail(record, str(exc), "start_failed")
    record.supervisor_pid = spawn_supervisor(record.id)
    record.save()
    return verify_started(record, start_timeout)


def _fail(record: RunRecord, message: str, kind: str) -> None:
    """The launch stopped before the training started: a class saying where, the cause and its fix."""
    cause, _, fix = message.partition(" — fix: ")
    record.state = "failed"
    record.failure = {"class": kind, "phase": "launch", "cause": cause, "retryable": False,
                      "fix": fix or "see the cause; `verl-deploy launch --dry-run` lists what blocks a launch",
                      "decision": "nothing was started"}
    record.save()
    raise LaunchError(message)


def verify_started(record: RunRecord, timeout: float) -> RunRecord:
    """Seed 001 stage 8: the training process exists and its log advances, within `timeout`."""
    from pathlib import Path

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
