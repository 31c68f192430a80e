"""`verl-deploy clean RUN`: after a crash, end what the run left running on every node, and say what was freed.

Every attempt of the run is visited (a retry's crash can leave the earlier attempt's Ray too). On
this host the attempt's processes are found by the marks recorded at start (backends/leftovers.py:
the VD_LOG environment entry naming the attempt's log, its Ray session and temp dir, its checked
process group); inside its container and on the other nodes (over the same SSH the launch used) by
the Ray temp dir and session recorded for them and the attempt's pid file. Nothing is found by name.
A run still supervised is refused (`stop` ends it); one whose supervisor is gone is marked stopped first,
so a supervisor started later does not retry it.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field

from verl_deploy.backends.leftovers import Freed, end_local, parse_freed, remote_script
from verl_deploy.backends.rayprocs import started_head
from verl_deploy.runs.record import TERMINAL, RunRecord

SCHEDULED = ("ray", "slurm", "kuberay")  # the scheduler owns the processes: `stop` asks it


class CleanRefused(Exception):
    """One line: why nothing was touched, with the fix."""


@dataclass
class CleanResult:
    run: str
    freed: list[Freed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        devices = sorted({f"{f.node}:{d}" for f in self.freed for d in f.devices})
        return {"run": self.run, "freed": [f.as_dict() for f in self.freed], "devices_freed": devices,
                "still_running": [f.as_dict() for f in self.freed if not f.ended], "notes": self.notes}


def clean_run(record: RunRecord, *, grace: float = 10.0) -> CleanResult:
    from verl_deploy.runs.control import supervisor_alive

    if record.state not in TERMINAL and supervisor_alive(record):
        raise CleanRefused(f"run {record.id} is {record.state} and supervised (pid {record.supervisor_pid}); "
                           f"`verl-deploy stop {record.id}` ends it, then `verl-deploy clean {record.id}`")
    result = CleanResult(record.id)
    if record.state not in TERMINAL:  # crashed with its supervisor: no later supervisor may retry it
        said = record.state
        (record.directory / "stop").touch()
        record.state = "stopped"
        record.save()
        result.notes.append(f"the record said {said} with no supervisor: marked stopped")
    if record.backend in SCHEDULED:
        result.notes.append(f"the {record.backend} scheduler runs this run's processes: `verl-deploy stop {record.id}` "
                            "asks it to end them")
        return result
    for attempt in reversed(record.attempts):
        handle = attempt.handle
        result.freed += end_local(handle, grace)
        if handle.get("container"):
            result.freed += _in_container(handle, result.notes)
        for worker in handle.get("workers") or []:
            result.freed += _on_worker(worker, result.notes)
    return result


def _marks(handle: dict) -> list[str]:
    head = started_head(handle.get("log") or "") if handle.get("log") else None
    marks = [head[1]] if head and head[1] else []
    if isinstance(handle.get("ray_temp_dir"), str):
        marks.append(handle["ray_temp_dir"])
    return [m for m in marks if len(m) >= 8]


def _in_container(handle: dict, notes: list[str]) -> list[Freed]:
    container = str(handle["container"])
    pid_file = f"{handle['remote']}/pid" if handle.get("remote") else None
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


def _on_worker(worker: dict, notes: list[str]) -> list[Freed]:
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
