"""The one interface every backend (local, docker, ray, slurm, kuberay) offers, and what most of them share.

A backend is chosen once per run (backends/registry.py) and kept in the run record by its kind and
options; everything after that asks it, never its kind. Before a launch it says what its options are
and what blocks it (`configure`, `where` verl's validation runs, `preflight`); then it makes ready what starting needs
(`prepare`, `login`), starts an attempt from its scripts (`extra_files`, `start`, `start_nodes`) and
returns a `Handle`. The handle is all it needs later: `finished`/`alive`, `scheduler_state` (the
scheduler's word), `explain_end` (an end the log does not explain), `check_stop`/`stop`/`end_nodes`,
`evidence` (a stall's stack dumps where it can reach the processes, or what it alone can tell),
`device_access` (where the attempt's devices can be read from this host, if at all) and `clean` (what an
attempt left running).
Every backend streams the training's output into the handle's `log` on this host: that is its logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from verl_deploy import boundedread
from verl_deploy.backends.handle import Handle
from verl_deploy.backends.process import exit_code, recorded_alive, stop_group
from verl_deploy.findings import Finding

if TYPE_CHECKING:
    from verl_deploy.backends.leftovers import Freed
    from verl_deploy.backends.stacks import Taken
    from verl_deploy.compiler import Plan
    from verl_deploy.spec import RunSpec

Say = Callable[[str], None]


class BackendError(Exception):
    """A backend could not do what was asked: one line, the fix, and the failure class a launch records."""

    failure_class = "start_failed"

    def __init__(self, message: str, fix: str = ""):
        super().__init__(message)
        self.fix = fix  # "" when there is none to give


@dataclass(frozen=True)
class Target:
    """What the user said about where to run, beyond the spec: the flags a backend's options come from."""

    ray_address: str | None = None
    job_env: tuple[str, ...] = ()
    reuse_ray: bool = False
    scheduler: dict[str, Any] = field(default_factory=dict)  # the scheduler flags as given (None: not given)


@dataclass(frozen=True)
class Where:
    """Where the training will run, for a check that runs code there first (verl's own validation)."""

    container: str | None = None  # in this container on this host (None, no address: on this host)
    ray_address: str | None = None  # as a job on the Ray cluster of this job server


class Backend(Protocol):
    kind: ClassVar[str]
    # True: the training runs on this host (or in a container on it) and on --nodes reached over SSH, so the
    # host check, the entry import and the SwanLab login happen here; False: a scheduler places it and gives
    # the Ray head at run time
    runs_here: ClassVar[bool]

    @classmethod
    def configure(cls, spec: RunSpec, target: Target) -> tuple[dict, list[Finding]]:
        """The options the run record keeps for this backend, and what blocks a launch on it."""
        ...

    @classmethod
    def from_options(cls, options: dict, spec: RunSpec | None, container: str | None, run_dir: str) -> Backend:
        """The backend again from what the record keeps (spec None: a damaged record; stop still works)."""
        ...

    def where(self) -> Where | None:
        """Where the training will run, for verl's own validation; None where nothing can run there first."""
        ...

    def preflight(self, plan: Plan, *, verified: Any, probe_host: bool, allow_local_checkpoints: bool) -> list[Finding]:
        """What else would stop the training where it runs: the entry import, SwanLab, the other nodes."""
        ...

    def prepare(self, spec: RunSpec, say: Say) -> None:
        """Make ready what starting needs (the container); BackendError when it cannot."""
        ...

    def login(self, spec: RunSpec, say: Say) -> None:
        """Log in to the trackers where the training runs, when that is ours to do; BackendError when it fails."""
        ...

    def extra_files(self, plan: Plan, scripts_dir: Path) -> dict[str, str]:
        """Files written beside the attempt's scripts (submit.sbatch, rayjob.yaml): {name: content}."""
        ...

    def start(self, scripts_dir: Path, attempt_dir: Path) -> Handle: ...

    def start_nodes(self, spec: RunSpec, scripts_dir: Path, handle: Handle) -> None:
        """Start the other nodes of a multi-node run when this backend does it itself (kept in handle.workers)."""
        ...

    def finished(self, handle: Handle) -> int | None: ...

    def alive(self, handle: Handle) -> bool: ...

    def scheduler_state(self, handle: Handle) -> dict | None:
        """The scheduler's word on the attempt: {"scheduler", "state", "reason", "queued", "resubmit", "failure"}."""
        ...

    def explain_end(self, handle: Handle) -> dict | None:
        """Why the training ended when its log does not say (a failure dict), or None."""
        ...

    def check_stop(self, handle: Handle) -> None:
        """Raise (one line with the fix) when `stop` could not reach what runs the attempt; before anything is touched."""
        ...

    def stop(self, handle: Handle) -> None: ...

    def end_nodes(self, handle: Handle) -> None:
        """End the other nodes this backend started for the attempt."""
        ...

    def evidence(self, handle: Handle, folder: Path, deadline: float) -> Taken:
        """A stall's evidence that only the backend can take: the stack dumps of the attempt's processes where it
        reaches them (into folder/stacks), else where to take them; its own records (a Ray job's); by `deadline`
        (time.monotonic())."""
        ...

    def device_access(self, handle: Handle) -> dict:
        """Where the attempt's devices can be read from this host: {"where": "host"}, {"where": "container",
        "container": NAME}, or {"where": None, "why": where they are and how to read them there}. The run
        record keeps it on the handle (`devices`): the live view and the evidence read it, never this host's
        devices in place of a cluster's."""
        ...

    def clean(self, run_id: str, handles: list[Handle], grace: float) -> tuple[list[Freed], list[str]]:
        """End what the run's attempts left running (newest first); what was freed, and notes."""
        ...


class DetachedBackend:
    """What every backend does alike: the attempt is a process started by `start_detached` (the training, or a
    pump following a scheduler's job), which writes the log and the exit status on this host."""

    kind: ClassVar[str] = ""
    runs_here: ClassVar[bool] = False

    @classmethod
    def configure(cls, spec: RunSpec, target: Target) -> tuple[dict, list[Finding]]:
        return {}, []

    def where(self) -> Where | None:
        return None

    def preflight(self, plan: Plan, *, verified: Any, probe_host: bool, allow_local_checkpoints: bool) -> list[Finding]:
        return []

    def prepare(self, spec: RunSpec, say: Say) -> None:
        return None

    def login(self, spec: RunSpec, say: Say) -> None:
        return None

    def extra_files(self, plan: Plan, scripts_dir: Path) -> dict[str, str]:
        return {}

    def start_nodes(self, spec: RunSpec, scripts_dir: Path, handle: Handle) -> None:
        return None

    def finished(self, handle: Handle) -> int | None:
        return exit_code(handle)

    def alive(self, handle: Handle) -> bool:
        return recorded_alive(handle) and exit_code(handle) is None

    def scheduler_state(self, handle: Handle) -> dict | None:
        path = handle.scheduler_file
        if not path:
            return None
        try:
            data = boundedread.read_json(path, 1 << 20)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def explain_end(self, handle: Handle) -> dict | None:
        return None

    def check_stop(self, handle: Handle) -> None:
        """A local process can always be stopped."""

    def end_nodes(self, handle: Handle) -> None:
        return None

    def evidence(self, handle: Handle, folder: Path, deadline: float) -> Taken:
        from verl_deploy.backends.stacks import Taken, container_stacks, host_stacks

        if handle.container:
            return container_stacks(handle.container, folder, deadline)
        return host_stacks(handle.pid, folder, deadline) if handle.pid else Taken()

    def device_access(self, handle: Handle) -> dict:
        if handle.container:
            return {"where": "container", "container": handle.container}
        return {"where": "host"}


class ScheduledBackend(DetachedBackend):
    """A scheduler (Ray Jobs, Slurm, KubeRay) places the training; a pump on this host follows the job."""

    runs_here: ClassVar[bool] = False
    PUMP_WAIT: ClassVar[float] = 60.0  # seconds the pump gets to copy the last output and write the result

    def cancel(self, handle: Handle) -> None:
        """Ask the scheduler to end the job (scancel, delete the RayJob, stop the Ray job)."""
        raise NotImplementedError

    def stop(self, handle: Handle) -> None:
        import time

        self.cancel(handle)
        deadline = time.monotonic() + self.PUMP_WAIT
        while time.monotonic() < deadline and exit_code(handle) is None and recorded_alive(handle):
            time.sleep(0.2)
        stop_group(handle, grace=2)

    def clean(self, run_id: str, handles: list[Handle], grace: float) -> tuple[list[Freed], list[str]]:
        return [], [f"the {self.kind} scheduler runs this run's processes: `verl-deploy stop {run_id}` asks it to "
                    "end them"]

    def elsewhere(self, handle: Handle) -> str:
        """Where the scheduler runs the attempt (its nodes, not this host), and how to run a command there."""
        raise NotImplementedError

    def evidence(self, handle: Handle, folder: Path, deadline: float) -> Taken:
        from verl_deploy.backends.stacks import Taken

        return Taken(problems=[f"no stack dumps from here: {self.elsewhere(handle)} (`py-spy dump --nonblocking "
                               "--pid PID` there, for each Python process)"])

    def device_access(self, handle: Handle) -> dict:
        return {"where": None, "why": f"not readable from this host: {self.elsewhere(handle)} (`npu-smi info` / "
                                      "`nvidia-smi` there)"}
