"""The backend interface (start, finished, alive, stop, check_stop, scheduler_state, extra_files) and the
detached process every backend uses.

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
from typing import Protocol

import psutil

from verl_deploy import boundedread

WRAPPER = '"$@" >>"$VD_LOG" 2>&1; code=$?; echo "$code" > "$VD_EXIT.tmp"; mv "$VD_EXIT.tmp" "$VD_EXIT"'


class Backend(Protocol):
    name: str

    def start(self, scripts_dir: Path, attempt_dir: Path) -> dict: ...

    def finished(self, handle: dict) -> int | None: ...

    def alive(self, handle: dict) -> bool: ...

    def stop(self, handle: dict) -> None: ...

    def check_stop(self, handle: dict) -> None: ...

    def scheduler_state(self, handle: dict) -> dict | None: ...

    def extra_files(self, plan, scripts_dir: Path) -> dict[str, str]: ...


class DetachedProcess:
    """`finished` and `alive` for backends whose attempt is a process started by `start_detached`."""

    def finished(self, handle: dict) -> int | None:
        return exit_code(handle)

    def scheduler_state(self, handle: dict) -> dict | None:
        """What the scheduler says of the attempt: {"scheduler", "state", "reason", "resubmit", "failure", ...}."""
        path = handle.get("scheduler_file")
        if not path:
            return None
        try:
            data = boundedread.read_json(path, 1 << 20)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def check_stop(self, handle: dict) -> None:
        """Raise (one line with the fix) when `stop` could not reach what runs the attempt; before anything is
        touched. A local process can always be stopped."""

    def extra_files(self, plan, scripts_dir: Path) -> dict[str, str]:
        """Files written beside the attempt's scripts (submit.sbatch, rayjob.yaml): {name: content}."""
        return {}

    def alive(self, handle: dict) -> bool:
        return process_alive(handle.get("pid")) and exit_code(handle) is None


def start_detached(argv: list[str], attempt_dir: Path, *, cwd: Path | None = None, env: dict | None = None) -> dict:
    """Run argv in a new session with output to attempt_dir/train.log and the exit code to attempt_dir/exit_code."""
    attempt_dir.mkdir(parents=True, exist_ok=True)
    log, exit_file = attempt_dir / "train.log", attempt_dir / "exit_code"
    log.touch()
    full_env = {**os.environ, **(env or {}), "VD_LOG": str(log), "VD_EXIT": str(exit_file)}
    process = subprocess.Popen(["bash", "-c", WRAPPER, "verl-deploy-run", *argv], cwd=cwd, env=full_env,
                               start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    return {"pid": process.pid, "log": str(log), "exit_file": str(exit_file), "spawned": time.time()}


def exit_code(handle: dict) -> int | None:
    try:
        return int(boundedread.read_text(handle["exit_file"], 64).strip())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_group(pid: int | None, grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after `grace` seconds."""
    if not pid:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(process.info["pid"]) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False
