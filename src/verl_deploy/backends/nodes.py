"""The other nodes of a multi-node run, reached over SSH with the user's own config and keys.

BatchMode: a key or an agent must let us in; nothing ever asks for or stores a password. Each
worker gets the attempt's scripts at the same path and runs `VERL_DEPLOY_ROLE=worker bash
start_verl.sh` (inside its container when the run uses one), which waits for the head and joins
it with the node's devices. The head's start_verl.sh waits until every node has joined.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass

from verl_deploy.findings import Finding, error
from verl_deploy.spec import RunSpec

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
# extra ssh/scp options, e.g. "-F /path/to/ssh_config" (ssh reads ~/.ssh/config of the passwd home, not $HOME)
EXTRA_OPTIONS_ENV = "VERL_DEPLOY_SSH_OPTIONS"


def ssh_options() -> list[str]:
    return SSH_OPTIONS + shlex.split(os.environ.get(EXTRA_OPTIONS_ENV, ""))
# nodes that share a host (tests, or several containers on one machine) need their own Ray ports
WORKER_ARGS_ENV = "WORKER_RAY_START_ARGS"


class NodeError(Exception):
    """One line naming the node."""


@dataclass(frozen=True)
class Reply:
    ok: bool
    out: str
    err: str


def ssh(host: str, command: str, timeout: float = 120) -> Reply:
    try:
        done = subprocess.run(["ssh", *ssh_options(), "--", host, command], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Reply(False, "", f"no answer within {timeout:g} s")
    return Reply(done.returncode == 0, done.stdout, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "")


def check_nodes(spec: RunSpec) -> list[Finding]:
    """Every worker answers over SSH, sees the model and data paths, and has the devices the layout needs."""
    from verl_deploy.preflight.devices import parse_npu_smi, parse_nvidia_smi

    findings: list[Finding] = []
    tool = "npu-smi info" if spec.device == "npu" else "nvidia-smi"
    paths = " ".join(shlex.quote(p) for p in (spec.model_path, spec.train_file, spec.test_file))
    for host in spec.nodes[1:]:
        reply = ssh(host, f"for p in {paths}; do [ -e \"$p\" ] || echo \"missing $p\"; done; {tool}", timeout=60)
        if not reply.ok and not reply.out:
            findings.append(error("nodes", f"{host} does not answer over SSH: {reply.err or 'no reason given'}",
                                  f"make `ssh -o BatchMode=yes {host} true` work (keys or an agent; no passwords)"))
            continue
        missing = [line[8:] for line in reply.out.splitlines() if line.startswith("missing ")]
        if missing:
            findings.append(error("nodes", f"{host} does not see {', '.join(missing)}",
                                  "put model and data on storage every node mounts at the same path"))
        table = (parse_npu_smi if spec.device == "npu" else parse_nvidia_smi)(reply.out)
        have = {d.id for d in table.devices}
        if not have:
            findings.append(error("nodes", f"{host}: `{tool}` shows no device", "check the node's driver"))
        elif not set(spec.devices) <= have:
            findings.append(error("nodes", f"{host} has devices {sorted(have)}, the layout needs {spec.devices} on "
                                           f"every node", "use the same devices on every node (--devices)"))
    return findings


def start_workers(spec: RunSpec, scripts_dir: str) -> list[dict]:
    """Copy the scripts to every worker and start its Ray node in the background; returns what to stop later."""
    import secrets

    workers = []
    quoted = shlex.quote(scripts_dir)
    extra = os.environ.get(WORKER_ARGS_ENV, "")
    temp_dir = f"/tmp/vdr-{secrets.token_hex(4)}"  # the worker's Ray is found (and stopped) by this, alone
    env = f"VERL_DEPLOY_ROLE=worker VERL_DEPLOY_RAY_TEMP_DIR={temp_dir} RAY_START_ARGS={shlex.quote(extra)}"
    for host in spec.nodes[1:]:
        made = ssh(host, f"mkdir -p -- {quoted}")
        if not made.ok:
            raise NodeError(f"{host}: cannot create {scripts_dir}: {made.err}")
        copied = subprocess.run(["scp", "-q", *ssh_options(), "-r", "--", f"{scripts_dir}/.", f"{host}:{scripts_dir}/"],
                                capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        if copied.returncode != 0:
            raise NodeError(f"{host}: copying the scripts failed: {copied.stderr.strip()[-200:]}")
        if spec.container:
            name = shlex.quote(spec.container)
            command = (f"docker cp -- {quoted} {name}:{quoted} && docker exec -d "
                       f"-e VERL_DEPLOY_ROLE=worker -e VERL_DEPLOY_RAY_TEMP_DIR={temp_dir} "
                       f"-e RAY_START_ARGS={shlex.quote(extra)} -- {name} "
                       f"bash {quoted}/start_verl.sh && echo container")
        else:
            command = (f"cd -- {quoted} && {{ nohup env {env} bash start_verl.sh > worker.log 2>&1 < /dev/null & "
                       f"echo $!; }}")
        started = ssh(host, command)
        if not started.ok:
            raise NodeError(f"{host}: starting the worker failed: {started.err}")
        workers.append({"host": host, "pid": started.out.strip().splitlines()[-1] if started.out.strip() else None,
                        "directory": scripts_dir, "container": spec.container,
                        "ray_temp_dir": None if "--temp-dir=" in extra else temp_dir})
    return workers


def kill_if_ours(pid: str, directory: str) -> str:
    """A shell command ending the worker at `pid` only while it is ours: started in our scripts folder.

    Once the worker has ended its pid may belong to any later process of the user on that node;
    that one's working directory is not this attempt's scripts folder, so it is left alone.
    """
    # the folder as the kernel names a cwd: symlinks resolved (pwd -P)
    real = f'"$(cd -- {shlex.quote(directory)} 2>/dev/null && pwd -P)"'
    same = f'[ -n {real} ] && [ "$(readlink /proc/{pid}/cwd 2>/dev/null)" = {real} ]'
    return f"{same} && kill {pid} 2>/dev/null; sleep 1; {same} && kill -9 {pid} 2>/dev/null; true"


def kill_marked(mark: str) -> str:
    """A shell command ending the processes whose command line names `mark` (a Ray temp dir of ours)."""
    quoted = shlex.quote(mark)
    one = (f'for p in /proc/[0-9]*; do [ "${{p#/proc/}}" = "$$" ] && continue; '
           f'c=$(tr "\\0" " " 2>/dev/null < "$p/cmdline"); '
           f'case "$c" in *{quoted}/*|*{quoted}" "*) kill -SIG "${{p#/proc/}}" 2>/dev/null;; esac; done')
    left = one.replace("kill -SIG", "kill -0").replace(" 2>/dev/null;;", " 2>/dev/null && alive=1;;")
    # POSIX sh (it also runs under `docker exec ... sh -c`): the clock from date, not bash's SECONDS
    wait = (f'end=$(($(date +%s) + 2)); while [ "$(date +%s)" -lt "$end" ]; do alive=0; {left}; '
            f'[ "$alive" = 0 ] && break; sleep 0.1; done')
    return f"{one.replace('SIG', 'TERM')}; {wait}; {one.replace('SIG', 'KILL')}; true"  # up to 2 s, then KILL


def stop_workers(workers: list[dict]) -> None:
    """Each worker's Ray node, found by the temp dir this run gave it: never a bare `ray stop` on a shared node."""
    for worker in workers or []:
        mark = worker.get("ray_temp_dir")
        if worker.get("container"):
            if mark:
                ssh(worker["host"], f"docker exec {shlex.quote(worker['container'])} sh -c {shlex.quote(kill_marked(mark))}",
                    timeout=60)
            continue
        if worker.get("pid") and str(worker["pid"]).isdigit():
            ssh(worker["host"], kill_if_ours(str(worker["pid"]), str(worker.get("directory") or "")), timeout=60)
        if mark:
            ssh(worker["host"], kill_marked(mark), timeout=60)
