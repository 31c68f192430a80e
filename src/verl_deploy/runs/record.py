"""A run on disk: `$XDG_STATE_HOME/verl-deploy/runs/<id>/` with its spec, scripts, attempts and status.

Every write goes to a temporary file renamed over the old one, so a kill during a write leaves
the previous complete record, never half a file. Several processes read it (launch, status,
the supervisor); only the supervisor writes it after launch.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from verl_deploy.statedir import state_dir

TERMINAL = ("succeeded", "failed", "stopped")


def runs_dir() -> Path:
    return state_dir() / "runs"


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2, default=str)
        handle.write("\n")
    os.replace(tmp, path)


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
    handle: dict = field(default_factory=dict)  # backend data: pid, exit-code file, container, ...
    log: str = ""
    changes: dict = field(default_factory=dict)  # spec fields changed for this attempt

    def public(self) -> dict:
        keys = ("n", "features", "reason", "resumed_from_step", "exit_code", "failure", "changes", "log")
        return {k: getattr(self, k) for k in keys}


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
    notices: list[dict] = field(default_factory=list)
    notify: list[str] = field(default_factory=list)
    supervisor_pid: int | None = None
    stall_seconds: float = 600
    # where the supervisor stopped reading, so a new one resumes there
    scan: dict = field(default_factory=dict)

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
        if self.stop_requested:  # `verl-deploy stop` wins over whatever a supervisor still believes
            self.state = "stopped"
        data = asdict(self)
        write_json(self.directory / "run.json", data)

    @classmethod
    def load(cls, run_id: str) -> "RunRecord":
        data = json.loads((runs_dir() / run_id / "run.json").read_text())
        data["attempts"] = [Attempt(**a) for a in data.get("attempts", [])]
        return cls(**data)

    def status_document(self) -> dict:
        return {
            "id": self.id, "state": self.state, "step": self.step, "total_steps": self.total_steps,
            "eta_seconds": self.eta_seconds, "metrics": self.metrics, "swanlab_url": self.swanlab_url,
            "last_checkpoint_step": self.last_checkpoint_step, "failure": self.failure, "backend": self.backend,
            "attempts": [a.public() for a in self.attempts], "directory": str(self.directory),
            "log": self.current.log if self.current else None,
            # the scheduler's word on the current attempt (slurm, kuberay): state, reason, ...
            "scheduler": self.current.handle.get("scheduler") if self.current else None,
        }


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
