"""Evidence of a stalled run, taken while it hangs: what verl's maintainers ask for first.

`collect(record, reason)` writes `runs/<id>/evidence/<time>/` within a bounded time (BUDGET):
- `stacks/<pid>-<name>.txt`: `py-spy dump --nonblocking` of every Python process of the attempt, taken by the
  run's backend where it reaches them (Backend.evidence: the attempt's process tree and session on this host,
  or inside its container); a scheduler's backend says where to take them instead, and adds its own record
  (`ray-job.json` for a Ray job);
- `devices.txt`: `npu-smi info` / `nvidia-smi` where the backend says the devices can be read from here
  (Backend.device_access: this host or the container); for a job on a scheduler's nodes, the file says they
  cannot be read from here and how to read them there, never this host's devices;
- `ray-status.txt` for the run's own Ray head (the address its start_verl.sh recorded in the attempt log;
  none recorded: no Ray is asked, and the summary says so);
- `logs/`: the tail of the attempt log and of every Ray worker log of the run's session the backend found;
- `summary.json`: what was taken, what failed and why, and how long it took.
Nothing here pauses, signals or kills the training. The supervisor calls it when it declares a stall;
`verl-deploy evidence` calls it on demand.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.protocol import Backend
from verl_deploy.backends.registry import UnknownBackend
from verl_deploy.backends.stacks import Taken, file_part
from verl_deploy.preflight.commands import run
from verl_deploy.runs.attempts import backend_for

BUDGET = 60.0  # seconds for the whole collection
TAIL_LINES = 400
TAIL_BYTES = 256 * 1024


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - TAIL_BYTES))
        text = handle.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def _folder(record) -> Path:
    base = record.directory / "evidence"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder, n = base / stamp, 1
    while folder.exists():
        n += 1
        folder = base / f"{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder


def _backend(record) -> Backend | None:
    """The run's backend, or None for a record rebuilt without one (then only the logs are taken)."""
    if record.current is None:
        return None
    try:
        return backend_for(record, with_spec=False)
    except UnknownBackend:
        return None


def collect(record, reason: str, *, budget: float = BUDGET) -> Path:
    """Take the evidence now; returns the folder. Never raises for what it could not take: summary.json says it."""
    started = time.monotonic()
    folder = _folder(record)
    (folder / "stacks").mkdir()
    (folder / "logs").mkdir()
    attempt = record.current
    handle = attempt.handle if attempt else Handle()
    backend = _backend(record)
    ray_address = None if handle.remote_cluster else own_ray_address(record)  # the run's own head, or None
    taken = _take(record, backend, handle, folder, ray_address, deadline=started + budget)
    if attempt and attempt.log and Path(attempt.log).is_file():
        (folder / "logs" / f"attempt-{attempt.n}.log").write_text(_tail(Path(attempt.log)))
    for path in taken.worker_logs:
        try:
            (folder / "logs" / file_part(path.name)).write_text(_tail(path, 200))
        except OSError as exc:
            taken.problems.append(f"{path}: {exc}")
    summary = {
        "run": record.id, "reason": reason, "time": time.time(), "step": record.step,
        "total_steps": record.total_steps, "attempt": attempt.n if attempt else None, "backend": record.backend,
        "stacks": [asdict(d) for d in sorted(taken.dumps, key=lambda d: d.pid)],
        "worker_logs": [str(p) for p in taken.worker_logs], "problems": taken.problems,
        "devices": _access(backend, handle),
        "ray_address": ray_address, "seconds": round(time.monotonic() - started, 2),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return folder


def _take(record, backend: Backend | None, handle: Handle, folder: Path, ray_address: str | None, *,
          deadline: float) -> Taken:
    """Every collection at once, until `deadline`: the backend's (stacks, its own records), the devices, Ray."""
    pool = ThreadPoolExecutor(max_workers=3)
    taken = Taken()
    try:
        futures: list[Future] = [pool.submit(_devices, record, backend, handle, folder),
                   pool.submit(_ray_status, record, handle, folder, ray_address)]
        if backend is not None:
            futures.append(pool.submit(backend.evidence, handle, folder, deadline - 2.0))
        done, late = wait(futures, timeout=max(1.0, deadline - time.monotonic()))
        for future in done:
            if future.exception() is not None:
                taken.problems.append(f"a collection failed: {future.exception()}")
                continue
            value = future.result()
            if isinstance(value, Taken):
                taken.dumps, taken.worker_logs = value.dumps, value.worker_logs
                taken.problems += value.problems
            elif isinstance(value, str):
                taken.problems.append(value)
        if late:
            taken.problems.append(f"{len(late)} collection(s) did not finish in time and were left out")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a hung probe must not hold the supervisor
    return taken


def _access(backend: Backend | None, handle: Handle) -> dict:
    """Where the backend says the attempt's devices can be read from here (as recorded when it is not known)."""
    from verl_deploy.views.devices import access_of

    if backend is not None:
        try:
            return backend.device_access(handle)
        except Exception:  # noqa: BLE001 - what was recorded at the start still says it
            pass
    return access_of(handle)


def _devices(record, backend: Backend | None, handle: Handle, folder: Path) -> str | None:
    """`npu-smi info` / `nvidia-smi` where the devices can be read from here; else devices.txt says why not."""
    from verl_deploy.views.devices import device_runner

    access = _access(backend, handle)
    argv = ["npu-smi", "info"] if record.spec.get("device") == "npu" else ["nvidia-smi"]
    runner = device_runner(access)
    if runner is None:
        (folder / "devices.txt").write_text(f"{access.get('why')}\n")
        return f"devices: {access.get('why')}"
    result = runner.run(argv, timeout=20)
    (folder / "devices.txt").write_text(f"$ {' '.join(argv)} ({runner.where})\n{result.output}")
    return None if result.ok else f"devices: {result.problem(20)}"


def own_ray_address(record) -> str | None:
    """The address of the Ray head this run's current attempt started, as its start_verl.sh recorded it in
    the attempt log. Never a default (127.0.0.1:6379 may be someone else's Ray on a shared host)."""
    from verl_deploy.backends.rayprocs import started_head

    attempt = record.current
    head = started_head(attempt.log) if attempt is not None and attempt.log else None
    return head[0] if head else None


def _ray_status(record, handle: Handle, folder: Path, address: str | None) -> str | None:
    """`ray status` of the run's own Ray head only, at the address it recorded; none recorded: not asked."""
    if handle.remote_cluster:
        return None
    if address is None:
        return ("ray status: this attempt recorded no Ray head of its own (it reused a cluster, or did not get "
                "that far); no Ray was asked")
    if not shutil.which("ray"):
        return None
    from verl_deploy import rayauth

    mode: rayauth.Mode = "token" if record.spec.get("ray_auth") == "token" else "disabled"  # as its head started
    output = settled_ray_status(address, rayauth.gcs_environment(mode))
    (folder / "ray-status.txt").write_text(f"$ ray status --address {address}\n{output}")
    return None


RAY_STATUS_PENDING = "No cluster status"  # Ray's answer until its monitor first reports the nodes
RAY_STATUS_SETTLE_S = 30.0


def settled_ray_status(address: str, env: dict[str, str], settle_s: float = RAY_STATUS_SETTLE_S,
                       every_s: float = 3.0) -> str:
    """`ray status` once Ray has a status to give: a head that has just started (or a loaded host, where
    its monitor lags a training already at step 2) answers "No cluster status" for some seconds; asked again
    every few seconds for up to `settle_s`, the last answer kept."""
    deadline = time.monotonic() + settle_s
    while True:
        output = run(["ray", "status", "--address", address], timeout=20, env=env).output
        if RAY_STATUS_PENDING not in output or time.monotonic() + every_s > deadline:
            return output
        time.sleep(every_s)
