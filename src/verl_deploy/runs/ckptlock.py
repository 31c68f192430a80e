"""One live run per checkpoint directory: a second one would resume from the first one's checkpoints.

verl resumes from `latest_checkpointed_iteration.txt` in trainer.default_local_dir; two runs writing
the same directory overwrite each other's checkpoints and each resumes from the other's step. A
launch looks at every run record on this host under a lock (so two launches at once cannot both
pass) and refuses while a live run (its launcher, supervisor or training still running) uses the
same directory, unless `--force`.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from typing import Iterator

from verl_deploy.backends.process import process_alive
from verl_deploy.runs.attempts import spec_of
from verl_deploy.runs.record import TERMINAL, RecordError, RunRecord, list_runs, runs_dir


@contextmanager
def launch_lock() -> Iterator[None]:
    """Held from the conflict check until the new record is on disk."""
    base = runs_dir()
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".launch.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(record: RunRecord) -> bool:
    if record.state in TERMINAL:
        return False
    pids = [record.launcher_pid, record.supervisor_pid]
    if record.current:
        pids.append(record.current.handle.pid)
    return any(process_alive(pid) for pid in pids if isinstance(pid, int))


def _ckpts_dir(record: RunRecord) -> str | None:
    try:
        return os.path.realpath(spec_of(record).effective_ckpts_dir)
    except Exception:  # a record whose spec no longer validates cannot claim a directory
        return None


def live_users(ckpts_dir: str, *, exclude: str | None = None) -> list[str]:
    """Ids of live runs on this host whose checkpoint directory is `ckpts_dir`."""
    wanted = os.path.realpath(ckpts_dir)
    users = []
    for run_id in list_runs():
        if run_id == exclude:
            continue
        try:
            record = RunRecord.load(run_id)
        except RecordError:
            continue
        if _alive(record) and _ckpts_dir(record) == wanted:
            users.append(run_id)
    return users
