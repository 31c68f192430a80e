"""Following one attempt until it ends: its log through the watcher into the record, its stall, its end.

The supervisor (runs/supervisor.py) calls `follow_attempt` once per attempt. The log is read from
where the last supervisor stopped (run.json's `scan`), past the line it died reading if it did; the
record is saved at most every SAVE_EVERY seconds and at once for what matters (a stall). The attempt
ends when its backend says it finished, or when it must be ended: a fatal failure whose driver hangs
is stopped after a grace, so recovery starts without waiting for Ray to give up. A failure line that
verl-deploy's own scripts printed before they handed over to the training starts no grace: the scripts
try again (ray start) or end by themselves, and a retry that worked must not be stopped two minutes later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from verl_deploy import boundedread
from verl_deploy.backends.protocol import Backend
from verl_deploy.runs import notify
from verl_deploy.runs.outcome import EXITED, FAILURE_LINES, HEAD_BYTES, scripts_say_handover
from verl_deploy.runs.record import Attempt, RunRecord, save_keeping_last_good as _save
from verl_deploy.watch import handover

if TYPE_CHECKING:
    from verl_deploy.watch.diagnosis import Diagnosis
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.scan import FailureSeen, LogScanner

SAVE_EVERY = 1.0  # seconds between run.json writes while nothing important happens
GRACE_AFTER_FATAL = 120.0  # a failed run whose driver hangs (Ray waiting on a dead worker) is stopped after this
ACT_NOW = ("device_oom", "rollout_kv_cache_insufficient")  # recovered at once, not after the driver gives up
# ... after this long: a training that exits by itself on the error leaves its own exit status (the record says
# what the trainer said, not "ended by the supervisor"); one that hangs is stopped without waiting for Ray
ACT_NOW_GRACE = 5.0
# once start_verl.sh printed the training's exit status, its EXIT trap stops the attempt's Ray (seconds on a busy
# host): it is given at least this long from that line (never less than the failure's own grace), so no Ray of a
# stopped attempt is left holding the devices
CLEANUP_GRACE = 30.0


def _restore(record: RunRecord) -> LogScanner:
    """A scanner that goes on where the last supervisor of this attempt stopped (its counts over the whole run)."""
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


def publish(record: RunRecord, scanner: LogScanner, offset: int) -> None:
    """What the scanner saw, into the record (saved by the caller)."""
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


@dataclass
class _Reading:
    """One attempt's log as the supervisor reads it: where, what the scanner saw, what must end it."""

    scanner: "LogScanner"
    follower: "LogFollower"
    skip_at: int | None  # where the last supervisor died reading, skipped once
    fatal: list[tuple[float, "FailureSeen"]] = field(default_factory=list)  # (when seen, the fatal failure)
    stopped: bool = False  # the supervisor ended the attempt itself
    stall_noticed: bool = False
    last_save: float = 0.0
    spec: Any = None  # the attempt's RunSpec, read once from the record when the predicted-OOM watch needs it
    scripts_first: bool = False  # the scripts have not handed over yet: their failure lines start no grace
    cleanup_since: float | None = None  # when start_verl.sh printed the training's exit status (its cleanup runs)

    def feed(self, block: bytes, base: int) -> None:
        """Feed whole lines (the follower's blocks end at a line's end); the hand-over line is in one block."""
        at = block.find(handover.HANDOVER.encode()) if self.scripts_first else -1
        if at >= 0:  # the lines up to the hand-over are the scripts', the rest the training's
            end = block.find(b"\n", at)
            cut = len(block) if end < 0 else end + 1
            self._feed(block[:cut], base)
            self.scripts_first = False
            block, base = block[cut:], base + cut
        self._feed(block, base)

    def _feed(self, block: bytes, base: int) -> None:
        if self.cleanup_since is None and EXITED.search(block):
            self.cleanup_since = time.monotonic()
        try:
            _feed(self.scanner, block, base, self.skip_at)
        except Exception as exc:  # where in the log it died: the next supervisor skips that line
            raise SupervisorDied(exc, base + self.scanner.position) from exc

    def read(self) -> bytes:
        base = self.follower.offset
        block = self.follower.read_block()
        if block:
            self.feed(block, base)
        return block

    def drain(self) -> None:
        """Everything left in the log, the last line without its newline too."""
        while self.read():
            pass
        base = self.follower.offset
        self.feed(self.follower.take_partial(), base)

    def fatal_waited_out(self) -> bool:
        """A fatal failure was seen and the training still runs after its grace (shorter for what recovery fixes)."""
        if not self.fatal:
            return False
        seen, failure = self.fatal[0]
        grace = ACT_NOW_GRACE if failure.class_id in ACT_NOW else GRACE_AFTER_FATAL
        deadline = seen + grace
        if self.cleanup_since is not None:  # the training exited: the scripts stop Ray, and may take longer
            deadline = max(deadline, self.cleanup_since + CLEANUP_GRACE)
        return time.monotonic() > deadline


def _reading(record: RunRecord, attempt: Attempt) -> _Reading:
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.scan import FailureSeen

    offset = record.scan.get("offset", 0)
    reading = _Reading(_restore(record), LogFollower(attempt.log, offset=offset),
                       _death_line(record))  # resume past the line the last supervisor died reading, if it did
    reading.scripts_first = _scripts_still_first(record, attempt, offset)

    def on_event(event: object) -> None:
        if isinstance(event, FailureSeen) and event.severity == "fatal" and not reading.scripts_first:
            reading.fatal.append((time.monotonic(), event))

    reading.scanner.on_event = on_event
    return reading


def _scripts_still_first(record: RunRecord, attempt: Attempt, offset: int) -> bool:
    """Whether the attempt's scripts print the hand-over line and the log read so far holds none.

    Scripts of a version without that line, or a log that cannot be read: False (every fatal line starts the grace)."""
    try:
        if not scripts_say_handover(record.directory / f"attempt-{attempt.n}" / "scripts"):
            return False
        if not offset:
            return True
        if offset > HEAD_BYTES:
            return False  # far past the scripts' output: treat it as handed over
        return not handover.handed_over(boundedread.read_bytes(attempt.log, offset, head=True))
    except (OSError, TypeError, boundedread.UnreadableFile):
        return False


def _exit_code(reading: _Reading, backend: Backend, attempt: Attempt) -> int | None:
    """The attempt's exit code once it ended (-1: it is gone without one), after ending it when it must be."""
    code = backend.finished(attempt.handle)
    if code is None and reading.fatal_waited_out():
        backend.stop(attempt.handle)  # recovery starts now instead of waiting for Ray to give up
        reading.stopped = True
        code = backend.finished(attempt.handle)
    if code is None and not reading.stopped and not backend.alive(attempt.handle):
        time.sleep(0.2)  # the wrapper writes the exit code just after the process ends
        code = backend.finished(attempt.handle)
        if code is None:
            code, reading.stopped = -1, True
    return code


def follow_attempt(record: RunRecord, backend: Backend) -> tuple[int | None, Diagnosis, bool]:
    """Follow the current attempt until it ends (or must be ended); returns (exit code, diagnosis, stopped_by_us)."""
    from verl_deploy.watch.diagnosis import diagnose

    attempt = record.current
    assert attempt is not None  # supervise() adopts or returns before following
    reading = _reading(record, attempt)
    while True:
        block = reading.read()
        code = _exit_code(reading, backend, attempt)
        if code is not None or reading.stopped:
            reading.drain()
            publish(record, reading.scanner, reading.follower.offset)
            return code, diagnose(reading.scanner), reading.stopped
        if attempt.handle.queued:
            reading.scanner.last_step_at = reading.scanner.clock()  # waiting in a scheduler's queue is not a stall
        _notice_stall(record, reading)
        if time.monotonic() - reading.last_save > SAVE_EVERY:
            publish(record, reading.scanner, reading.follower.offset)
            publish_scheduler(attempt, backend)
            _save(record)
            reading.last_save = time.monotonic()
            if _predicted_oom_due(record, reading):
                backend.stop(attempt.handle)  # at the complete checkpoint: the next attempt resumes with the feature
                reading.stopped = True
        if not block:
            time.sleep(0.05)


def _predicted_oom_due(record: RunRecord, reading: _Reading) -> bool:
    """The memory estimate's OOM response length against the newest lengths (runs/predicted_oom.py); a fault
    there is printed to supervisor.log and ends the watch, never the supervision."""
    from verl_deploy.runs import predicted_oom
    from verl_deploy.runs.attempts import spec_of

    attempt = record.current
    watch = attempt.predicted_oom if attempt is not None else {}
    if attempt is None or watch.get("active") is False or watch.get("state") in ("noticed", "stopping", "restarted"):
        return False
    try:
        reading.spec = reading.spec or spec_of(record)
        return predicted_oom.look(record, reading.spec)
    except Exception as exc:  # noqa: BLE001 - advice on top of the run
        import sys

        print(f"verl-deploy supervisor: the predicted-OOM watch stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
        attempt.predicted_oom = {"active": False, "why": f"the watch failed ({type(exc).__name__}: {exc})"}
        return False


def _notice_stall(record: RunRecord, reading: _Reading) -> None:
    """The first stall of the attempt: evidence taken, a notice sent, the record saved."""
    stalled = reading.scanner.check_stall(min_seconds=record.stall_seconds)
    if not stalled or reading.stall_noticed:
        return
    reading.stall_noticed = True
    publish(record, reading.scanner, reading.follower.offset)
    folder = take_evidence(record, f"stalled: no step after step {stalled.step}")
    entry = notify.notice(record, f"stalled: no new step for {stalled.seconds / 60:.0f} min",
                          failure={"class": "stall", "cause": f"no step after step {stalled.step}; "
                                                              f"evidence in {folder}",
                                   "fix": f"read the stack dumps in {folder}/stacks (where each process "
                                          "waits), then `verl-deploy logs --errors`, `npu-smi info`, `ray status`"})
    entry["evidence"] = str(folder)
    _save(record)


def take_evidence(record: RunRecord, reason: str) -> str:
    """Stack dumps, devices and log tails into runs/<id>/evidence/<time>/ (bounded, never stops the run)."""
    from verl_deploy.runs.evidence import collect

    try:
        return str(collect(record, reason))
    except Exception as exc:  # the supervisor must go on watching whatever went wrong here
        return f"(not collected: {exc})"


def publish_scheduler(attempt: Attempt, backend: Backend) -> dict | None:
    """The scheduler's word on the attempt (queued with a reason, running, ended by the scheduler), kept in the record."""
    state = backend.scheduler_state(attempt.handle)
    if state is not None:
        attempt.handle.scheduler = state
    return state


def failure_dict(diagnosis: Diagnosis) -> dict | None:
    if diagnosis.class_id is None:
        return None
    return {"class": diagnosis.class_id, "phase": diagnosis.phase, "cause": diagnosis.cause, "fix": diagnosis.fix,
            "retryable": diagnosis.retryable, "lines": diagnosis.line_dicts(FAILURE_LINES)}


