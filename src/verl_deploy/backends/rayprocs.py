"""The Ray a run started, and only that one: its processes are found by the session directory.

`start_verl.sh` starts its Ray head with a temp dir of its own and prints the session directory
(`started this run's Ray head at ADDR (session DIR, ...)`); every Ray process of that head (GCS,
raylet, dashboard, agents, workers) carries that directory on its command line. Stopping it kills
exactly those processes, never a bare `ray stop` (which ends every Ray of the user on the host).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import psutil

from verl_deploy import boundedread

STARTED = re.compile(r"\[start_verl\] started this run's Ray head at (\S+) \(session (\S+), temp dir (\S+)\)")


def started_head(log: str | Path) -> tuple[str, str | None] | None:
    """(address, session dir) of the Ray head this attempt's start_verl.sh started, as it printed them;
    None when it started none (it reused a cluster, or has not got that far). Reads only the log's head."""
    try:
        head = boundedread.read_bytes(log, 200_000, head=True).decode("utf-8", errors="replace")
    except (OSError, boundedread.UnreadableFile):
        return None
    match = STARTED.search(head)
    if not match:
        return None
    return match.group(1), None if match.group(2) == "unknown" else match.group(2)


def started_session(log: str | Path) -> str | None:
    """The session dir of the Ray head the run's start_verl.sh started (None: it reused one, or none yet)."""
    head = started_head(log)
    return head[1] if head else None


def ray_processes(session: str) -> list[psutil.Process]:
    """Processes whose command line names this session directory (a path, so never a prefix of another's)."""
    if not session or len(session) < 8 or "session_" not in session:
        return []
    marks = (session + "/", session)
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            parts = process.info["cmdline"] or []
        except psutil.Error:
            continue
        if any(part == marks[1] or marks[0] in part or part.endswith("=" + marks[1]) for part in parts):
            found.append(process)
    # and their descendants: Ray renames its agents (`ray::DashboardAgent`), so their command line names no session
    seen = {process.pid for process in found}
    for process in list(found):
        try:
            children = process.children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            if child.pid not in seen:
                seen.add(child.pid)
                found.append(child)
    return found


def stop_session(session: str | None, grace: float = 10.0) -> int:
    """SIGTERM the session's processes, SIGKILL what is left after `grace`; returns how many there were."""
    if not session:
        return 0
    return len(terminate(ray_processes(session), grace))


def terminate(processes: list[psutil.Process], grace: float, kill_wait: float = 2.0) -> list[psutil.Process]:
    """TERM, then KILL what is left after `grace` seconds; the processes still alive after both."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in processes:
            try:
                process.send_signal(sig)
            except psutil.Error:
                pass
        _, processes = psutil.wait_procs(processes, timeout=grace if sig == signal.SIGTERM else kill_wait)
        if not processes:
            break
    return processes
