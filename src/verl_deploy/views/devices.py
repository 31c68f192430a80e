"""Device memory and utilization for the live view: `npu-smi info` / `nvidia-smi`, where the run runs.

Polled in a background thread (npu-smi can take seconds) and parsed with the preflight
parsers, where the run's backend said its devices can be read from this host (the handle's
`devices`: this host, or inside the run's container). A job a scheduler placed on other nodes
(Slurm, KubeRay, a Ray cluster) is said to be not readable from here, with where to read it:
this host's devices are never shown in their place. The memory estimate, when the plan of the
attempt carries one, is what each device's use is drawn against.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from verl_deploy.boundedread import MAX_PLAN_BYTES, read_json
from verl_deploy.textnumbers import float_or_none, int_or_none

POLL_SECONDS = 5.0


@dataclass
class DeviceRow:
    id: int
    name: str
    used_mb: int | None
    total_mb: int | None
    utilization: int | None = None  # percent, when the tool reports it


@dataclass
class DeviceReading:
    rows: list[DeviceRow]
    problem: str | None = None  # why there are no rows
    at: float = 0.0


def _handle(record):
    """The current attempt's handle: where its training runs (a container, a cluster), as its backend recorded."""
    return record.current.handle if record.current else None


def access_of(handle) -> dict:
    """Where the attempt's devices can be read from this host, as its backend said when it started it (the
    handle's `devices`); for a handle recorded before that: a job of a scheduler (a Ray job, a Slurm job, a
    RayJob) is elsewhere, a container is read inside, else this host."""
    recorded = getattr(handle, "devices", None) if handle is not None else None
    if isinstance(recorded, dict) and "where" in recorded:
        return recorded
    if handle is None:
        return {"where": "host"}
    if handle.remote_cluster or handle.job_id or handle.rayjob:
        return {"where": None, "why": "not readable from this host: the job runs on the nodes its scheduler gave it"}
    if handle.container:
        return {"where": "container", "container": handle.container}
    return {"where": "host"}


def device_runner(access: dict):
    """A runner of commands where the devices can be read (the container, or this host); None: not from here."""
    from verl_deploy.preflight.commands import ContainerRunner, Runner

    if access.get("where") == "container" and access.get("container"):
        return ContainerRunner(str(access["container"]), timeout=8)
    if access.get("where") == "host":
        return Runner(timeout=8)
    return None


def _elsewhere(handle, access: dict) -> str:
    """Why the devices are not shown: where they are, and the scheduler's nodes when it named them."""
    nodes = ((handle.scheduler or {}).get("nodes") if handle is not None else None)
    why = str(access.get("why") or "not readable from this host: the training runs on other nodes")
    return why + (f" [now on {nodes}]" if nodes and str(nodes) not in why else "")


def _npu_aicore(text: str) -> list[int | None]:
    """AICore(%) of each chip, in table order: the first number of the third cell of a chip row (the Bus-Id row)."""
    from verl_deploy.preflight.devices import BUS_ID

    usage: list[int | None] = []
    for line in text.splitlines():
        if "Process id" in line or "Process name" in line:
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and BUS_ID.match(cells[1]) and cells[0].split()[:1] and cells[0].split()[0].isdigit():
            first = cells[2].split()[:1]
            value = float_or_none(first[0], finite=True) if first else None  # tool output: bounded, any text
            usage.append(int(value) if value is not None and 0 <= value <= 100 else None)
    return usage


def _gpu_utilization(text: str) -> dict[int, int]:
    """utilization.gpu, the last of preflight's QUERY_FIELDS, per index (the CSV parser keeps memory only)."""
    usage = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        index = int_or_none(cells[0]) if len(cells) == 5 else None
        value = int_or_none(cells[4].split()[0]) if index is not None and cells[4].split()[:1] else None
        if index is not None and value is not None:
            usage[index] = value
    return usage


def read_devices(record) -> DeviceReading:
    """One reading of the run's devices; a missing or failing tool is a reading with a problem."""
    from verl_deploy.preflight.devices import QUERY_ARGS, dcmi_error, parse_npu_smi, parse_nvidia_csv

    handle = _handle(record)
    access = access_of(handle)
    runner = device_runner(access)
    if runner is None:
        return DeviceReading([], _elsewhere(handle, access), time.time())
    wanted = set(record.spec.get("devices") or [])
    if record.spec.get("device") == "npu":
        result = runner.run(["npu-smi", "info"])
        problem = dcmi_error(result.output) or result.problem(runner.timeout)
        if problem:
            return DeviceReading([], problem, time.time())
        table = parse_npu_smi(result.stdout)
        usage = _npu_aicore(result.stdout)
        usage += [None] * (len(table.devices) - len(usage))
        rows = [DeviceRow(d.id, d.name, d.hbm_used_mb, d.hbm_total_mb, u) for d, u in zip(table.devices, usage)]
    else:
        result = runner.run(["nvidia-smi", *QUERY_ARGS])
        problem = result.problem(runner.timeout)
        if problem:
            return DeviceReading([], problem, time.time())
        table = parse_nvidia_csv(result.stdout)
        utilization = _gpu_utilization(result.stdout)
        rows = [DeviceRow(d.id, d.name, d.hbm_used_mb, d.hbm_total_mb, utilization.get(d.id)) for d in table.devices]
    if wanted:
        rows = [r for r in rows if r.id in wanted] or rows
    return DeviceReading(rows, None if rows else "the tool listed no device", time.time())


def memory_estimate_mb(record) -> float | None:
    """The plan's per-device memory estimate (MB), when the memory estimator put one in plan.json.

    plan.json's `memory.peak_gb` (the estimate's peak over the phases, per device). Absent (no
    model config to estimate from, or an older plan): None, and the view shows device memory alone.
    """
    attempt = record.current
    if attempt is None:
        return None
    try:
        plan = read_json(record.directory / f"attempt-{attempt.n}" / "scripts" / "plan.json", MAX_PLAN_BYTES)
    except (OSError, ValueError):
        return None
    memory = plan.get("memory") if isinstance(plan, dict) else None
    if not isinstance(memory, dict):
        return None
    for key, scale in (("peak_gb", 1024),):
        value = memory.get(key)
        if isinstance(value, (int, float)) and value > 0:
            return float(value) * scale
    return None


class DevicePoller:
    """Reads the devices every POLL_SECONDS in a daemon thread; `latest` is the last reading."""

    def __init__(self, record, interval: float = POLL_SECONDS):
        self.record = record
        self.interval = interval
        self.latest: DeviceReading | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "DevicePoller":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.latest = read_devices(self.record)
            except Exception as exc:  # a view must not die of a probe
                self.latest = DeviceReading([], f"could not read the devices: {exc}", time.time())
            self._stop.wait(self.interval)
