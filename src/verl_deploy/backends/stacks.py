"""Stack dumps of an attempt's Python processes, where a backend can reach them: on this host, or in its container.

`py-spy dump --nonblocking` reads a process's memory without stopping it: nothing here pauses, signals or kills
the training. On this host the attempt's processes are its process tree and everything left in its session
(the Ray daemons and workers it started); in a container, every Python process `ps` lists there, dumped with the
container's py-spy or a copy of ours (a static binary). A backend whose training runs elsewhere (a scheduler's
nodes) says where to take them instead (Backend.evidence).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from verl_deploy.preflight.commands import run
from verl_deploy.textnumbers import int_or_none

DUMP_TIMEOUT = 20.0  # seconds per py-spy dump
MAX_PROCESSES = 48
MAX_WORKER_LOGS = 64
CONTAINER_PY_SPY = "/tmp/verl-deploy-py-spy"
SESSION_ARG = re.compile(r"--(?:session[-_]dir|temp[-_]dir|log[-_]dir)=(\S+)")


@dataclass
class Dump:
    pid: int
    name: str
    file: str | None = None
    error: str | None = None


@dataclass
class Taken:
    """What a backend added to a stall's evidence: stack dumps, Ray worker logs it can read, problems."""

    dumps: list[Dump] = field(default_factory=list)
    worker_logs: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def find_py_spy() -> str | None:
    """py-spy on PATH, else the one installed with verl-deploy (a dependency) beside this Python."""
    import sysconfig

    return shutil.which("py-spy") or shutil.which("py-spy", path=sysconfig.get_path("scripts"))


def file_part(name: str) -> str:
    """`name` as one short file-name component (a process or log name from elsewhere: no slash, no space)."""
    return re.sub(r"[^\w.-]+", "_", name)[:60] or "process"


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


def _dump(argv_prefix: list[str], pid: int, name: str, stacks: Path, ptrace_fix: str) -> Dump:
    dump = Dump(pid, name)
    result = run([*argv_prefix, "dump", "--nonblocking", "--pid", str(pid)], timeout=DUMP_TIMEOUT)
    if result.ok:
        path = stacks / f"{pid}-{file_part(name)}.txt"
        path.write_text(result.stdout)
        dump.file = str(path)
    else:
        dump.error = result.problem(DUMP_TIMEOUT) or "py-spy failed"
        if "ermission" in result.output or "ptrace" in result.output.lower():
            dump.error += f" ({ptrace_fix})"
    return dump


def _name(process: psutil.Process) -> str:
    try:
        cmdline = process.cmdline()
        return cmdline[0] if cmdline and cmdline[0].startswith("ray::") else process.name()
    except psutil.Error:
        return "process"


def _dump_all(jobs: list[tuple[list[str], int, str]], stacks: Path, deadline: float, ptrace_fix: str,
              taken: Taken) -> Taken:
    """Every dump at once, until `deadline` (time.monotonic()); the ones not done by then are left out, said so."""
    if not jobs:
        return taken
    pool = ThreadPoolExecutor(max_workers=6)
    try:
        futures = [pool.submit(_dump, prefix, pid, name, stacks, ptrace_fix) for prefix, pid, name in jobs]
        done, late = wait(futures, timeout=max(1.0, deadline - time.monotonic()))
        taken.dumps += [f.result() for f in done if f.exception() is None]
        taken.problems += [f"a stack dump failed: {f.exception()}" for f in done if f.exception() is not None]
        if late:
            taken.problems.append(f"{len(late)} stack dump(s) did not finish in time and were left out")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a hung py-spy must not hold the supervisor
    return taken


def host_stacks(pid: int | None, folder: Path, deadline: float) -> Taken:
    """py-spy of every Python process of the attempt on this host, and its Ray session's worker logs."""
    taken = Taken()
    processes = local_processes(pid)
    taken.worker_logs = session_logs(processes)
    py_spy = find_py_spy()
    if not py_spy:
        taken.problems.append("py-spy not found: pip install py-spy")
        return taken
    if not processes:
        taken.problems.append("no Python process of this attempt is running")
        return taken
    jobs = [([py_spy], p.pid, _name(p)) for p in processes]
    return _dump_all(jobs, folder / "stacks", deadline,
                     "py-spy needs ptrace: run as root or with CAP_SYS_PTRACE; in a container --cap-add SYS_PTRACE", taken)


def container_processes(container: str) -> list[tuple[int, str]]:
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


def container_stacks(container: str, folder: Path, deadline: float) -> Taken:
    """py-spy of every Python process in the run's container (`docker exec`)."""
    taken = Taken()
    py_spy = _container_py_spy(container, taken.problems)
    if py_spy is None:
        return taken
    jobs = [(["docker", "exec", container, py_spy], pid, name) for pid, name in container_processes(container)]
    if not jobs:
        taken.problems.append(f"no Python process is running in container {container}")
    return _dump_all(jobs, folder / "stacks", deadline, "the container needs --cap-add SYS_PTRACE", taken)


def session_logs(processes: list[psutil.Process]) -> list[Path]:
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
