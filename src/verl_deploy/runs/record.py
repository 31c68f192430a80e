"""A run on disk: `$XDG_STATE_HOME/verl-deploy/runs/<id>/` with its spec, scripts, attempts and status.

Every write goes to a temporary file renamed over the old one, so a kill during a write leaves
the previous complete record, never half a file; a failed write removes its temporary file. A
record read back may still be damaged (a disk error, a hand edit): `load` checks every field's
type and raises RecordError with one line instead of a traceback. A full disk while saving frees
the run's small reserve file, records `disk_full` with the place, and otherwise keeps the last
good record (DiskFull). Several processes read it (launch, status, the supervisor); only the
supervisor writes it after launch.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from verl_deploy import boundedread
from verl_deploy.backends.handle import Handle
from verl_deploy.statedir import state_dir, write_json

TERMINAL = ("succeeded", "failed", "stopped")
MAX_RECORD_BYTES = 32 * 1024 * 1024  # a run.json larger than this is not ours
RESERVE_BYTES = 512 * 1024  # freed when the state disk is full, so the record can still say so
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class RecordError(Exception):
    """A run record that cannot be read: one line naming the file and what is wrong."""


class DiskFull(OSError):
    """The record could not be saved because its disk is full; the last good record is kept."""


def runs_dir() -> Path:
    return state_dir() / "runs"


def new_run_id() -> str:
    """Time to the second, then 4 hex digits that still sort by time inside the second (milliseconds x 65) and
    differ between two launches in the same millisecond: runs list newest first, and `status` without an id shows
    the newest, also when a rehearsal and the real run start within one second."""
    now = datetime.now()
    return now.strftime("%Y%m%d-%H%M%S-") + f"{now.microsecond // 1000 * 65 + secrets.randbelow(65):04x}"


def read_json(path: Path, what: str, label: str | None = None) -> Any:
    """A JSON file that may be missing, huge, a FIFO, truncated, nested too deep or not JSON: the value, or RecordError."""
    name = label or str(path)
    try:
        raw = boundedread.read_bytes(path, MAX_RECORD_BYTES, name)
    except FileNotFoundError:
        raise RecordError(f"{name} is missing") from None
    except boundedread.UnreadableFile as exc:
        raise RecordError(f"{exc} (damaged {what})") from None
    if not raw.strip():
        raise RecordError(f"{name} is empty")
    try:
        return boundedread.parse_json(raw, name)
    except boundedread.UnreadableFile as exc:
        raise RecordError(str(exc)) from None


def disk_full_info(path: Path) -> dict:
    """Where the disk is full, for the record and for `status`."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        free = None
    return {"path": str(path), "free_bytes": free, "since": time.time()}


def path_outside(record: "RunRecord") -> str | None:
    """The first file the record names that does not resolve inside the run's folder, or None.

    Every file a run writes (attempt logs, exit codes, scheduler state) is under runs/ID/, for every
    backend; a record naming /etc/shadow, or a train.log that is a symlink out of the folder, would
    make `logs`, `report`, `status` or `evidence` print whatever it points at. Symlinks are resolved.
    """
    base = os.path.realpath(record.directory)
    for attempt in record.attempts:
        named = [("log", attempt.log), *attempt.handle.files.items()]
        for key, value in named:
            if value in (None, ""):
                continue
            if not isinstance(value, str) or "\0" in value:
                return f"attempt {attempt.n}'s {key} is {value!r}, not a path"
            if not os.path.isabs(value):
                return f"attempt {attempt.n}'s {key} {value} (a relative path)"
            resolved = os.path.realpath(value)
            if not resolved.startswith(base + os.sep):
                via = f" (a symlink to {resolved})" if resolved != os.path.abspath(value) else ""
                return f"attempt {attempt.n}'s {key} {value}{via}"
    return None


@dataclass
class Attempt:
    n: int
    features: list[str]  # memory features added by recovery (oom_features) at this attempt
    reason: str  # why this attempt exists: "launch", or the recovery that made it
    resumed_from_step: int | None = None
    exit_code: int | None = None
    failure: dict | None = None
    started: float = field(default_factory=time.time)
    ended: float | None = None
    handle: Handle = field(default_factory=Handle)  # what the backend returned: pid, exit-code file, job, ...
    log: str = ""
    changes: dict = field(default_factory=dict)  # spec fields changed for this attempt
    resume: dict = field(default_factory=dict)  # from_step, tracked_step, skipped incomplete checkpoints, overrides
    # every feature this attempt ran with (not only what recovery added), and where each came from:
    # default, mask, user, estimate, calibration (the memory estimate's OOM log), oom (the recovery ladder)
    features_on: list[str] = field(default_factory=list)
    feature_origins: dict = field(default_factory=dict)
    exit_seen: str | None = None  # where exit_code came from when the supervisor ended the attempt itself
    # the memory estimate's OOM response length watched against the logged lengths (runs/predicted_oom.py)
    predicted_oom: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.handle, dict):  # an older caller's (or record's) plain handle
            self.handle = Handle.from_dict(self.handle)

    def as_json(self) -> dict:
        return {**asdict(self), "handle": self.handle.to_dict()}

    def public(self) -> dict:
        keys = ("n", "features", "features_on", "feature_origins", "reason", "resumed_from_step", "exit_code",
                "exit_seen", "failure", "changes", "log", "resume")
        from verl_deploy.runs.predicted_oom import public

        return {**{k: getattr(self, k) for k in keys}, "predicted_oom": public(self.predicted_oom)}


@dataclass
class RunRecord:
    id: str
    backend: str
    spec: dict  # RunSpec.model_dump() plus "sources"; never the API key
    backend_options: dict = field(default_factory=dict)  # ray: address and the env passed to the job
    state: str = "starting"
    created: float = field(default_factory=time.time)
    attempts: list[Attempt] = field(default_factory=list)
    step: int = 0
    total_steps: int | None = None
    eta_seconds: float | None = None
    metrics: dict = field(default_factory=dict)
    swanlab_url: str | None = None
    last_checkpoint_step: int | None = None
    failure: dict | None = None
    # the newest validation verl logged (watch/state.py): {"step", "final", "metrics": {"val-core/...": x}}
    validation: dict = field(default_factory=dict)
    notices: list[dict] = field(default_factory=list)
    notify: list[str] = field(default_factory=list)
    supervisor_pid: int | None = None
    launcher_pid: int | None = None  # the `launch` that created the record, live until the supervisor is up
    stall_seconds: float = 600
    # where the supervisor stopped reading, so a new one resumes there
    scan: dict = field(default_factory=dict)
    disk_full: dict | None = None  # {"path", "free_bytes", "since"} while the state disk is (or was) full
    # each supervisor that died: {"time", "error" (one line), "attempt", "offset" (in its log, when reading it)}
    supervisor_deaths: list[dict] = field(default_factory=list)
    # features launch added whose reason was the memory estimate's calibration log (name -> what it saw)
    calibrated_features: dict = field(default_factory=dict)
    # restart before a predicted OOM with the feature that prevents it (launch --no-preempt-oom: notice only)
    preempt_oom: bool = True
    # features added before a predicted OOM (name -> "predicted OOM at response length N")
    predicted_features: dict = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return runs_dir() / self.id

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def stop_requested(self) -> bool:
        return (self.directory / "stop").exists()

    def save(self) -> None:
        """Write run.json; on a full disk free the reserve and record `disk_full`, else raise DiskFull."""
        if self.stop_requested:  # `verl-deploy stop` wins over whatever a supervisor still believes
            self.state = "stopped"
        try:
            write_json(self.directory / "run.json", self.as_json())
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise
            self.disk_full = self.disk_full or disk_full_info(self.directory)
            reserve = self.directory / "reserve"
            if not reserve.exists():
                raise DiskFull(exc.errno, f"the disk holding {self.directory} is full") from None
            reserve.unlink()
            try:
                write_json(self.directory / "run.json", self.as_json())
            except OSError as again:
                raise DiskFull(again.errno, f"the disk holding {self.directory} is full") from None
            return
        if self.disk_full is None:
            keep_reserve(self.directory)

    def as_json(self) -> dict:
        """run.json's object: each attempt's handle as the entries its backend set."""
        return {**asdict(self), "attempts": [attempt.as_json() for attempt in self.attempts]}

    @classmethod
    def load(cls, run_id: str) -> "RunRecord":
        """The record, type-checked field by field; RecordError (one line) when it is damaged."""
        from pydantic import TypeAdapter, ValidationError

        path = runs_dir() / run_id / "run.json"
        label = "run.json"
        data = read_json(path, "run record", label)
        try:
            record = TypeAdapter(cls).validate_python(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the top level"
            raise RecordError(f"{label} is damaged: {where}: {first['msg'].lower()}") from None
        if record.id != run_id:
            raise RecordError(f"{label} is damaged: it names run {record.id!r}")
        outside = path_outside(record)
        if outside:
            raise RecordError(f"{label} names a file outside the run's folder {record.directory}: {outside}; "
                              "nothing there was read (a run's logs and state files live in its own folder)")
        return record

    def status_document(self) -> dict:
        return {
            "id": self.id, "state": self.state, "step": self.step, "total_steps": self.total_steps,
            "eta_seconds": None if self.state in TERMINAL else self.eta_seconds, "metrics": self.metrics, "swanlab_url": self.swanlab_url,
            "validation": self.validation or None,
            "last_checkpoint_step": self.last_checkpoint_step, "failure": self.failure, "backend": self.backend,
            "attempts": [a.public() for a in self.attempts], "directory": str(self.directory),
            "log": self.current.log if self.current else None, "disk_full": self.disk_full,
            "notices": [{"title": n.get("title"), "time": n.get("time"), "kind": n.get("kind", "failure"),
                         "deliveries": n.get("deliveries", [])} for n in self.notices],
            # the scheduler's word on the current attempt (slurm, kuberay): state, reason, ...
            "scheduler": self.current.handle.scheduler if self.current else None,
            # log lines the watcher could not read: skipped and counted, never fatal
            "unreadable_lines": {"count": int(self.scan.get("skipped") or 0), "first": self.scan.get("first_skipped")},
            "supervisor_deaths": self.supervisor_deaths,
            # the memory estimate's OOM response length watched against the log (attempts[-1].predicted_oom)
            "preempt_oom": self.preempt_oom,
            # for an ended run: the cause, the evidence line, the next step and the command to copy
            "end": _end_of_run(self),
        }


def _end_of_run(record: "RunRecord") -> dict | None:
    from verl_deploy.runs.next_step import end_of_run

    return end_of_run(record)


def save_keeping_last_good(record: "RunRecord") -> bool:
    """The supervisor's save: on a full disk the last good record stays and supervising goes on."""
    import sys

    try:
        record.save()
        return True
    except DiskFull as exc:
        print(f"verl-deploy supervisor: {exc.strerror}; keeping the last good run.json", file=sys.stderr)
        return False


def reload(record: "RunRecord") -> "RunRecord":
    """The record as on disk now; the one in hand while the file is damaged (its supervisor rewrites it)."""
    try:
        return RunRecord.load(record.id)
    except RecordError:
        return record


def keep_reserve(directory: Path) -> None:
    """A small file that a full disk lets us delete, so the record can still say `disk_full`."""
    reserve = directory / "reserve"
    if reserve.exists():
        return
    try:
        with open(reserve, "wb") as handle:
            handle.truncate(0)
            handle.write(b"\0" * RESERVE_BYTES)
    except OSError:
        try:
            reserve.unlink()
        except OSError:
            pass


def list_runs() -> list[str]:
    base = runs_dir()
    if not base.is_dir():
        return []
    return sorted((p.name for p in base.iterdir() if (p / "run.json").is_file()), reverse=True)


def find_run(run_id: str | None) -> str | None:
    """An exact id, a unique prefix, or (None) the newest run."""
    ids = list_runs()
    if not ids:
        return None
    if run_id is None:
        return ids[0]
    if run_id in ids:
        return run_id
    matches = [i for i in ids if i.startswith(run_id)]
    return matches[0] if len(matches) == 1 else None
