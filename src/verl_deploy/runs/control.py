"""Starting attempts, supervising them, recovering: the part of a run that outlives the command.

`launch` starts attempt 1 and a detached supervisor (`verl-deploy _supervise ID`). The
supervisor follows the attempt's log with the watcher, keeps run.json current, and when the
attempt fails applies the recovery policy: a new attempt with a changed spec that resumes from
the last checkpoint, or a terminal state and a notice. Killing the supervisor never stops the
training; `status`/`logs` start a new one, which resumes reading where the last one stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from verl_deploy.runs import notify
from verl_deploy.runs.record import TERMINAL, Attempt, RunRecord
from verl_deploy.runs.recovery import RESUBMIT_REASON, decide
from verl_deploy.spec import RunSpec

SAVE_EVERY = 1.0  # seconds between run.json writes while nothing important happens
GRACE_AFTER_FATAL = 120.0  # a failed run whose driver hangs (Ray waiting on a dead worker) is stopped after this
ACT_NOW = ("device_oom", "rollout_kv_cache_insufficient")  # recovered at once, not after the driver gives up


class LaunchError(Exception):
    """One line for the user."""


def backend_for(record: RunRecord):
    spec = spec_of(record)
    if record.backend in ("slurm", "kuberay"):
        from verl_deploy.sched.options import SchedulerOptions

        options = SchedulerOptions(**record.backend_options.get("scheduler", {}))
        if record.backend == "slurm":
            from verl_deploy.backends.slurm import SlurmBackend

            return SlurmBackend(spec, options)
        from verl_deploy.backends.kuberay import KubeRayBackend

        return KubeRayBackend(spec, options)
    if record.backend == "ray":
        from verl_deploy.backends.rayjobs import RayJobsBackend

        return RayJobsBackend(record.backend_options["address"], record.backend_options.get("env"))
    if record.backend == "docker":
        from verl_deploy.backends.container import DockerBackend

        return DockerBackend(spec.container, spec.run_dir.rstrip("/") + "/verl-deploy-runs")
    from verl_deploy.backends.local import LocalBackend

    return LocalBackend()


def spec_data(spec: RunSpec) -> dict:
    data = spec.model_dump(mode="json", exclude={"swanlab_api_key"})
    data["sources"] = dict(spec.sources)
    return data


def spec_of(record: RunRecord) -> RunSpec:
    """The run's spec; the SwanLab key comes back from SWANLAB_API_KEY or the 0600 key file, never from disk here."""
    from verl_deploy.secrets import load_swanlab_key

    data = dict(record.spec)
    sources = data.pop("sources", {})
    key = os.environ.get("SWANLAB_API_KEY") or load_swanlab_key()
    if key:
        data["swanlab_api_key"] = key
    return RunSpec(**data, sources=sources)


def write_scripts(spec: RunSpec, directory: Path, backend=None) -> None:
    """The attempt's scripts, and the files its backend adds (submit.sbatch, rayjob.yaml) from the same plan."""
    from verl_deploy.findings import Finding
    from verl_deploy.pipeline import prepare_spec
    from verl_deploy.render import _write_atomic, plan_document, write_outputs

    prepared = prepare_spec(spec)
    if prepared.plan is None or not prepared.ok:
        raise LaunchError("; ".join(f.line() for f in prepared.findings if f.level == "error"))
    document = plan_document(prepared.plan, prepared.findings, prepared.checked_against)
    written = write_outputs(prepared.plan, directory, document, force=True)
    if isinstance(written, Finding):
        raise LaunchError(written.line())
    for name, content in (backend.extra_files(prepared.plan, directory) if backend else {}).items():
        _write_atomic(directory / name, content, 0o644)


def last_checkpoint(spec: RunSpec) -> int | None:
    """The step verl will resume from: latest_checkpointed_iteration.txt in the checkpoint directory."""
    try:
        return int((Path(spec.effective_ckpts_dir) / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return None


def start_attempt(record: RunRecord, spec: RunSpec, reason: str, added: list[str], changes: dict) -> Attempt:
    n = len(record.attempts) + 1
    attempt_dir = record.directory / f"attempt-{n}"
    backend = backend_for(record)
    write_scripts(spec, attempt_dir / "scripts", backend)
    attempt = Attempt(n=n, features=added, reason=reason, resumed_from_step=last_checkpoint(spec), changes=changes)
    attempt.handle = backend.start(attempt_dir / "scripts", attempt_dir)
    attempt.log = attempt.handle["log"]
    if len(spec.nodes) > 1 and record.backend in ("local", "docker"):
        from verl_deploy.backends.nodes import start_workers

        try:
            attempt.handle["workers"] = start_workers(spec, str(attempt_dir / "scripts"))
        except Exception:
            backend_for(record).stop(attempt.handle)
            raise
    record.attempts.append(attempt)
    record.spec = spec_data(spec)
    record.state = "running"
    record.scan = {}
    record.save()
    return attempt


def spawn_supervisor(run_id: str) -> int:
    from verl_deploy.runs.record import runs_dir

    log = open(runs_dir() / run_id / "supervisor.log", "a")
    process = subprocess.Popen([sys.executable, "-m", "verl_deploy", "_supervise", run_id], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    return process.pid


def supervisor_alive(record: RunRecord) -> bool:
    from verl_deploy.backends.base import process_alive

    return process_alive(record.supervisor_pid)


def ensure_supervised(record: RunRecord) -> RunRecord:
    """Reattach: a run still going without a supervisor gets a new one (it resumes from run.json)."""
    if record.state not in TERMINAL and not supervisor_alive(record):
        record.supervisor_pid = spawn_supervisor(record.id)
        record.save()
    return record


# -- the supervisor ------------------------------------------------------------------------------

def _restore(record: RunRecord):
    from verl_deploy.watch.scan import LogScanner

    scanner = LogScanner(eager=True)
    saved = record.scan
    if saved:
        scanner.lines = saved.get("lines", 0)
        state = scanner.state
        state.step, state.total_steps = record.step, record.total_steps
        state.metrics = dict(record.metrics)
        state.swanlab_url, state.last_checkpoint_step = record.swanlab_url, record.last_checkpoint_step
        state.step_times.extend(saved.get("step_times", []))
    return scanner


def _publish(record: RunRecord, scanner, offset: int) -> None:
    state = scanner.state
    record.step, record.total_steps = state.step, state.total_steps
    record.metrics = {k: v for k, v in state.metrics.items() if v == v and abs(v) != float("inf")}
    record.swanlab_url = state.swanlab_url or record.swanlab_url
    record.last_checkpoint_step = state.last_checkpoint_step
    record.eta_seconds = state.eta_seconds
    record.scan = {"offset": offset, "lines": scanner.lines, "step_times": list(state.step_times)}


def _follow_attempt(record: RunRecord, backend) -> tuple[int | None, object, bool]:
    """Follow the current attempt until it ends (or must be ended); returns (exit code, diagnosis, stopped_by_us)."""
    from verl_deploy.watch.diagnosis import diagnose
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.scan import FailureSeen

    attempt = record.current
    scanner = _restore(record)
    fatal: list[tuple[float, FailureSeen]] = []
    scanner.on_event = lambda e: fatal.append((time.monotonic(), e)) if isinstance(e, FailureSeen) and e.severity == "fatal" else None
    follower = LogFollower(attempt.log, offset=record.scan.get("offset", 0))
    last_save, stall_noticed, stopped = 0.0, False, False
    while True:
        block = follower.read_block()
        if block:
            scanner.feed(block)
        code = backend.finished(attempt.handle)
        if fatal and code is None:
            first_class = fatal[0][1].class_id
            if first_class in ACT_NOW or time.monotonic() - fatal[0][0] > GRACE_AFTER_FATAL:
                backend.stop(attempt.handle)  # recovery starts now instead of waiting for Ray to give up
                stopped = True
                code = backend.finished(attempt.handle)
        if code is None and not stopped and not backend.alive(attempt.handle):
            time.sleep(0.2)  # the wrapper writes the exit code just after the process ends
            code = backend.finished(attempt.handle)
            if code is None:
                code, stopped = -1, True
        if code is not None or stopped:
            rest = follower.read_block()
            while rest:
                scanner.feed(rest)
                rest = follower.read_block()
            scanner.feed(follower.take_partial())
            _publish(record, scanner, follower.offset)
            return code, diagnose(scanner), stopped
        if (attempt.handle.get("scheduler") or {}).get("queued"):
            scanner.last_step_at = scanner.clock()  # waiting in a scheduler's queue is not a stall
        stalled = scanner.check_stall(min_seconds=record.stall_seconds)
        if stalled and not stall_noticed:
            stall_noticed = True
            notify.notice(record, f"stalled: no new step for {stalled.seconds / 60:.0f} min",
                          failure={"class": "stall", "cause": f"no step after step {stalled.step}",
                                   "fix": "look at `verl-deploy logs --errors`, `npu-smi info`, `ray status`"})
            record.save()
        if time.monotonic() - last_save > SAVE_EVERY:
            _publish(record, scanner, follower.offset)
            _publish_scheduler(attempt, backend)
            record.save()
            last_save = time.monotonic()
        if not block:
            time.sleep(0.05)


def _publish_scheduler(attempt: Attempt, backend) -> dict | None:
    """The scheduler's word on the attempt (queued with a reason, running, ended by the scheduler), kept in the record."""
    state = backend.scheduler_state(attempt.handle)
    if state is not None:
        attempt.handle["scheduler"] = state
    return state


def _failure_dict(diagnosis) -> dict | None:
    if diagnosis.class_id is None:
        return None
    return {"class": diagnosis.class_id, "phase": diagnosis.phase, "cause": diagnosis.cause, "fix": diagnosis.fix,
            "retryable": diagnosis.retryable, "lines": [{"line": h.line, "text": h.text} for h in diagnosis.lines[:3]]}


def stop_attempt(record: RunRecord, attempt: Attempt) -> None:
    """The attempt's process (or job) and, for multi-node runs, the workers this tool started."""
    backend_for(record).stop(attempt.handle)
    end_workers(attempt)


def end_workers(attempt: Attempt) -> None:
    if attempt.handle.get("workers"):
        from verl_deploy.backends.nodes import stop_workers

        stop_workers(attempt.handle["workers"])


def supervise(run_id: str) -> None:
    record = RunRecord.load(run_id)
    record.supervisor_pid = os.getpid()
    record.save()
    backend = backend_for(record)
    while record.state not in TERMINAL:
        code, diagnosis, stopped_by_us = _follow_attempt(record, backend)
        attempt = record.current
        end_workers(attempt)
        scheduler = _publish_scheduler(attempt, backend)
        attempt.exit_code, attempt.ended = code, time.time()
        if record.stop_requested:  # `verl-deploy stop` while we watched (save() records the state)
            record.save()
            return
        if code == 0 and not stopped_by_us:
            record.state = "succeeded"
            record.save()
            return
        said = scheduler or {}  # what the scheduler ended itself is its word, not what the log shows after it
        attempt.failure = said.get("failure") if said.get("resubmit") else (_failure_dict(diagnosis) or said.get("failure"))
        spec = spec_of(record)
        resubmits = sum(1 for a in record.attempts if a.reason.startswith(RESUBMIT_REASON))
        retries = len(record.attempts) - 1 - resubmits
        decision = decide(diagnosis, spec, retries, attempt.features, scheduler=scheduler, resubmits_done=resubmits)
        if decision.retry:
            lost = (record.step - (record.last_checkpoint_step or 0)) if record.step else 0
            new_spec = spec.with_changes(source="recovery", **decision.changes)
            reason = decision.reason + (f"; resuming from step {record.last_checkpoint_step}, {lost} step(s) redone"
                                        if record.last_checkpoint_step else "; no checkpoint yet: from the start")
            record.save()
            try:
                start_attempt(record, new_spec, reason, decision.added, decision.changes)
            except Exception as exc:  # the retry itself could not start: say so instead of dying silently
                record.state = "failed"
                record.failure = {**(attempt.failure or {}), "decision": f"{decision.reason}; the retry could not "
                                                                        f"start: {exc}"}
                notify.notice(record, "failed: the retry could not start", failure=record.failure)
                record.save()
                return
            continue
        record.state = "failed"
        record.failure = {**(attempt.failure or {"class": None, "cause": None, "fix": None}), "decision": decision.reason}
        notify.notice(record, f"failed: {attempt.failure['class'] if attempt.failure else 'exit ' + str(code)}",
                      failure=record.failure)
        record.save()


def stop_run(record: RunRecord) -> None:
    (record.directory / "stop").touch()
    record.state = "stopped"
    record.save()
    if record.current:
        stop_attempt(record, record.current)
        record.current.ended = time.time()
    record.save()
