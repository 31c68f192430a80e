"""Starting attempts, supervising them, recovering: the part of a run that outlives the command.

`launch` starts attempt 1 and a detached supervisor (`verl-deploy _supervise ID`). The
supervisor follows the attempt's log with the watcher, keeps run.json current, and when the
attempt fails applies the recovery policy: a new attempt with a changed spec that resumes from
the last checkpoint, or a terminal state and a notice. Killing the supervisor never stops the
training; `status`/`logs` start a new one, which resumes reading where the last one stopped.

Each attempt also writes `attempt-N/handle.json` (backend, process group or job id) beside the
record, so `stop` can end the training even when run.json is damaged. A retry resumes only from a
complete checkpoint (runs/checkpoints.py); a run succeeds only when the trainer reached its end
(the last step, verl's final line, or the last step checkpointed), never on exit status 0 alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from verl_deploy.runs import notify
from verl_deploy.runs.checkpoints import resume_point, tracked_step
from verl_deploy.runs.handles import latest_handle, write_handle
from verl_deploy.runs.outcome import exit_from_log, incomplete, unknown_failure, no_progress, script_failure, trainer_finished, unexplained
from verl_deploy.runs.record import TERMINAL, Attempt, DiskFull, RecordError, RunRecord, read_json, runs_dir
from verl_deploy.runs.recovery import RESUBMIT_REASON, decide
from verl_deploy.spec import RunSpec

if TYPE_CHECKING:
    from verl_deploy.watch.diagnosis import Diagnosis

SAVE_EVERY = 1.0  # seconds between run.json writes while nothing important happens
GRACE_AFTER_FATAL = 120.0  # a failed run whose driver hangs (Ray waiting on a dead worker) is stopped after this
ACT_NOW = ("device_oom", "rollout_kv_cache_insufficient")  # recovered at once, not after the driver gives up
# ... after this long: a training that exits by itself on the error leaves its own exit status (the record says
# what the trainer said, not "ended by the supervisor"); one that hangs is stopped without waiting for Ray
ACT_NOW_GRACE = 5.0


class LaunchError(Exception):
    """One line for the user."""


def backend_for(record: RunRecord):
    spec = spec_of(record)
    return make_backend(record.backend, record.backend_options, spec.container, spec.run_dir, spec)


def make_backend(kind: str, options: dict, container: str | None, run_dir: str, spec: RunSpec | None = None):
    """A backend from what the record (or, when it is damaged, the attempt's handle.json) keeps.

    A scheduler backend built without a spec (a damaged record) can still stop its job: stop reads the handle."""
    if kind in ("slurm", "kuberay"):
        from verl_deploy.sched.options import SchedulerOptions

        scheduler_options = SchedulerOptions(**options.get("scheduler", {}))
        if kind == "slurm":
            from verl_deploy.backends.slurm import SlurmBackend

            return SlurmBackend(spec, scheduler_options)
        from verl_deploy.backends.kuberay import KubeRayBackend

        return KubeRayBackend(spec, scheduler_options)
    if kind == "ray":
        from verl_deploy.backends.rayjobs import RayJobsBackend

        return RayJobsBackend(options["address"], options.get("env"))
    if kind == "docker":
        from verl_deploy.backends.container import DockerBackend

        return DockerBackend(container or "", run_dir.rstrip("/") + "/verl-deploy-runs", reuse_ray=bool(options.get("reuse_ray")))
    from verl_deploy.backends.local import LocalBackend

    return LocalBackend(reuse_ray=bool(options.get("reuse_ray")))


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


def write_scripts(spec: RunSpec, directory: Path, backend=None) -> None:
    """The attempt's scripts, and the files its backend adds (submit.sbatch, rayjob.yaml) from the same plan."""
    from verl_deploy.findings import Finding
    from verl_deploy.pipeline import prepare_spec
    from verl_deploy.render import plan_document, write_outputs

    prepared = prepare_spec(spec)
    if prepared.plan is None or not prepared.ok:
        raise LaunchError("; ".join(f.line() for f in prepared.findings if f.level == "error"))
    document = plan_document(prepared.plan, prepared.findings, prepared.checked_against, prepared.memory)
    extra = backend.extra_files(prepared.plan, directory) if backend else {}
    written = write_outputs(prepared.plan, directory, document, force=True, extra=extra)
    if isinstance(written, Finding):
        raise LaunchError(written.line())


def last_checkpoint(spec: RunSpec) -> int | None:
    """The step latest_checkpointed_iteration.txt names in the checkpoint directory."""
    return tracked_step(spec.effective_ckpts_dir)


def with_resume_point(spec: RunSpec, previous: Attempt | None) -> tuple[RunSpec, dict]:
    """The spec resuming from the newest complete checkpoint (verl's `auto` when that is the tracked one).

    The resume overrides a previous attempt got from here are dropped first: each attempt looks again.
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


def features_of(spec: RunSpec, calibrated: dict) -> tuple[list[str], dict]:
    """Every feature on for this spec, and where each came from (the calibration log named as such)."""
    from verl_deploy import features as registry

    states, _ = registry.resolve(framework=spec.framework, device=spec.device, mask=spec.mask,
                                 user_features=spec.features, no_default_features=spec.no_default_features,
                                 oom_features=spec.oom_features, estimate_features=spec.estimate_features)
    on = [s for s in states if s.on]
    origins = {s.name: ("calibration" if s.why == "estimate" and s.name in calibrated else str(s.why)) for s in on}
    return [s.name for s in on], origins


def start_attempt(record: RunRecord, spec: RunSpec, reason: str, added: list[str], changes: dict) -> Attempt:
    n = len(record.attempts) + 1
    attempt_dir = record.directory / f"attempt-{n}"
    spec, resume = with_resume_point(spec, record.current)
    backend = backend_for(record)
    write_scripts(spec, attempt_dir / "scripts", backend)
    attempt = Attempt(n=n, features=added, reason=reason + _resume_note(resume, record.step, n > 1),
                      resumed_from_step=resume["from_step"],
                      changes=changes, resume=resume)
    attempt.features_on, attempt.feature_origins = features_of(spec, record.calibrated_features)
    attempt.handle = backend.start(attempt_dir / "scripts", attempt_dir)
    attempt.log = attempt.handle["log"]
    write_handle(record, spec, attempt)
    if len(spec.nodes) > 1 and record.backend in ("local", "docker"):
        from verl_deploy.backends.nodes import start_workers

        try:
            attempt.handle["workers"] = start_workers(spec, str(attempt_dir / "scripts"))
        except Exception:
            backend_for(record).stop(attempt.handle)
            raise
        write_handle(record, spec, attempt)
    record.attempts.append(attempt)
    record.spec = spec_data(spec)
    record.state = "running"
    record.scan = {key: record.scan[key] for key in ("skipped", "first_skipped") if key in record.scan}  # a new log
    record.save()
    return attempt


def spawn_supervisor(run_id: str) -> int:
    from verl_deploy.runs.record import runs_dir

    log = open(runs_dir() / run_id / "supervisor.log", "a")
    process = subprocess.Popen([sys.executable, "-m", "verl_deploy", "_supervise", run_id], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    return process.pid


def supervisor_alive(record: RunRecord) -> bool:
    """The run's supervisor runs: its pid is alive and is `verl_deploy _supervise RUN` (not a later process)."""
    from verl_deploy.backends.base import process_alive, process_identity

    if not isinstance(record.supervisor_pid, int) or not process_alive(record.supervisor_pid):
        return False
    identity = process_identity(record.supervisor_pid)
    return identity is not None and identity["cmdline"][-2:] == ["_supervise", record.id]


def ensure_supervised(record: RunRecord) -> RunRecord:
    """Reattach: a run still going without a supervisor gets a new one (it resumes from run.json).

    A supervisor found gone while the record says `running` (killed, or it could not write its own
    death) is recorded as died and noticed first. One that died three times at the same place is
    not started again: the record says so and names supervisor.log.
    """
    from verl_deploy.backends.base import process_alive

    launching = record.state == "starting" and process_alive(record.launcher_pid)  # launch spawns it itself
    if record.state not in TERMINAL and not supervisor_alive(record) and not launching:
        from verl_deploy.runs.record import reload

        record = reload(record)  # it may have just ended the run and exited
        if record.state in TERMINAL or supervisor_alive(record):
            return record
        if record.state == "running" and record.supervisor_pid is not None:
            _record_death(record, f"the supervisor (pid {record.supervisor_pid}) is gone without a word "
                                  f"(killed?){_last_error(record)}", None)
        if not respawn_allowed(record):
            return record
        try:
            record.supervisor_pid = spawn_supervisor(record.id)
            record.save()
        except OSError:  # a full state disk: the new supervisor records disk_full when it can; show what we have
            pass
    return record


MAX_DEATHS_KEPT = 20
SAME_DEATHS = 3  # a supervisor that died this many times at the same place is not started again


def respawn_allowed(record: RunRecord) -> bool:
    last = record.supervisor_deaths[-SAME_DEATHS:]
    if len(last) < SAME_DEATHS or last[0].get("offset") is None:
        return True
    return len({(d.get("attempt"), d.get("offset"), d.get("error")) for d in last}) > 1


def _last_error(record: RunRecord) -> str:
    """`: ValueError: ...`, the last line of supervisor.log when it ends in a traceback."""
    from verl_deploy import boundedread

    try:
        tail = boundedread.read_tail(str(record.directory / "supervisor.log"), 4096)
    except (OSError, boundedread.UnreadableFile):
        return ""
    lines = [line for line in tail.decode("utf-8", errors="replace").splitlines() if line.strip()]
    last = lines[-1].strip()[:200] if lines else ""
    return f"; supervisor.log ends with: {last}" if last and ("Error" in last or "Exception" in last) else ""


def _record_death(record: RunRecord, error: str, offset: int | None) -> None:
    """The run's state says the supervisor died and why; a notice goes out (the training goes on unwatched)."""
    attempt = record.current.n if record.current else None
    record.supervisor_deaths = [*record.supervisor_deaths, {"time": time.time(), "error": error, "attempt": attempt,
                                                            "offset": offset}][-MAX_DEATHS_KEPT:]
    if record.state in TERMINAL:  # it died after the end was recorded: the end stands
        _save(record)
        return
    record.state = "supervisor_died"
    where = f" at byte {offset} of attempt {attempt}'s log" if offset is not None else ""
    again = "" if respawn_allowed(record) else (f" It died {SAME_DEATHS} times at the same place: it is not started "
                                                "again until you look.")
    failure = {"class": "supervisor_died", "cause": f"the supervisor stopped{where}: {error}; the training goes on, "
                                                    f"unwatched (no OOM retry, no stall notice).{again}",
               "fix": f"`verl-deploy status {record.id}` starts a new supervisor, which resumes past that place; "
                      f"the traceback is in {record.directory / 'supervisor.log'}"}
    try:
        notify.notice(record, f"supervisor died: {error[:120]}", failure=failure)
    except Exception as exc:  # noqa: BLE001 - the record must still say it
        print(f"verl-deploy supervisor: the notice could not be sent: {exc}", file=sys.stderr)
    try:
        _save(record)
    except OSError as exc:
        print(f"verl-deploy supervisor: run.json could not be written: {exc}", file=sys.stderr)


# -- the supervisor ------------------------------------------------------------------------------

def _save(record: RunRecord) -> bool:
    """The supervisor's save: on a full disk the last good record stays and supervising goes on."""
    try:
        record.save()
        return True
    except DiskFull as exc:
        print(f"verl-deploy supervisor: {exc.strerror}; keeping the last good run.json", file=sys.stderr)
        return False


def _restore(record: RunRecord):
    from verl_deploy.watch.scan import LineSkipped, LogScanner

    scanner = LogScanner(eager=True)
    saved = record.scan
    scanner.skipped = int(saved.get("skipped") or 0)  # counted over the whole run, every attempt
    first = saved.get("first_skipped")
    if isinstance(first, dict):
        scanner.first_skipped = LineSkipped(first.get("line"), str(first.get("why")))
    if "lines" in saved:  # this attempt was being read: go on where the last supervisor stopped
        scanner.lines = saved.get("lines", 0)
        state = scanner.state
        state.step, state.total_steps = record.step, record.total_steps
        state.metrics = dict(record.metrics)
        state.validation = dict(record.validation)
        state.swanlab_url, state.last_checkpoint_step = record.swanlab_url, record.last_checkpoint_step
        state.step_times.extend(saved.get("step_times", []))
    return scanner


def _publish(record: RunRecord, scanner, offset: int) -> None:
    state = scanner.state
    record.step, record.total_steps = state.step, state.total_steps
    record.metrics = {k: v for k, v in state.metrics.items() if v == v and abs(v) != float("inf")}
    record.swanlab_url = state.swanlab_url or record.swanlab_url
    record.last_checkpoint_step = state.last_checkpoint_step
    record.validation = dict(state.validation) or record.validation
    record.eta_seconds = state.eta_seconds
    first = scanner.first_skipped
    record.scan = {"offset": offset, "lines": scanner.lines, "step_times": list(state.step_times),
                   "skipped": scanner.skipped,
                   "first_skipped": None if first is None else {"line": first.line, "why": first.why}}


class SupervisorDied(Exception):
    """Anything that escaped the supervisor, with where in the log it was (None: not while reading it)."""

    def __init__(self, cause: BaseException, offset: int | None):
        super().__init__(str(cause))
        self.cause, self.offset = cause, offset


def _death_line(record: RunRecord) -> int | None:
    """The log offset the last supervisor of this attempt died reading, if it died reading the log."""
    last = record.supervisor_deaths[-1] if record.supervisor_deaths else None
    if not last or last.get("offset") is None or record.current is None or last.get("attempt") != record.current.n:
        return None
    return int(last["offset"])


def _feed(scanner, block: bytes, base: int, skip_at: int | None) -> None:
    """Feed one block read at offset `base`; the line at `skip_at` (where a supervisor died) is skipped, counted."""
    if skip_at is None or not base <= skip_at < base + len(block):
        scanner.feed(block)
        return
    cut = skip_at - base
    end = block.find(b"\n", cut)
    end = len(block) if end < 0 else end + 1
    scanner.feed(block[:cut])
    scanner.skip(scanner.lines + 1, RuntimeError("the previous supervisor died reading this line"))
    scanner.lines += 1
    scanner.feed(block[end:])


def _follow_attempt(record: RunRecord, backend) -> tuple[int | None, Diagnosis, bool]:
    """Follow the current attempt until it ends (or must be ended); returns (exit code, diagnosis, stopped_by_us)."""
    from verl_deploy.watch.diagnosis import diagnose
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.scan import FailureSeen

    attempt = record.current
    assert attempt is not None  # supervise() adopts or returns before following
    scanner = _restore(record)
    fatal: list[tuple[float, FailureSeen]] = []
    scanner.on_event = lambda e: fatal.append((time.monotonic(), e)) if isinstance(e, FailureSeen) and e.severity == "fatal" else None
    follower = LogFollower(attempt.log, offset=record.scan.get("offset", 0))
    skip_at = _death_line(record)  # resume past the line the last supervisor died reading, if it did
    last_save, stall_noticed, stopped = 0.0, False, False

    def feed(block: bytes, base: int) -> None:
        try:
            _feed(scanner, block, base, skip_at)
        except Exception as exc:  # where in the log it died: the next supervisor skips that line
            raise SupervisorDied(exc, base + scanner.position) from exc

    while True:
        base = follower.offset
        block = follower.read_block()
        if block:
            feed(block, base)
        code = backend.finished(attempt.handle)
        if fatal and code is None:
            first_class = fatal[0][1].class_id
            waited = time.monotonic() - fatal[0][0]
            if (first_class in ACT_NOW and waited > ACT_NOW_GRACE) or waited > GRACE_AFTER_FATAL:
                backend.stop(attempt.handle)  # recovery starts now instead of waiting for Ray to give up
                stopped = True
                code = backend.finished(attempt.handle)
        if code is None and not stopped and not backend.alive(attempt.handle):
            time.sleep(0.2)  # the wrapper writes the exit code just after the process ends
            code = backend.finished(attempt.handle)
            if code is None:
                code, stopped = -1, True
        if code is not None or stopped:
            base = follower.offset
            rest = follower.read_block()
            while rest:
                feed(rest, base)
                base = follower.offset
                rest = follower.read_block()
            feed(follower.take_partial(), base)
            _publish(record, scanner, follower.offset)
            return code, diagnose(scanner), stopped
        if (attempt.handle.get("scheduler") or {}).get("queued"):
            scanner.last_step_at = scanner.clock()  # waiting in a scheduler's queue is not a stall
        stalled = scanner.check_stall(min_seconds=record.stall_seconds)
        if stalled and not stall_noticed:
            stall_noticed = True
            _publish(record, scanner, follower.offset)
            folder = take_evidence(record, f"stalled: no step after step {stalled.step}")
            entry = notify.notice(record, f"stalled: no new step for {stalled.seconds / 60:.0f} min",
                                  failure={"class": "stall", "cause": f"no step after step {stalled.step}; "
                                                                      f"evidence in {folder}",
                                           "fix": f"read the stack dumps in {folder}/stacks (where each process "
                                                  "waits), then `verl-deploy logs --errors`, `npu-smi info`, `ray status`"})
            entry["evidence"] = str(folder)
            _save(record)
        if time.monotonic() - last_save > SAVE_EVERY:
            _publish(record, scanner, follower.offset)
            _publish_scheduler(attempt, backend)
            _save(record)
            last_save = time.monotonic()
        if not block:
            time.sleep(0.05)


def take_evidence(record: RunRecord, reason: str) -> str:
    """Stack dumps, devices and log tails into runs/<id>/evidence/<time>/ (bounded, never stops the run)."""
    from verl_deploy.runs.evidence import collect

    try:
        return str(collect(record, reason))
    except Exception as exc:  # the supervisor must go on watching whatever went wrong here
        return f"(not collected: {exc})"


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


def _backend_failure(backend, attempt: Attempt) -> dict | None:
    """What the backend knows of an end the log does not explain (e.g. the container was restarted)."""
    explain = getattr(backend, "explain_end", None)
    return explain(attempt.handle) if explain else None


def stop_attempt(record: RunRecord, attempt: Attempt) -> None:
    """The attempt's process (or job) and, for multi-node runs, the workers this tool started."""
    backend_for(record).stop(attempt.handle)
    end_workers(attempt)


def end_workers(attempt: Attempt) -> None:
    if attempt.handle.get("workers"):
        from verl_deploy.backends.nodes import stop_workers

        stop_workers(attempt.handle["workers"])


def _adopt_started_attempt(record: RunRecord) -> bool:
    """`launch` was killed after starting the training but before recording it: take it from handle.json."""
    data = latest_handle(record.id)
    if data is None:
        record.state = "failed"
        record.failure = {"class": "interrupted", "cause": "launch was interrupted before the training started",
                          "fix": "launch again", "decision": "nothing was started"}
        _save(record)
        return False
    handle = data["handle"]
    record.attempts.append(Attempt(n=int(data.get("attempt") or 1), features=[], handle=handle,
                                   log=str(handle.get("log", "")),
                                   reason="launch (taken over from handle.json: launch was interrupted)"))
    record.state = "running"
    return True


class _Terminated(BaseException):
    """SIGTERM or SIGHUP reached the supervisor: recorded as its death, like any exception."""


def _on_signal(number: int, frame) -> None:
    import signal

    raise _Terminated(f"killed by {signal.Signals(number).name}")


def supervise(run_id: str) -> None:
    """Supervise the run until it ends; whatever stops this process is recorded on the run and noticed."""
    import signal
    import traceback

    try:
        record = RunRecord.load(run_id)
    except RecordError as exc:
        print(f"verl-deploy supervisor: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _on_signal)
    try:
        _supervise(record)
    except (Exception, _Terminated) as exc:  # noqa: BLE001 - noticed, never silent
        from verl_deploy.watch.scan import one_line

        traceback.print_exc()  # to supervisor.log
        cause = exc.cause if isinstance(exc, SupervisorDied) else exc
        offset = exc.offset if isinstance(exc, SupervisorDied) else None
        error = str(cause) if isinstance(cause, _Terminated) else one_line(cause)
        _record_death(record, error, offset)
        raise SystemExit(1) from None


def _supervise(record: RunRecord) -> None:
    record.supervisor_pid = os.getpid()
    if record.current is None and not _adopt_started_attempt(record):
        return
    if record.state == "supervisor_died":
        record.state = "running"  # watched again
    _save(record)
    backend = backend_for(record)
    while record.state not in TERMINAL:
        code, diagnosis, stopped_by_us = _follow_attempt(record, backend)
        attempt = record.current
        assert attempt is not None
        end_workers(attempt)
        scheduler = _publish_scheduler(attempt, backend)
        attempt.exit_code, attempt.ended = code, time.time()
        if stopped_by_us and (code is None or code < 0 or code > 128):
            logged = exit_from_log(attempt.log)  # the training had exited itself before we stopped what was left
            if logged is not None:
                attempt.exit_code, attempt.exit_seen = logged, "start_verl.sh's last line in the log"
        if record.stop_requested:  # `verl-deploy stop` while we watched (save() records the state)
            _save(record)
            return
        if code == 0 and not stopped_by_us:
            spec = spec_of(record)
            resumed = attempt.resumed_from_step
            if resumed is not None and record.step <= resumed and not trainer_finished(record, spec):
                attempt.failure = no_progress(resumed)
            elif trainer_finished(record, spec):
                record.state = "succeeded"
                _save(record)
                _calibrate_clean(spec, record)
                return
            else:
                attempt.failure = incomplete(record, spec)
            record.state = "failed"
            record.failure = {**attempt.failure, "decision": attempt.failure["cause"]}
            _add_next(record)
            notify.notice(record, f"failed: {attempt.failure['class']}", failure=record.failure)
            _save(record)
            return
        said = scheduler or {}  # what the scheduler ended itself is its word, not what the log shows after it
        early = None  # the scripts failed before the training started: theirs, unless the container or disk went
        if said.get("resubmit"):
            attempt.failure = said.get("failure")
        elif not said.get("failure") and (early := script_failure(record, code, diagnosis)):
            attempt.failure = _backend_failure(backend, attempt) or unexplained(record, None) or early
        else:
            attempt.failure = (_failure_dict(diagnosis) or said.get("failure") or _backend_failure(backend, attempt)
                               or unexplained(record, code) or unknown_failure(record, attempt.exit_code))
        spec = spec_of(record)
        from verl_deploy.runs.resume import RESUME_REASON

        # the retry budget counts from the launch, or from the last `verl-deploy resume`
        since = max((i for i, a in enumerate(record.attempts) if a.reason.startswith(RESUME_REASON)), default=0)
        counted = record.attempts[since:]
        resubmits = sum(1 for a in counted if a.reason.startswith(RESUBMIT_REASON))
        retries = len(counted) - 1 - resubmits
        decision = decide(diagnosis, spec, retries, attempt.features, scheduler=scheduler, resubmits_done=resubmits)
        if not early:  # no training ran: nothing for the memory calibration
            _calibrate(spec, diagnosis, decision)
        if attempt.failure and (diagnosis.class_id is None or early) and not said.get("failure"):
            from verl_deploy.runs.recovery import Decision

            decision = Decision(False, attempt.failure["cause"])
        if decision.retry:
            new_spec = spec.with_changes(source="recovery", **decision.changes)
            reason = decision.reason  # start_attempt adds where it resumes from (a complete checkpoint only)
            _recovery_notice(record, attempt, decision)
            _save(record)
            try:
                start_attempt(record, new_spec, reason, decision.added, decision.changes)
            except Exception as exc:  # the retry itself could not start: say so instead of dying silently
                record.state = "failed"
                record.failure = {**(attempt.failure or {}), "decision": f"{decision.reason}; the retry could not "
                                                                        f"start: {exc}"}
                _add_next(record)
                notify.notice(record, "failed: the retry could not start", failure=record.failure)
                _save(record)
                return
            continue
        record.state = "failed"
        record.failure = {**(attempt.failure or unknown_failure(record, attempt.exit_code)), "decision": decision.reason}
        _add_next(record)
        notify.notice(record, f"failed: {attempt.failure['class'] if attempt.failure else 'exit ' + str(code)}",
                      failure=record.failure)
        _save(record)


def _calibrate_clean(spec: RunSpec, record: RunRecord) -> None:
    """Tell the memory estimate's calibration log that this configuration ran cleanly, with the device peak verl
    printed (perf/max_memory_reserved_gb, else perf/max_memory_allocated_gb)."""
    peak = None
    for key in ("perf/max_memory_reserved_gb", "perf/max_memory_allocated_gb"):
        value = record.metrics.get(key)
        if isinstance(value, (int, float)) and value == value and 0 <= value < 10_000:
            peak = float(value)
            break
    try:
        from verl_deploy.memory import record_clean_run

        record_clean_run(spec, peak)
    except Exception:  # the log is advice for next time: never let it change how the run ended
        pass


def _add_next(record: RunRecord) -> None:
    """The failure says what comes next (a command to copy); the supervisor's log prints the whole end."""
    from verl_deploy.runs.next_step import end_lines, end_of_run

    end = end_of_run(record)
    if end and record.failure is not None:
        record.failure["next"] = {"what": end["next"], "command": end["command"]}
        for line in end_lines(record):
            print(f"verl-deploy supervisor: {line}", flush=True)


def _recovery_notice(record: RunRecord, attempt: Attempt, decision) -> None:
    """An automatic recovery, kept in the record as a notice (status --json shows it, --notify URL or not).

    Only failures and stalls are sent to the --notify URLs; a recovery is recorded, not sent."""
    what = (attempt.failure or {}).get("class") or "failure"
    step = f" at step {record.step}" if record.step else ""
    record.notices.append({"time": time.time(), "kind": "recovery", "attempt": attempt.n,
                           "title": f"recovered from {what}{step}: {decision.reason}; attempt {attempt.n + 1} "
                                    "resumes from the last complete checkpoint",
                           "body": "", "deliveries": [], "delivery_problems": []})


def _calibrate(spec: RunSpec, diagnosis, decision) -> None:
    """Tell the memory estimate's calibration log about this OOM and what the ladder changed."""
    if diagnosis.class_id not in ACT_NOW:
        return
    added = ""  # the ladder gave up: nothing fixed it
    if decision.retry:
        added = decision.added[0] if decision.added else ", ".join(f"{k}={v}" for k, v in decision.changes.items())
    try:
        from verl_deploy.memory import record_oom

        record_oom(spec, diagnosis.phase, added)
    except Exception:  # the log is advice for next time: never let it stop a recovery
        pass


def stop_run(record: RunRecord) -> str | None:
    """End the run's training and mark it stopped. The backend is asked first whether it can (a cluster that
    refuses us raises rayauth.AuthError): then nothing is touched, and the run goes on, supervised. Returns why
    nothing was signalled, when its recorded pid now belongs to a process this tool did not start (the training
    had ended; the run is marked ended too)."""
    from verl_deploy.backends.base import stranger

    if record.current:
        backend_for(record).check_stop(record.current.handle)
    (record.directory / "stop").touch()
    record.state = "stopped"
    _save(record)
    why = None
    if record.current:
        why = stranger(record.current.handle)
        stop_attempt(record, record.current)  # signals nothing of a stranger (backends check the identity)
        record.current.ended = time.time()
    _save(record)
    return why


def stop_damaged(run_id: str, problem: str) -> str:
    """`stop` for a run whose run.json cannot be read: end its processes from handle.json, write a true record.

    The damaged file is kept as run.json.damaged; the new record says `stopped` and why it was rebuilt.
    """
    directory = runs_dir() / run_id
    (directory / "stop").touch()
    data = latest_handle(run_id)
    if data is not None:
        try:
            backend = make_backend(data["backend"], data.get("backend_options") or {}, data.get("container"),
                                   data.get("run_dir") or "/verl")
        except (KeyError, TypeError, AttributeError) as exc:
            return f"its handle.json is damaged too ({type(exc).__name__}: {exc}); end its processes by hand"
        backend.stop(data["handle"])
        if data["handle"].get("workers"):
            from verl_deploy.backends.nodes import stop_workers

            stop_workers(data["handle"]["workers"])
    try:
        os.replace(directory / "run.json", directory / "run.json.damaged")
    except OSError:
        pass
    attempts, spec = [], {}
    if data is not None:
        attempts = [Attempt(n=int(data.get("attempt") or 1), features=[], reason="(rebuilt from handle.json)",
                            handle=data["handle"], log=str(data["handle"].get("log", "")), ended=time.time())]
        try:
            spec = read_json(directory / f"attempt-{attempts[0].n}" / "scripts" / "plan.json", "plan").get("spec", {})
        except (RecordError, AttributeError):
            pass
    rebuilt = RunRecord(id=run_id, backend=data["backend"] if data else "unknown",
                        spec=spec if isinstance(spec, dict) else {}, state="stopped", attempts=attempts,
                        failure={"class": "damaged_record", "cause": f"run.json was damaged ({problem}); rebuilt when stopped",
                                 "fix": "the damaged file is kept as run.json.damaged", "decision": None})
    try:
        rebuilt.save()
    except OSError:
        pass
    if data is None:
        return "no attempt handle found: nothing had been started; recorded as stopped"
    return f"stopped attempt {attempts[0].n} from its handle file"
