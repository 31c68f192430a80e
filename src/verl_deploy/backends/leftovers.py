"""What an attempt left running after a crash, found by what was recorded when it started, never by name.

Three marks tell an attempt's processes from everyone else's, each written down at start:
- its environment: the wrapper (backends/process.py) runs the training with VD_LOG=<the attempt's own
  log path>, which every descendant inherits, also those that left the process group (`ray start`'s
  daemons, Ray workers, a vLLM/SGLang server, a process that called setsid);
- its Ray: the session directory and temp dir its start_verl.sh printed and the handle kept
  (backends/rayprocs.py): GCS, raylet, dashboard, workers name it on their command line;
- its process group, while its leader is the recorded one (start time and pgid, process.recorded_alive).

A process is ended only when one of those marks is its own. For each one freed: pid, command,
which mark, and the device files (NPU/GPU) it held.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import subprocess
from dataclasses import dataclass, field

import psutil

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.process import recorded_alive
from verl_deploy.backends.rayprocs import ray_processes, started_head, terminate

# the device files an accelerator process holds open (Ascend: /dev/davinciN, NVIDIA: /dev/nvidiaN)
DEVICE_FILES_ENV = "VERL_DEPLOY_DEVICE_FILES"  # a glob list (':'-separated) replacing the default one
DEVICE_FILES = "/dev/davinci[0-9]*:/dev/nvidia[0-9]*"


@dataclass
class Freed:
    pid: int
    command: str
    mark: str  # "environment", "ray session", "ray temp dir", "process group"
    node: str = "localhost"
    devices: list[str] = field(default_factory=list)
    ended: bool = True

    def as_dict(self) -> dict:
        return {"node": self.node, "pid": self.pid, "command": self.command, "mark": self.mark,
                "devices": self.devices, "ended": self.ended}


def device_patterns() -> list[str]:
    return [p for p in os.environ.get(DEVICE_FILES_ENV, DEVICE_FILES).split(":") if p]


def devices_held(process: psutil.Process, patterns: list[str]) -> list[str]:
    """The device files among the process's open files (the paths its fds point at)."""
    held = []
    try:
        names = os.listdir(f"/proc/{process.pid}/fd")
    except OSError:
        return []
    for name in names:
        try:
            target = os.readlink(f"/proc/{process.pid}/fd/{name}")
        except OSError:
            continue
        if any(fnmatch.fnmatch(target, pattern) for pattern in patterns) and target not in held:
            held.append(target)
    return sorted(held)


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return entry in handle.read().split(b"\0")
    except OSError:
        return False


def _protected() -> set[int]:
    """This process and its ancestors: never ours to end (a `clean` run from inside the training's shell)."""
    keep: set[int] = set()
    process: psutil.Process | None = psutil.Process()
    while process is not None:
        keep.add(process.pid)
        try:
            process = process.parent()
        except psutil.Error:
            break
    return keep


def local_leftovers(handle: Handle) -> list[tuple[psutil.Process, str]]:
    """The live processes on this host carrying one of the attempt's marks, with the mark."""
    found: dict[int, tuple[psutil.Process, str]] = {}
    keep = _protected()
    for marked in (_by_environment(handle.log), _by_ray(handle), _by_group(handle)):
        for process, mark in marked:
            if process.pid not in keep:
                found.setdefault(process.pid, (process, mark))
    return [entry for entry in found.values() if _running(entry[0])]


def _by_environment(log: str) -> list[tuple[psutil.Process, str]]:
    """Processes whose environment names the attempt's log (VD_LOG): every descendant of the wrapper."""
    if not log:
        return []
    entry = b"VD_LOG=" + os.fsencode(log)
    return [(process, "environment") for process in psutil.process_iter(["pid"]) if _environ_has(process.pid, entry)]


def _by_ray(handle: Handle) -> list[tuple[psutil.Process, str]]:
    """The processes of the Ray head its start_verl.sh started: by its session directory, then its temp dir."""
    head = started_head(handle.log) if handle.log else None
    session = head[1] if head else None
    found: list[tuple[psutil.Process, str]] = []
    if isinstance(session, str) and len(session) >= 8:
        found += [(process, "ray session") for process in ray_processes(session)]
    if isinstance(handle.ray_temp_dir, str) and len(handle.ray_temp_dir) >= 8:
        found += [(process, "ray temp dir") for process in _naming(handle.ray_temp_dir)]
    return found


def _by_group(handle: Handle) -> list[tuple[psutil.Process, str]]:
    """The process group, only while its recorded leader runs: once the leader and all members are gone the kernel
    may give the number to a stranger's new group (their descendants still carry the environment mark)."""
    pid = handle.pid
    if not (isinstance(pid, int) and pid > 1 and recorded_alive(handle)):
        return []
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(process.pid) == pid:
                found.append((process, "process group"))
        except (OSError, psutil.Error):
            continue
    return found


def _naming(path: str) -> list[psutil.Process]:
    """Processes whose command line names `path` as a directory (`--temp-dir=/tmp/vdr-1a2b3c4d`, `.../vdr-1a2b3c4d/...`)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            parts = process.info["cmdline"] or []
        except psutil.Error:
            continue
        if any(part == path or part.endswith("=" + path) or (path + "/") in part for part in parts):
            found.append(process)
    return found


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_local(handle: Handle, grace: float = 10.0) -> list[Freed]:
    """End the attempt's leftovers on this host (TERM, then KILL after `grace`); what was freed."""
    patterns = device_patterns()
    victims = local_leftovers(handle)
    freed = []
    for process, mark in victims:
        try:
            command = " ".join(process.cmdline())[:200]
        except psutil.Error:
            command = "?"
        freed.append(Freed(process.pid, command, mark, devices=devices_held(process, patterns)))
    processes = terminate([process for process, _ in victims], grace, kill_wait=3.0)
    left = {process.pid for process in processes}
    for entry in freed:
        entry.ended = entry.pid not in left
    return freed


def remote_script(marks: list[str], group_file: str | None = None) -> str:
    """A shell command (run on another node or in a container) ending the processes whose command line names one
    of `marks` (a Ray temp dir or session of ours) and, when `group_file` names the attempt's pid file, its group
    while the leader still runs in that folder. Prints `freed PID COMMAND` for each."""
    lines = ['me=$$; out=""']
    if marks:
        cases = "|".join(f'*{shlex.quote(m)}/*|*{shlex.quote(m)}" "*|*={shlex.quote(m)}' for m in marks)
        lines.append('for p in /proc/[0-9]*; do n="${p#/proc/}"; [ "$n" = "$me" ] && continue; '
                     'c=$(tr "\\0" " " 2>/dev/null < "$p/cmdline"); '
                     f'case "$c" in {cases}) out="$out $n"; echo "freed $n ${{c%% }}";; esac; done')
    if group_file:
        folder = shlex.quote(os.path.dirname(group_file))
        lines.append(f'g="$(cat {shlex.quote(group_file)} 2>/dev/null)"; case "$g" in ""|*[!0-9]*) g="";; esac; '
                     f'here="$(cd -- {folder} 2>/dev/null && pwd -P)"; '
                     'if [ -n "$g" ] && [ -n "$here" ] && [ "$(readlink /proc/$g/cwd 2>/dev/null)" = "$here" ]; then '
                     'for p in /proc/[0-9]*; do n="${p#/proc/}"; '
                     '[ "$(cut -d" " -f5 "$p/stat" 2>/dev/null)" = "$g" ] || continue; out="$out $n"; '
                     'echo "freed $n $(tr "\\0" " " < "$p/cmdline" 2>/dev/null)"; done; fi')
    lines.append('[ -n "$out" ] && kill -TERM $out 2>/dev/null; [ -n "$out" ] && sleep 3; '
                 '[ -n "$out" ] && kill -KILL $out 2>/dev/null; true')
    return "; ".join(lines)


def parse_freed(text: str, node: str, mark: str) -> list[Freed]:
    freed = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) >= 2 and parts[0] == "freed" and parts[1].isdigit():
            freed.append(Freed(int(parts[1]), (parts[2] if len(parts) > 2 else "").strip()[:200], mark, node=node))
    return freed


def _marks(handle: Handle) -> list[str]:
    head = started_head(handle.log) if handle.log else None
    marks = [head[1]] if head and head[1] else []
    if isinstance(handle.ray_temp_dir, str):
        marks.append(handle.ray_temp_dir)
    return [m for m in marks if len(m) >= 8]


def in_container(handle: Handle, notes: list[str]) -> list[Freed]:
    """Inside the attempt's container: its Ray (by the recorded marks) and its process group (by its pid file)."""
    container = str(handle.container)
    pid_file = f"{handle.remote}/pid" if handle.remote else None
    script = remote_script(_marks(handle), pid_file)
    try:
        done = subprocess.run(["docker", "exec", "--", container, "sh", "-c", script], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"container {container}: not reached ({exc})")
        return []
    if done.returncode != 0:
        notes.append(f"container {container}: {done.stderr.strip()[-200:] or f'docker exec exited {done.returncode}'}")
    return parse_freed(done.stdout, f"container {container}", "recorded ray / process group")


def on_worker(worker: dict, notes: list[str]) -> list[Freed]:
    """On another node of the run, over SSH: its Ray (by the temp dir it was given) and the worker itself."""
    from verl_deploy.backends.nodes import kill_if_ours, ssh

    host = str(worker.get("host"))
    marks = [m for m in [worker.get("ray_temp_dir")] if isinstance(m, str) and len(m) >= 8]
    script = remote_script(marks)
    if worker.get("container"):
        script = f"docker exec {shlex.quote(str(worker['container']))} sh -c {shlex.quote(script)}"
    reply = ssh(host, script, timeout=60)
    if not reply.ok and not reply.out:
        notes.append(f"{host}: not reached over SSH ({reply.err or 'no reason given'}); its leftovers are still there")
        return []
    if worker.get("pid") and str(worker["pid"]).isdigit() and not worker.get("container"):
        ssh(host, kill_if_ours(str(worker["pid"]), str(worker.get("directory") or "")), timeout=60)
    return parse_freed(reply.out, host, "ray temp dir")
