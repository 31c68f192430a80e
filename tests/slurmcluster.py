"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd from Debian's slurm-wlm.

Everything lives in one temporary directory: the configuration (reached through SLURM_CONF), the
munge key and socket, the state and spool directories, pid and log files. The ports are free
ports picked here, so it runs beside any other Slurm or test on the host. The node is CPU-only
and announces a fake count of devices as a count-only gres (`Gres=npu:8`, no device files):
enough for sbatch's `--gres=npu:8` to be scheduled as on an Ascend cluster. `stop()` ends the
three daemons it started, by their pids, never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rayports import free_port

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")


def available() -> str | None:
    """None when this host can run the cluster, else why not (the tests skip with it)."""
    missing = [d for d in (*DAEMONS, "/usr/bin/sbatch") if not os.access(d, os.X_OK)]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "slurmd needs root to start job steps as the submitting user"
    return None


@dataclass
class SlurmCluster:
    root: Path
    node: str
    partition: str = "debug"
    gres: str = "npu"
    devices: int = 8
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.root / "slurm.conf")}

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def stop(self) -> None:
        if self.pids.get("slurmctld"):  # end the jobs first: their slurmstepd outlive a stopped slurmd
            self.run("scancel", f"--partition={self.partition}")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.run("squeue", "-h").stdout.strip():
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.get(name)
            if not pid:
                continue
            for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 3.0)):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and _alive(pid):
                    time.sleep(0.1)
                if not _alive(pid):
                    break
        shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _read_pid(path: Path, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise RuntimeError(f"{path} was not written")


def start(devices: int = 8, gres: str = "npu", cpus: int = 2, node_name: str | None = None) -> SlurmCluster:
    """`node_name`: the node's NodeName when it is not this host's name (one that may not resolve, as sites
    write when names and addresses differ); slurmd is started as that node (-N) and reached at 127.0.0.1."""
    root = Path(tempfile.mkdtemp(prefix="vd-slurm-", dir="/tmp"))
    node = node_name or socket.gethostname()
    cluster = SlurmCluster(root=root, node=node, gres=gres, devices=devices)
    for sub in ("state", "spool", "munge", "log"):
        (root / sub).mkdir(mode=0o700)
    os.chmod(root, 0o755)
    try:
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket_path = root / "munge" / "munge.socket"
        subprocess.run(["/usr/sbin/munged", "--force", f"--socket={socket_path}", f"--key-file={key}",
                        f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'log' / 'munged.log'}",
                        f"--seed-file={root / 'munge' / 'munged.seed'}"], check=True, capture_output=True, timeout=30)
        cluster.pids["munged"] = _read_pid(root / "munge" / "munged.pid")
        memory = 2048
        (root / "slurm.conf").write_text("\n".join([
            "ClusterName=verldeploytest",
            f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "MinJobAge=600",
            "KillWait=5",
            f"GresTypes={gres}",
            f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} Gres={gres}:{devices} State=UNKNOWN",
            f"PartitionName={cluster.partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        (root / "gres.conf").write_text(f"NodeName={node} Name={gres} Count={devices}\n")
        env = {**os.environ, **cluster.env}
        subprocess.run(["/usr/sbin/slurmctld", "-i"], env=env, check=True, capture_output=True, timeout=60)
        cluster.pids["slurmctld"] = _read_pid(root / "slurmctld.pid")
        subprocess.run(["/usr/sbin/slurmd", *(["-N", node] if node_name else [])], env=env, check=True,
                       capture_output=True, timeout=60)
        cluster.pids["slurmd"] = _read_pid(root / "slurmd.pid")
        deadline = time.monotonic() + 60
        while True:
            state = cluster.run("sinfo", "-h", "-N", "-o", "%t").stdout.strip()
            if state in ("idle", "mix", "alloc"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the slurm node did not come up (state {state!r}): "
                                   + (root / "log" / "slurmd.log").read_text(errors="replace")[-1500:])
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def stop_ray(temp_dir: str) -> None:
    """`ray stop` for one test cluster: the Ray processes started with this temp dir, and no other."""
    from rayports import kill_processes_naming

    kill_processes_naming(temp_dir)


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "stop-ray" and sys.argv[2].startswith("/tmp/vds-"):
        stop_ray(sys.argv[2])
