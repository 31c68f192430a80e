"""Every port a test's Ray opens, free and private to it, so parallel tests and a user's own Ray never collide.

Ray's defaults are fixed (GCS 6379, dashboard 8265, client 10001, dashboard agent 52365) or drawn
from one shared range (workers 10002-19999): two clusters on one host fight over them. A test
passes all of them explicitly: single ports bound to 0 by the OS, and a worker range of ports
that were all free, picked at random in a band Ray does not use by default.
"""

from __future__ import annotations

import random
import socket

WORKER_PORTS = 40  # plenty for the stand-in trainer's few workers and Ray Jobs' supervisor actors


_GIVEN: set[int] = set()  # every port handed out in this process: the OS may offer a just-released one again


def free_port() -> int:
    """A port free now and never handed out before in this process (two of one node's components once got the
    same one, and Ray refused to start)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port
    raise RuntimeError("no fresh free port")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def worker_range(count: int = WORKER_PORTS) -> tuple[int, int]:
    """`count` consecutive ports that are all free now, somewhere in 20000-30999."""
    rng = random.SystemRandom()
    for _ in range(200):
        start = rng.randrange(20000, 31000 - count)
        if all(_free(port) for port in range(start, start + count)):
            return start, start + count - 1
    raise RuntimeError("no free range of worker ports")


def node_ports(head: bool) -> list[str]:
    """`ray start` options that pin every port of one node to a private free one."""
    low, high = worker_range()
    args = [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            f"--min-worker-port={low}", f"--max-worker-port={high}"]
    if head:
        args += [f"--ray-client-server-port={free_port()}"]
    return args


def kill_processes_naming(temp_dir: str) -> None:
    """Kill the processes whose command line names `temp_dir` (one test cluster's Ray) and their descendants,
    never this test's own process or its parents, and no other Ray on the host.

    Descendants too: the raylet's dashboard agent renames itself `ray::DashboardAgent` (its command line no longer
    names the temp dir); left behind when its raylet and GCS die, it spends the next 60 s at a full core in
    publish_error_to_driver against the dead GCS (Ray 2.60, ray/_private/process_watcher.py) -- 4 such agents
    were about 160 CPU-seconds of the suite."""
    import os

    import psutil

    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    victims: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["cmdline"]):
        try:
            if process.pid not in me and any(temp_dir in part for part in process.info["cmdline"] or []):
                victims[process.pid] = process
                victims.update((child.pid, child) for child in process.children(recursive=True))
        except psutil.Error:
            continue
    for pid in me:
        victims.pop(pid, None)
    doomed = list(victims.values())
    for process in doomed:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(doomed, timeout=10)


RAYLET_TIMED_OUT = "timed out during startup"  # ray/_private/node.py: the raylet missed its fixed 30 s wait


def start_ray_head(argv: list[str], env: dict, temp_dir: str, tries: int = 3):
    """Run a test's `ray start --head` (argv names `temp_dir`); when the raylet missed Ray's fixed 30 s registration
    wait on a machine loaded by the rest of the suite, kill what that try started and run it again (its ports and
    temp dir kept), as start_verl.sh does. The last try's CompletedProcess is returned."""
    import subprocess

    for attempt in range(1, tries + 1):
        started = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
        if started.returncode == 0 or attempt == tries or RAYLET_TIMED_OUT not in started.stderr:
            break
        kill_processes_naming(temp_dir)
    return started
