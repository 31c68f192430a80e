"""`launch --nodes HEAD,WORKER`: the worker brought up over real SSH (a real sshd on this machine).

The "worker node" is this machine reached through sshd under another name (an ssh_config alias),
so its Ray node needs its own ports (WORKER_RAY_START_ARGS). Skipped when sshd is not installed
(tests/install-services.sh installs openssh-server).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from conftest import FAKES, VERL_BIN, skip_module_without
from rayports import free_port, node_ports
from test_ray import STANDIN, stop_cluster

skip_module_without("ray")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
pytestmark = pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0, reason="needs sshd and root")


def this_host_ip() -> str:
    from verl_deploy.preflight.host import default_route_interface, interfaces

    found = interfaces()
    route = default_route_interface()
    name = route if route in found else next(n for n in found if n != "lo")
    return found[name][0]


@pytest.fixture()
def sshd(tmp_path, npu_host):
    """sshd on a free port accepting one generated key; ~/.ssh/config names it `worker1`."""
    keys = tmp_path / "ssh"
    keys.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host")], check=True)
    (keys / "authorized_keys").write_text((keys / "id.pub").read_text())
    port = free_port()
    path = f"{FAKES}:{Path(sys.executable).parent}:/usr/bin:/bin"
    (keys / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nPidFile {keys / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nStrictModes no\nPermitRootLogin prohibit-password\n"
        f"PasswordAuthentication no\nUsePAM no\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
        f"SetEnv PATH={Path(sys.executable).parent}:{FAKES}:/usr/bin:/bin FAKE_NPU_SMI={npu_host['env']['FAKE_NPU_SMI']} "
        f"RAY_USAGE_STATS_ENABLED=0 STANDIN_STEP_SECONDS=0.1\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    daemon = subprocess.Popen([SSHD, "-D", "-f", str(keys / "sshd_config"), "-e"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    home = Path(npu_host["env"]["HOME"])
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "config").write_text(
        f"Host worker1\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {keys / 'id'}\n"
        f"  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    os.chmod(home / ".ssh" / "config", 0o600)
    env = {"HOME": str(home), "VERL_DEPLOY_SSH_OPTIONS": f"-F {home / '.ssh' / 'config'}"}
    deadline = time.monotonic() + 20
    while subprocess.run(["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", "worker1", "true"],
                         capture_output=True, env={**os.environ, **env}).returncode != 0:
        assert time.monotonic() < deadline, "sshd did not come up"
        time.sleep(0.3)
    yield {"path": path, "env": env}
    daemon.terminate()
    daemon.wait(timeout=10)


def test_launch_brings_the_worker_up_over_ssh_and_the_head_waits_for_it(npu_host, sshd):
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    temp_head, temp_worker = tempfile.mkdtemp(prefix="vdh-", dir="/tmp"), tempfile.mkdtemp(prefix="vdw-", dir="/tmp")
    head_ip = this_host_ip()
    ports = lambda head=False: " ".join(node_ports(head=head))  # noqa: E731  (every Ray port private)
    env = {**os.environ, **npu_host["env"], "COLUMNS": "200", "RAY_USAGE_STATS_ENABLED": "0",
           "PATH": f"{Path(sys.executable).parent}:{FAKES}:/usr/bin:/bin", "STANDIN_STEP_SECONDS": "0.1",
           "RAY_START_ARGS": f"--num-cpus=1 --temp-dir={temp_head} --include-dashboard=false {ports(head=True)}",
           "WORKER_RAY_START_ARGS": f"--num-cpus=1 --temp-dir={temp_worker} {ports()}",
           "WAIT_FOR_NODES_SECONDS": "120", **sshd["env"]}
    config = npu_host["tmp"] / "ray.yaml"
    config.write_text(f"ray_port: {free_port()}\n")
    try:
        result = subprocess.run([*VERL_BIN, "launch", "--yes", "--skip-check", "--nodes", f"{head_ip},worker1",
                                 "--config", str(config), "--run-dir", str(verl), "--ckpts-dir", str(npu_host["tmp"] / "ckpts"),
                                 "--train-steps", "3", "--save-freq", "1", "--backend", "local", "--follow", "--json",
                                 "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"),
                                 "--train-file", str(npu_host["root"] / "data" / "dapo-math-17k.parquet"),
                                 "--test-file", str(npu_host["root"] / "data" / "aime-2024.parquet")],
                                capture_output=True, text=True, env=env, timeout=400)
        final = json.loads(result.stdout)
        assert "log" in final, result.stdout[-2000:]
        log = Path(final["log"]).read_text()
        assert final["state"] == "succeeded", result.stderr[-2000:] + log[-2000:]
        assert "all 2 nodes and 16 NPU joined" in log and final["step"] == 3
        record = json.loads((Path(final["directory"]) / "run.json").read_text())
        worker = record["attempts"][0]["handle"]["workers"][0]
        assert worker["host"] == "worker1" and worker["directory"].endswith("attempt-1/scripts")
        assert record["spec"]["nnodes"] == 2 and record["spec"]["master_addr"] == head_ip
        worker_log = Path(worker["directory"]) / "worker.log"  # same machine: the copy is visible here too
        assert "joining the Ray head" in worker_log.read_text()
    finally:
        stop_cluster(temp_head)
        stop_cluster(temp_worker)
        ours = str(npu_host["tmp"])  # only this test's scripts: other tests run start_verl.sh at the same time
        for process in psutil.process_iter(["cmdline", "cwd"]):
            cmdline = process.info["cmdline"] or []
            if any("start_verl.sh" in part for part in cmdline) and (
                    (process.info["cwd"] or "").startswith(ours) or any(ours in part for part in cmdline)):
                process.kill()


def test_an_unreachable_node_is_refused_before_anything_starts(npu_host, sshd):
    result = subprocess.run([*VERL_BIN, "launch", "--yes", "--skip-check", "--nodes", f"{this_host_ip()},nosuchnode.invalid",
                             "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B")],
                            capture_output=True, text=True, env={**os.environ, **npu_host["env"], **sshd["env"]},
                            timeout=120)
    assert result.returncode == 1
    assert "nosuchnode.invalid does not answer over SSH" in " ".join(result.stderr.split())
    assert not list((Path(npu_host["env"]["VERL_DEPLOY_STATE_DIR"]) / "runs").glob("*"))
