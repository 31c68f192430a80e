"""The detached process every backend starts, and how this tool tells it from any later process.

A training is started by a small host shell in its own session: `"$@" >> LOG 2>&1; echo $? > EXIT`.
So it survives the supervisor (even `kill -9`), its output lands in a host file the watcher
follows, and its exit status is kept for whoever asks later. Backends that hand the training to
a scheduler (Ray Jobs, Slurm, KubeRay) run a small pump this way that follows the job; the pump
of a scheduler writes the job's state to a small JSON file the supervisor reads through
`scheduler_state` (None where there is no scheduler).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from verl_deploy import boundedread
from verl_deploy.backends.handle import Handle

WRAPPER = '"$@" >>"$VD_LOG" 2>&1; code=$?; echo "$code" > "$VD_EXIT.tmp"; mv "$VD_EXIT.tmp" "$VD_EXIT"'


def start_detached(argv: list[str], attempt_dir: Path, *, cwd: Path | None = None, env: dict | None = None) -> Handle:
    """Run argv in a new session with output to attempt_dir/train.log and the exit code to attempt_dir/exit_code."""
    attempt_dir.mkdir(parents=True, exist_ok=True)
    log, exit_file = attempt_dir / "train.log", attempt_dir / "exit_code"
    log.touch()
    full_env = {**os.environ, **(env or {}), "VD_LOG": str(log), "VD_EXIT": str(exit_file)}
    process = subprocess.Popen(["bash", "-c", WRAPPER, "verl-deploy-run", *argv], cwd=cwd, env=full_env,
                               start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    handle = Handle(pid=process.pid, log=str(log), exit_file=str(exit_file), spawned=time.time())
    identity = process_identity(process.pid)
    if identity is not None:
        # the cmdline is what the session leader runs once exec'd (this instant it may still be our fork)
        handle.identity = {**identity, "cmdline": ["bash", "-c", WRAPPER, "verl-deploy-run", *argv]}
    return handle


def exit_code(handle: Handle) -> int | None:
    if not handle.exit_file:
        return None
    try:
        return int(boundedread.read_text(handle.exit_file, 64).strip())
    except (OSError, ValueError, TypeError):
        return None


def process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def process_identity(pid: int) -> dict | None:
    """What tells this process from a later one with the same pid: its start time (clock ticks since
    boot, /proc/PID/stat field 22), its process group (field 5) and its command line; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = [part.decode(errors="replace") for part in handle.read().split(b"\0")[:-1]]
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces and ')'
    try:
        return {"start_ticks": int(fields[19]), "pgid": int(fields[2]), "cmdline": cmdline}
    except (IndexError, ValueError):
        return None


def stranger(handle: Handle) -> str | None:
    """Why the process now at the handle's pid is not the one this tool started, or None (it is, or it is gone).

    A pid is reused once its process has ended: after the run's process died (kill -9, a reboot)
    another program of this user may hold it. Only the start time and process group recorded at
    start tell them apart; a handle without them (an older record) is matched on its `spawned` time.
    """
    pid = handle.pid
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        return f"its recorded pid {pid!r} is not a process id" if pid else None
    live = process_identity(pid)
    if live is None:
        return None
    recorded = handle.identity
    if isinstance(recorded, dict):
        if live["start_ticks"] == recorded.get("start_ticks") and live["pgid"] == recorded.get("pgid"):
            return None
    else:
        try:
            started = psutil.Process(pid).create_time()
        except psutil.Error:
            return None
        spawned = handle.spawned
        if isinstance(spawned, (int, float)) and abs(started - spawned) < 2.0 and live["pgid"] == pid:
            return None
    command = " ".join(live["cmdline"])[:80] or "?"
    return f"pid {pid} is now another process ({command!r}), not the one this run started"


def recorded_alive(handle: Handle) -> bool:
    """The process this tool started for the handle is still running (not a later one with its pid)."""
    return process_alive(handle.pid) and stranger(handle) is None


def stop_group(handle: Handle, grace: float = 10.0) -> str | None:
    """SIGTERM the process group this tool started, SIGKILL what is left after `grace` seconds.

    Nothing is signalled when the pid now belongs to another process (the reason is returned). While
    the leader is alive its identity is checked; once it has ended, the group id stays reserved by the
    kernel for as long as any member lives, so signalling the group reaches only members of ours.
    """
    pid = handle.pid
    if not pid:
        return None
    why = stranger(handle)
    if why is not None:
        return why
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return None
        except PermissionError:
            return None
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                return None
            time.sleep(0.05)
    return None


def _group_alive(pgid: int) -> bool:
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(process.info["pid"]) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False
