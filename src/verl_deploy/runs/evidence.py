"""Evidence of a stalled run, taken while it hangs: what verl's maintainers ask for first.

`collect(record, reason)` writes `runs/<id>/evidence/<time>/` within a bounded time (BUDGET):
- `stacks/<pid>-<name>.txt`: `py-spy dump --nonblocking` of every Python process of the attempt
  (the trainer, the Ray driver and its `ray::` workers: the attempt's process tree and session),
  on this host or inside the run's container (py-spy copied in when the container lacks it);
- `devices.txt`: `npu-smi info` / `nvidia-smi` where the run runs; `ray-status.txt` for the run's own Ray head
  (the address its start_verl.sh recorded in the attempt log; none recorded: no Ray is asked, and the summary says so);
  `ray-job.json` for a Ray job (the job server's record; its stacks are on the cluster's nodes);
- `logs/`: the tail of the attempt log and of every Ray worker log of the run's session;
- `summary.json`: what was taken, what failed and why, and how long it took.
`--nonblocking` reads the processes' memory without stopping them: nothing here pauses, signals
or kills the training. The supervisor calls it when it declares a stall; `verl-deploy evidence`
calls it on demand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.registry import UnknownBackend
from verl_deploy.preflight.commands import run
from verl_deploy.runs.attempts import backend_for
from verl_deploy.textnumbers import int_or_none

BUDGET = 60.0  # seconds for the whole collection
DUMP_TIMEOUT = 20.0  # seconds per py-spy dump
MAX_PROCESSES = 48
TAIL_LINES = 400
TAIL_BYTES = 256 * 1024
MAX_WORKER_LOGS = 64
CONTAINER_PY_SPY = "/tmp/verl-deploy-py-spy"
SESSION_ARG = re.compile(r"--(?:session[-_]dir|temp[-_]dir|log[-_]dir)=(\S+)")


@dataclass
class Dump:
    pid: int
    name: str
    file: str | None = None
    error: str | None = None


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


def find_py_spy() -> str | None:
    """py-spy on PATH, else the one installed with verl-deploy (a dependency) beside this Python."""
    import sysconfig

    return shutil.which("py-spy") or shutil.which("py-spy", path=sysconfig.get_path("scripts"))


def _is_python(process: psutil.Process) -> bool:
    try:
        cmdline = process.cmdline()
        name = process.name()
    except psutil.Error:
        return False
    return "python" in name or bool(cmdline and (cmdline[0].startswith("ray::") or "python" in os.path.basename(cmdline[0])))


def local_processes(pid: int | None) -> list[psutil.Process]:
    """The attempt's processes: its tree, and everything left in its session (Ray daemons and workers started by it)."""
    if not pid:
        return []
    found: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            found[process.pid] = process
    except psutil.Error:
        pass
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == pid:
                found.setdefault(process.pid, process)
        except (OSError, psutil.Error):
            continue
    return [p for p in found.values() if p.pid != os.getpid() and _is_python(p)][:MAX_PROCESSES]


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name)[:60] or "process"


def _dump_local(process: psutil.Process, stacks: Path, py_spy: str) -> Dump:
    try:
        name = process.cmdline()[0] if process.cmdline() and process.cmdline()[0].startswith("ray::") else process.name()
    except psutil.Error:
        name = "process"
    dump = Dump(process.pid, name)
    result = run([py_spy, "dump", "--nonblocking", "--pid", str(process.pid)], timeout=DUMP_TIMEOUT)
    if result.ok:
        path = stacks / f"{process.pid}-{_safe(name)}.txt"
        path.write_text(result.stdout)
        dump.file = str(path)
    else:
        dump.error = result.problem(DUMP_TIMEOUT) or "py-spy failed"
        if "Permission" in result.output or "ptrace" in result.output.lower():
            dump.error += " (py-spy needs ptrace: run as root or with CAP_SYS_PTRACE; in a container --cap-add SYS_PTRACE)"
    return dump


def _container_processes(container: str) -> list[tuple[int, str]]:
    result = run(["docker", "exec", container, "ps", "-eo", "pid=,args="], timeout=15)
    found = []
    for line in result.stdout.splitlines()[:2000]:
        pid, _, args = line.strip().partition(" ")
        number = int_or_none(pid, digits=10)  # ps output: a pid, or anything
        if number is not None and number > 0 and ("python" in args.split(" ")[0] or args.startswith("ray::")):
            found.append((number, args.split(" ")[0]))
    return found[:MAX_PROCESSES]


def _container_py_spy(container: str, problems: list[str]) -> str | None:
    """py-spy inside the container: its own, else a copy of ours (a static binary)."""
    if run(["docker", "exec", container, "py-spy", "--version"], timeout=15).ok:
        return "py-spy"
    ours = find_py_spy()
    if ours and run(["docker", "cp", ours, f"{container}:{CONTAINER_PY_SPY}"], timeout=30).ok:
        return CONTAINER_PY_SPY
    problems.append("py-spy is neither in the container nor could be copied in: pip install py-spy there")
    return None


def _dump_in_container(container: str, py_spy: str, pid: int, name: str, stacks: Path) -> Dump:
    dump = Dump(pid, name)
    result = run(["docker", "exec", container, py_spy, "dump", "--nonblocking", "--pid", str(pid)], timeout=DUMP_TIMEOUT)
    if result.ok:
        path = stacks / f"{pid}-{_safe(name)}.txt"
        path.write_text(result.stdout)
        dump.file = str(path)
    else:
        dump.error = (result.problem(DUMP_TIMEOUT) or "py-spy failed") + \
            (" (the container needs --cap-add SYS_PTRACE)" if "ermission" in result.output else "")
    return dump


def _session_logs(processes: list[psutil.Process]) -> list[Path]:
    """Ray worker logs of the run's own Ray session (found from its processes' arguments, never session_latest)."""
    dirs: set[Path] = set()
    for process in processes:
        try:
            for match in SESSION_ARG.finditer(" ".join(process.cmdline())):
                path = Path(match.group(1))
                dirs.add(path / "logs" if (path / "logs").is_dir() else path)
        except psutil.Error:
            continue
    logs: list[Path] = []
    for directory in dirs:
        if directory.is_dir():
            logs += [p for p in directory.glob("*") if p.is_file() and p.suffix in (".out", ".err", ".log")]
    return sorted(logs, key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_WORKER_LOGS]


def collect(record, reason: str, *, budget: float = BUDGET) -> Path:
    """Take the evidence now; returns the folder. Never raises for what it could not take: summary.json says it."""
    started = time.monotonic()
    folder = _folder(record)
    (folder / "stacks").mkdir()
    (folder / "logs").mkdir()
    problems: list[str] = []
    attempt = record.current
    handle = attempt.handle if attempt else Handle()
    here = handle.remote_cluster is None and handle.container is None  # the attempt's processes are on this host
    processes = local_processes(handle.pid) if here else []
    ray_address = None if handle.remote_cluster else own_ray_address(record)  # the run's own head, or None
    dumps = _take(record, handle, folder, processes, ray_address, problems, budget=budget, started=started)
    if attempt and attempt.log and Path(attempt.log).is_file():
        (folder / "logs" / f"attempt-{attempt.n}.log").write_text(_tail(Path(attempt.log)))
    worker_logs = _session_logs(processes)
    for path in worker_logs:
        try:
            (folder / "logs" / _safe(path.name)).write_text(_tail(path, 200))
        except OSError as exc:
            problems.append(f"{path}: {exc}")
    summary = {
        "run": record.id, "reason": reason, "time": time.time(), "step": record.step,
        "total_steps": record.total_steps, "attempt": attempt.n if attempt else None, "backend": record.backend,
        "stacks": [asdict(d) for d in sorted(dumps, key=lambda d: d.pid)],
        "worker_logs": [str(p) for p in worker_logs], "problems": problems,
        "ray_address": ray_address, "seconds": round(time.monotonic() - started, 2),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return folder


def _take(record, handle: Handle, folder: Path, processes: list[psutil.Process], ray_address: str | None,
          problems: list[str], *, budget: float, started: float) -> list[Dump]:
    """Every collection at once, within `budget` seconds; the stack dumps taken (the problems go to `problems`)."""
    pool = ThreadPoolExecutor(max_workers=6)
    dumps: list[Dump] = []
    try:
        futures = _stack_dumps(pool, handle, processes, folder / "stacks", problems)
        futures.append(pool.submit(_devices, record, handle, folder))
        futures.append(pool.submit(_ray_status, record, handle, folder, ray_address))
        futures.append(pool.submit(_backend_evidence, record, handle, folder))
        done, late = wait(futures, timeout=max(1.0, budget - (time.monotonic() - started)))
        for future in done:
            if future.exception() is not None:
                problems.append(f"a collection failed: {future.exception()}")
                continue
            value = future.result()
            if isinstance(value, Dump):
                dumps.append(value)
            elif isinstance(value, str):
                problems.append(value)
        if late:
            problems.append(f"{len(late)} collection(s) did not finish within {budget:g} s and were left out")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a hung probe must not hold the supervisor
    return dumps


def _stack_dumps(pool: ThreadPoolExecutor, handle: Handle, processes: list[psutil.Process], stacks: Path,
                 problems: list[str]) -> list[Future]:
    """py-spy of every Python process of the attempt, where they run: in its container, or on this host."""
    if handle.remote_cluster:
        problems.append("a Ray job on a cluster: no stack dumps from here; take them from the dashboard (Jobs -> "
                        "the job's actors -> Stack Trace) or `py-spy dump --nonblocking` / `ray stack` on each node")
        return []
    if handle.container:
        py_spy = _container_py_spy(handle.container, problems)
        return [pool.submit(_dump_in_container, handle.container, py_spy, pid, name, stacks)
                for pid, name in _container_processes(handle.container)] if py_spy else []
    py_spy = find_py_spy()
    if not py_spy:
        problems.append("py-spy not found: pip install py-spy")
    elif not processes:
        problems.append("no Python process of this attempt is running")
    else:
        return [pool.submit(_dump_local, p, stacks, py_spy) for p in processes]
    return []


def _devices(record, handle: Handle, folder: Path) -> str | None:
    from verl_deploy.views.devices import runner_for

    if handle.remote_cluster:
        return None
    runner = runner_for(record)
    argv = ["npu-smi", "info"] if record.spec.get("device") == "npu" else ["nvidia-smi"]
    result = runner.run(argv, timeout=20)
    (folder / "devices.txt").write_text(f"$ {' '.join(argv)} ({runner.where})\n{result.output}")
    return None if result.ok else f"devices: {result.problem(20)}"


def _backend_evidence(record, handle: Handle, folder: Path) -> str | None:
    """What only the run's backend can add (a Ray job's record on its job server)."""
    if record.current is None:
        return None
    try:
        backend = backend_for(record, with_spec=False)
    except UnknownBackend:  # a record rebuilt without its backend
        return None
    return backend.evidence(handle, folder)


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
    result = run(["ray", "status", "--address", address], timeout=20, env=rayauth.gcs_environment(mode))
    (folder / "ray-status.txt").write_text(f"$ ray status --address {address}\n{result.output}")
    return None
