"""How an attempt ended, when its exit status alone does not say: the trainer's own end, or the cause of a failure.

A trainer that exits 0 has succeeded only if it reached its end: the last step in the log, verl's
final line (`RayPPOTrainer.fit` prints `Final validation metrics:` at its last step, then returns),
or, when the log cannot tell (removed mid-run), the checkpoint of the last step. A resume that
trained no step, or an exit 0 short of the end, is a failure with its own class. A failure the log
does not name is told apart by what the supervisor saw: a full state disk, or a signal. A failure
before verl-deploy's scripts handed over to the trainer is theirs (watch/handover.py), never the training's.
"""

from __future__ import annotations

import re
import shutil
import signal

from verl_deploy import boundedread
from verl_deploy.runs.checkpoints import tracked_step
from verl_deploy.runs.record import RunRecord, disk_full_info
from verl_deploy.spec import RunSpec
from verl_deploy.watch import handover
from verl_deploy.watch.diagnosis import Diagnosis

FINAL_LINE = b"Final validation metrics:"
FAILURE_LINES = 3  # log lines a run's failure keeps (the record, status, notices)
FULL_BELOW = 64 * 1024  # bytes free under which a failure the log does not name is put down to the full disk
AGAIN = "launch again to resume from the last checkpoint"


def trainer_finished(record: RunRecord, spec: RunSpec) -> str | None:
    """Why the trainer's own end was reached (None: it was not), from the log and the checkpoint tracker."""
    if record.total_steps and record.step >= record.total_steps:
        return f"step {record.step}/{record.total_steps}"
    log = record.current.log if record.current else None
    try:
        if log and FINAL_LINE in boundedread.read_tail(log, 256 * 1024):  # a FIFO or directory there: not finished
            return "verl's final line"
    except (OSError, TypeError, boundedread.UnreadableFile):
        pass
    tracked = tracked_step(spec.effective_ckpts_dir)
    total = record.total_steps or spec.train_steps
    if tracked is not None and total and tracked >= total:
        record.step = max(record.step, tracked)
        return f"the checkpoint of the last step ({tracked})"
    return None


def no_progress(resumed: int) -> dict:
    return {"class": "no_progress", "phase": "startup", "retryable": False, "lines": [],
            "cause": f"the trainer resumed from step {resumed} and exited 0 without a new step",
            "fix": "look at `verl-deploy logs --attempt N`: a resume that trains nothing usually means the checkpoint "
                   "is already at trainer.total_training_steps or the data ran out (total_epochs)"}


def incomplete(record: RunRecord, spec: RunSpec) -> dict:
    of = f" of {record.total_steps}" if record.total_steps else ""
    return {"class": "incomplete", "phase": None, "retryable": False, "lines": [],
            "cause": f"the trainer exited 0 at step {record.step}{of} without reaching its end (no last step, no verl "
                     "final line); was the log removed or the process ended by hand?",
            "fix": f"look at the log and the checkpoints in {spec.effective_ckpts_dir}; {AGAIN}"}


def unexplained(record: RunRecord, code: int | None) -> dict | None:
    """A cause for a failure the log does not name: the state disk filled up, or a signal ended the trainer."""
    try:
        nearly_full = shutil.disk_usage(record.directory).free < FULL_BELOW
    except OSError:
        nearly_full = False
    if record.disk_full or nearly_full:
        full = record.disk_full = record.disk_full or disk_full_info(record.directory)
        return {"class": "disk_full", "phase": None, "retryable": False, "lines": [],
                "cause": f"the disk holding {full['path']} is full ({full.get('free_bytes')} bytes free): "
                         "the training log and the run record could not be written",
                "fix": "free space there (or set VERL_DEPLOY_STATE_DIR to a larger disk), then launch "
                       "again to resume from the last checkpoint"}
    if code == -1:
        return {"class": "killed", "phase": None, "retryable": False, "lines": [],
                "cause": "the training's processes ended without writing an exit status (killed together with "
                         "their wrapper shell, or the host restarted)",
                "fix": "if you did not stop it: the kernel OOM killer (`dmesg | grep -i kill`) or another user; "
                       "launch again to resume from the last checkpoint"}
    if code is not None and (code > 128 or code < -1):
        number = code - 128 if code > 128 else -code
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return {"class": "killed", "phase": None, "retryable": False, "lines": [],
                "cause": f"the training was ended by {name} (exit status {code}) and its log names no failure",
                "fix": "if you did not stop it: the kernel OOM killer (`dmesg | grep -i kill`) or another user; "
                       "launch again to resume from the last checkpoint"}
    return None


# start_verl.sh's own last line, at a line's start and whole (a training echoing an old log mid-line is not it)
EXITED = re.compile(rb"^\[start_verl\] run_training\.sh exited with status (\d+)\r?$", re.MULTILINE)


def exit_from_log(log: str | None) -> int | None:
    """The training's exit status as start_verl.sh printed it (when the supervisor ended the attempt itself,
    no exit file is written after that line)."""
    if not log:
        return None
    try:
        found = EXITED.findall(boundedread.read_tail(log, TAIL_BYTES))
    except (OSError, TypeError, boundedread.UnreadableFile):
        return None
    return int(found[-1]) if found else None


def unknown_failure(record: RunRecord, code: int | None, also_seen: Diagnosis | None = None) -> dict:
    """A failure the log does not name and nothing else explains: still a class, never null. `also_seen`: the
    log's verdict when it is only a warning or a line the scripts survived (said, and its lines kept)."""
    said = f"exited with status {code}" if code is not None else "ended"
    seen, lines = "", []
    if also_seen is not None and also_seen.class_id is not None:
        kind = "lines the scripts survived before the hand-over" if also_seen.survived else "a warning"
        seen = f"; it shows only {also_seen.class_id} ({kind}), which did not end it"
        lines = also_seen.line_dicts(FAILURE_LINES)
    return {"class": "unknown_failure", "phase": None, "retryable": False, "lines": lines,
            "cause": f"the training {said} and its log names no failure verl-deploy knows{seen}",
            "fix": f"read the errors (`verl-deploy logs {record.id} --errors`) and the last lines of the log; "
                   f"`verl-deploy diagnose LOG` explains a known one; then `verl-deploy resume {record.id}`"}


HEAD_BYTES = 1 << 20  # the hand-over line comes after the scripts' own output: near the log's start
TAIL_BYTES = 64 * 1024
STARTUP_CLASSES = ("cann_env_error", "ray_cluster_startup", "dependency_version_mismatch", "disk_full",
                   "missing_python_package")  # a script's lines


def script_failure(record: RunRecord, code: int | None, diagnosis=None) -> dict | None:
    """The cause of a failure in verl-deploy's own scripts, before they handed over to the training (None: they did).

    Only for scripts that print the hand-over line (run_training.sh of this version); the cause names the script,
    its step and exit status, and what it printed; the fix is the script's own, else a startup class the lines match.
    """
    attempt = record.current
    if attempt is None or not attempt.log:
        return None
    scripts = record.directory / f"attempt-{attempt.n}" / "scripts"
    output = _before_handover(scripts, attempt.log)
    if output is None:
        return None
    tail, whole = output
    seen = handover.read_failure(tail)
    status = seen.status if seen.status is not None else code
    where = f"{seen.script} failed at {seen.step}" if seen.step else "scripts ended before handing over to it"
    said = f" ({_status_text(status)})" if status is not None else ""
    cause = f"the training never started: verl-deploy's {where}{said}{_printed(seen)}"
    startup = diagnosis.class_id if diagnosis is not None and diagnosis.class_id in STARTUP_CLASSES else None
    if startup and not seen.fixes:
        cause += f" (the lines show {diagnosis.title})"
    return {"class": "script_failed", "phase": "startup", "retryable": False, "cause": cause,
            "fix": _script_fix(seen, diagnosis if startup else None, record.id, scripts),
            "script": seen.script, "step": seen.step, "exit_status": status,
            "lines": [{"line": n, "text": line} for n, line in zip(seen.line_numbers, seen.last_lines)] if whole else []}


def scripts_say_handover(scripts) -> bool:
    """Whether run_training.sh in the attempt's `scripts` folder prints the hand-over line (earlier versions'
    scripts do not: their log cannot tell the scripts' lines from the training's). OSError, UnreadableFile pass."""
    return handover.handed_over(boundedread.read_bytes(scripts / "run_training.sh", HEAD_BYTES, head=True))


def _before_handover(scripts, log: str) -> tuple[bytes, bool] | None:
    """(the log's tail, whether it is the whole log) when scripts that say when they hand over never did; else None."""
    try:
        if not scripts_say_handover(scripts):
            return None  # written by a version without the hand-over line: it cannot tell
        head = boundedread.read_bytes(log, HEAD_BYTES, head=True)
        whole = len(head) < HEAD_BYTES  # the scripts' own output is small: then line numbers are the log's
        tail = head if whole else boundedread.read_tail(log, TAIL_BYTES)
    except (OSError, boundedread.UnreadableFile):
        return None
    if handover.handed_over(head) or handover.handed_over(tail):
        return None
    return tail, whole


def _printed(seen) -> str:
    """What the failed script printed: its errors, else its last lines, else that it printed nothing."""
    if seen.errors:
        return ": " + "; ".join(seen.errors[-2:])
    its = "its" if seen.step else "their"
    if seen.last_lines:
        return f"; {its} last lines: " + " | ".join(seen.last_lines)
    return "; it printed nothing" if seen.step else "; they printed nothing"


def _script_fix(seen, startup, run_id: str, scripts) -> str:
    """The script's own fix, else the startup failure's its lines match, else where to look."""
    if seen.fixes:
        return seen.fixes[-1]
    if startup is not None:
        return startup.fix
    if seen.errors:
        return f"do what the error says, then launch again; the job's scripts are in {scripts}"
    return (f"read the job's output (`verl-deploy logs {run_id}`) for the step that failed, fix it and launch "
            f"again; the job's scripts are in {scripts}")


def _status_text(status: int) -> str:
    if status == -1:
        return "no exit status: ended with its wrapper shell, or the host restarted"
    if status > 128:
        try:
            return f"exit status {status}, {signal.Signals(status - 128).name}"
        except ValueError:
            pass
    return f"exit status {status}"
