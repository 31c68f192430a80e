"""`Handle`: what a backend returns when it starts an attempt, and all it needs later to follow and end it.

The run record keeps it (run.json and attempt-N/handle.json) as the same JSON object it always was:
only the entries the backend set are written, so a record written before the Handle was typed (a
plain dict of these keys) loads as it is, and one written now reads the same to an older reader.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class Handle:
    # the detached process every backend starts (backends/process.py): the training, or the pump following a job
    log: str = ""  # the attempt's log on this host, which the watcher follows
    pid: int | None = None  # the process group leader
    exit_file: str | None = None  # its exit status, written when it ends
    spawned: float | None = None  # when it was started (tells it from a later process with its pid)
    identity: dict | None = None  # start time, process group and command line (backends/process.py)
    ray_temp_dir: str | None = None  # the temp dir its own Ray head was started with
    # docker: the container the training runs in, and its folder there
    container: str | None = None
    remote: str | None = None
    # schedulers: the job as the scheduler names it, and the pump's state file
    job_id: str | None = None  # a Ray job's or a Slurm job's id
    address: str | None = None  # the Ray job server the job runs on (its processes and devices are on that cluster)
    rayjob: str | None = None  # a KubeRay RayJob's name
    namespace: str | None = None
    scheduler_file: str | None = None
    scheduler: dict | None = None  # the scheduler's last word on the attempt: state, reason, queued, failure, ...
    workers: list[dict] = field(default_factory=list)  # the other nodes this tool started over SSH
    # where the attempt's devices can be read from this host, as its backend said (Backend.device_access):
    # {"where": "host"}, {"where": "container", "container": NAME} or {"where": None, "why": ...}
    devices: dict | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Handle":
        """A handle from its JSON object (an older record's too); keys this version does not know are left out."""
        from pydantic import TypeAdapter

        known = {f.name for f in fields(cls)}
        return TypeAdapter(cls).validate_python({k: v for k, v in data.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the record keeps: only the entries that are set."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != []}

    @property
    def files(self) -> dict[str, str | None]:
        """The files of the run's folder this handle names (the record refuses one that resolves outside it)."""
        return {"log": self.log, "exit_file": self.exit_file, "scheduler_file": self.scheduler_file}

    @property
    def queued(self) -> bool:
        """The scheduler holds the job in its queue (waiting there is not a stall)."""
        return bool((self.scheduler or {}).get("queued"))

    @property
    def remote_cluster(self) -> str | None:
        """The cluster the training runs on when its processes and devices are not reachable from this host."""
        return self.address
