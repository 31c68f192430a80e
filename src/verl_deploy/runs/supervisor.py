"""The supervisor: the part of a run that outlives the command, and what keeps one running.

`launch` starts attempt 1 and a detached supervisor (`verl-deploy _supervise ID`). The supervisor
follows each attempt (runs/follow.py), keeps run.json current, and when the attempt ends acts on it
(runs/attempt_end.py): a new attempt with a changed spec that resumes from the last complete
checkpoint, or a terminal state and a notice. Killing the supervisor never stops the training;
`status`/`logs` start a new one (`ensure_supervised`), which resumes reading where the last one
stopped. Whatever kills a supervisor is recorded on the run and noticed; one that died three times at
the same place is not started again.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from types import FrameType

from verl_deploy.backends.handle import Handle
from verl_deploy.dirlock import locked_directory
from verl_deploy.backends.process import process_alive, process_identity
from verl_deploy.runs import notify
from verl_deploy.runs.attempt_end import attempt_ended
from verl_deploy.runs.attempts import backend_for
from verl_deploy.runs.follow import SupervisorDied, follow_attempt
from verl_deploy.runs.handles import latest_handle
from verl_deploy.runs.record import (TERMINAL, Attempt, RecordError, RunRecord, reload, runs_dir,
                                     save_keeping_last_good as _save)


def spawn_supervisor(run_id: str) -> int:
    log = open(runs_dir() / run_id / "supervisor.log", "a")
    process = subprocess.Popen([sys.executable, "-m", "verl_deploy", "_supervise", run_id], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    return process.pid


def supervisor_alive(record: RunRecord) -> bool:
    """The run's supervisor runs: its pid is alive and is `verl_deploy _supervise RUN` (not a later process)."""
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
    record = _let_it_exit(record)
    launching = record.state == "starting" and process_alive(record.launcher_pid)  # launch spawns it itself
    if record.state not in TERMINAL and not supervisor_alive(record) and not launching:
        with contextlib.ExitStack() as stack:  # two `status` at once: the second sees the first's supervisor
            try:
                stack.enter_context(locked_directory(runs_dir() / record.id))
            except OSError:  # a folder that cannot be opened is not locked (the record's own errors say why)
                pass
            return _respawn(reload(record))  # it may have just ended the run and exited
    return record


def _respawn(record: RunRecord) -> RunRecord:
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


EXIT_GRACE = 5.0  # seconds a supervisor that recorded its own death may take to leave (the interpreter's shutdown)


def still_exiting(record: RunRecord) -> bool:
    """The supervisor that recorded the run's last death is still there: it writes its death as its last act and
    then exits. (A new supervisor's pid differs from the one the death names.)"""
    last = record.supervisor_deaths[-1] if record.supervisor_deaths else {}
    return (record.state == "supervisor_died" and last.get("pid") is not None
            and last.get("pid") == record.supervisor_pid and supervisor_alive(record))


def _let_it_exit(record: RunRecord) -> RunRecord:
    """Until a dying supervisor has exited it looks alive, and a `status` in that moment would start no new one.
    Wait for it, a few seconds at most, re-reading the record (another `status` may have started one meanwhile)."""
    deadline = time.monotonic() + EXIT_GRACE
    while still_exiting(record) and time.monotonic() < deadline:
        time.sleep(0.05)
        record = reload(record)
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
                                                            "offset": offset, "pid": record.supervisor_pid}
                                ][-MAX_DEATHS_KEPT:]
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


def _adopt_started_attempt(record: RunRecord) -> bool:
    """`launch` was killed after starting the training but before recording it: take it from handle.json."""
    data = latest_handle(record.id)
    if data is None:
        record.state = "failed"
        record.failure = {"class": "interrupted", "cause": "launch was interrupted before the training started",
                          "fix": "launch again", "decision": "nothing was started"}
        _save(record)
        return False
    handle = Handle.from_dict(data["handle"])
    record.attempts.append(Attempt(n=int(data.get("attempt") or 1), features=[], handle=handle, log=handle.log,
                                   reason="launch (taken over from handle.json: launch was interrupted)"))
    record.state = "running"
    return True


class _Terminated(BaseException):
    """SIGTERM or SIGHUP reached the supervisor: recorded as its death, like any exception."""


def _on_signal(number: int, frame: FrameType | None) -> None:
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
        code, diagnosis, stopped_by_us = follow_attempt(record, backend)
        if not attempt_ended(record, backend, code, diagnosis, stopped_by_us):
            return
