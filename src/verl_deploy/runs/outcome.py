"""How an attempt ended, when its exit status alone does not say: the trainer's own end, or the cause of a failure.

A trainer that exits 0 has succeeded only if it reached its end: the last step in the log, verl's
final line (`RayPPOTrainer.fit` prints `Final validation metrics:` at its last step, then returns),
or, when the log cannot tell (removed mid-run), the checkpoint of the last step. A resume that
trained no step, or an exit 0 short of the end, is a failure with its own class. A failure the log
does not name is told apart by what the supervisor saw: a full state disk, or a signal.
"""

from __future__ import annotations

import shutil
import signal

from verl_deploy import boundedread
from verl_deploy.runs.checkpoints import tracked_step
from verl_deploy.runs.record import RunRecord, disk_full_info
from verl_deploy.spec import RunSpec

FINAL_LINE = b"Final validation metrics:"
FULL_BELOW = 64 * 1024  # bytes free under which a failure the log does not name is put down to the full disk
AGAIN = "launch again to resume from the last checkpoint"


def trainer_finished(record: RunRecord, spec: RunSpec) -> str | None:
    """Why the trainer's own end was reached (None: it was not), from the log and the checkpoint tracker."""
    if record.total_steps and record.step >= record.total_steps:
        return f"step {record.step}/{record.total_steps}"
    log = record.current.log if record.current else None
    try:
        if FINAL_LINE in boundedread.read_tail(log, 256 * 1024):  # a FIFO or directory there: not finished
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
