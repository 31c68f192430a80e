"""An attempt ended: did the run succeed, fail, or does recovery start the next attempt?

Exit 0 is a success only when the trainer reached its end (runs/outcome.py). Otherwise the failure is
what the scheduler said it ended, what verl-deploy's own scripts printed before the hand-over, what
the log shows, what the backend knows (a restarted container), in that order; the recovery policy
(runs/recovery.py) decides on a retry within the budget counted from the launch or the last `resume`.
Every end is noticed and kept in the record with the next step to take.
"""

from __future__ import annotations

import time

from verl_deploy.backends.protocol import Backend
from verl_deploy.runs import notify, predicted_oom
from verl_deploy.runs.attempts import spec_of, start_attempt
from verl_deploy.runs.follow import ACT_NOW, failure_dict, publish_scheduler
from verl_deploy.runs.outcome import (exit_from_log, incomplete, no_progress, script_failure, trainer_finished,
                                      unexplained, unknown_failure)
from verl_deploy.runs.record import Attempt, RunRecord, save_keeping_last_good as _save
from verl_deploy.runs.recovery import RESUBMIT_REASON, RESUME_REASON, Decision, decide
from verl_deploy.spec import RunSpec
from verl_deploy.watch.diagnosis import Diagnosis


def attempt_ended(record: RunRecord, backend: Backend, code: int | None, diagnosis: Diagnosis,
                  stopped_by_us: bool) -> bool:
    """Record how the current attempt ended and act on it; True when a new attempt started (follow it)."""
    attempt = record.current
    assert attempt is not None
    backend.end_nodes(attempt.handle)
    scheduler = publish_scheduler(attempt, backend)
    _record_exit(attempt, code, stopped_by_us)
    if record.stop_requested:  # `verl-deploy stop` while we watched (save() records the state)
        _save(record)
        return False
    # stopped at a checkpoint ahead of a predicted OOM: a restart, unless the training failed by itself meanwhile
    # (a warning or a line the scripts survived, such as Ray's NPU probe on every NPU host without `acl`, is no failure)
    if stopped_by_us and predicted_oom.stopping(attempt) and not diagnosis.failed:
        return _preempt(record, attempt)
    if code == 0 and not stopped_by_us:
        _exited_zero(record, attempt)
        return False
    said = scheduler or {}  # what the scheduler ended itself is its word, not what the log shows after it
    attempt.failure, early = _failure_of(record, backend, attempt, code, diagnosis, said)
    spec = spec_of(record)
    decision = _decision(record, spec, diagnosis, scheduler, early)
    if decision.retry:
        return _retry(record, attempt, spec, decision)
    record.state = "failed"
    record.failure = {**(attempt.failure or unknown_failure(record, attempt.exit_code)), "decision": decision.reason}
    _add_next(record)
    notify.notice(record, f"failed: {attempt.failure['class'] if attempt.failure else 'exit ' + str(code)}",
                  failure=record.failure)
    _save(record)
    return False


def _record_exit(attempt: Attempt, code: int | None, stopped_by_us: bool) -> None:
    attempt.exit_code, attempt.ended = code, time.time()
    if stopped_by_us and (code is None or code < 0 or code > 128):
        logged = exit_from_log(attempt.log)  # the training had exited itself before we stopped what was left
        if logged is not None:
            attempt.exit_code, attempt.exit_seen = logged, "start_verl.sh's last line in the log"


def _exited_zero(record: RunRecord, attempt: Attempt) -> None:
    """Exit 0: succeeded when the trainer reached its end; else a resume that trained nothing, or short of the end."""
    spec = spec_of(record)
    resumed = attempt.resumed_from_step
    if trainer_finished(record, spec):
        record.state = "succeeded"
        _save(record)
        _calibrate_clean(spec, record)
        return
    if resumed is not None and record.step <= resumed:
        attempt.failure = no_progress(resumed)
    else:
        attempt.failure = incomplete(record, spec)
    record.state = "failed"
    record.failure = {**attempt.failure, "decision": attempt.failure["cause"]}
    _add_next(record)
    notify.notice(record, f"failed: {attempt.failure['class']}", failure=record.failure)
    _save(record)


def _failure_of(record: RunRecord, backend: Backend, attempt: Attempt, code: int | None, diagnosis: Diagnosis,
                said: dict) -> tuple[dict | None, dict | None]:
    """(the attempt's failure, the scripts' own failure when they failed before the training started)."""
    if said.get("resubmit"):
        return said.get("failure"), None
    early = None if said.get("failure") else script_failure(record, code, diagnosis)
    if early:  # no training ran: theirs, unless the container or disk went
        return backend.explain_end(attempt.handle) or unexplained(record, None) or early, early
    if diagnosis.failed:
        return failure_dict(diagnosis), None
    # a warning (Ray's NPU probe, a slow step) or a line the scripts survived never names what ended the run
    return (said.get("failure") or backend.explain_end(attempt.handle)  # the scheduler's or backend's word
            or unexplained(record, code) or unknown_failure(record, attempt.exit_code, also_seen=diagnosis)), None


def _budget(record: RunRecord) -> tuple[int, int]:
    """(retries, resubmissions) so far, counted from the launch, or from the last `verl-deploy resume`."""
    since = max((i for i, a in enumerate(record.attempts) if a.reason.startswith(RESUME_REASON)), default=0)
    counted = record.attempts[since:]
    resubmits = sum(1 for a in counted if a.reason.startswith(RESUBMIT_REASON))
    ahead = sum(1 for a in counted if a.reason.startswith(predicted_oom.REASON))  # not a retry: bounded apart
    return len(counted) - 1 - resubmits - ahead, resubmits


def _decision(record: RunRecord, spec: RunSpec, diagnosis: Diagnosis, scheduler: dict | None,
              early: dict | None) -> Decision:
    attempt = record.current
    assert attempt is not None
    retries, resubmits = _budget(record)
    decision = decide(diagnosis, spec, retries, attempt.features, scheduler=scheduler, resubmits_done=resubmits)
    if not early:  # no training ran: nothing for the memory calibration
        _calibrate(spec, diagnosis, decision)
    if attempt.failure and (not diagnosis.failed or early) and not (scheduler or {}).get("failure"):
        decision = Decision(False, attempt.failure["cause"])
    return decision


def _preempt(record: RunRecord, attempt: Attempt) -> bool:
    """The supervisor stopped the attempt at a complete checkpoint before a predicted OOM: the next attempt resumes
    from it with the feature that prevents the OOM (runs/predicted_oom.py)."""
    spec = spec_of(record)
    attempt.exit_seen = attempt.exit_seen or "stopped by the supervisor before a predicted OOM"
    reason, changes, feature, title = predicted_oom.next_attempt(record, attempt, spec)
    return _retry(record, attempt, spec, Decision(True, reason, changes, [feature]), title=title)


def _retry(record: RunRecord, attempt: Attempt, spec: RunSpec, decision: Decision, title: str | None = None) -> bool:
    """The next attempt with the decision's changes; when it cannot start, the run fails saying so."""
    new_spec = spec.with_changes(source="recovery", **decision.changes)
    _recovery_notice(record, attempt, decision, title)
    _save(record)
    try:  # start_attempt adds where it resumes from (a complete checkpoint only)
        start_attempt(record, new_spec, decision.reason, decision.added, decision.changes)
    except Exception as exc:  # the retry itself could not start: say so instead of dying silently
        record.state = "failed"
        record.failure = {**(attempt.failure or {}), "decision": f"{decision.reason}; the retry could not "
                                                                f"start: {exc}"}
        _add_next(record)
        notify.notice(record, "failed: the retry could not start", failure=record.failure)
        _save(record)
        return False
    return True


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


def _recovery_notice(record: RunRecord, attempt: Attempt, decision: Decision, title: str | None = None) -> None:
    """An automatic recovery, kept in the record as a notice (status --json shows it, --notify URL or not).

    Only failures and stalls are sent to the --notify URLs; a recovery is recorded, not sent."""
    what = (attempt.failure or {}).get("class") or "failure"
    step = f" at step {record.step}" if record.step else ""
    record.notices.append({"time": time.time(), "kind": "recovery", "attempt": attempt.n,
                           "title": title or f"recovered from {what}{step}: {decision.reason}; attempt {attempt.n + 1} "
                                             "resumes from the last complete checkpoint",
                           "body": "", "deliveries": [], "delivery_problems": []})


def _calibrate(spec: RunSpec, diagnosis: Diagnosis, decision: Decision) -> None:
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


