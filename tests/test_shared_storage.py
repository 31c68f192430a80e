"""The shared-storage check of a multi-node run, over real SSH to two "nodes" of this machine: `worker1` sees
the same file system; `worker2` is an sshd in a mount namespace of its own with a tmpfs over the checkpoint
directory, so the same path there is a node-local disk. `check` says which, and `launch` refuses the local one
without --allow-local-checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FAKES, VERL_BIN, run_cli
from rayports import free_port
from test_ssh_nodes import this_host_ip

SSHD = "/usr/sbin/sshd"
pytestmark = pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"),
                                reason="needs sshd, unshare and root (a mount namespace for the node-local disk)")


@pytest.fixture()
def nodes(tmp_path, npu_host):
    keys = tmp_path / "ssh"
    keys.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host")], check=True)
    (keys / "authorized_keys").write_text((keys / "id.pub").read_text())
    ckpts = npu_host["tmp"] / "ckpts"
    ckpts.mkdir()
    Path("/run/sshd").mkdir(exist_ok=True)
    daemons, config = [], ""
    for name, private in (("worker1", False), ("worker2", True)):
        port = free_port()
        conf = keys / f"{name}.conf"
        conf.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nPidFile {keys / name}.pid\n"
                        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nStrictModes no\nPermitRootLogin prohibit-password\n"
                        f"PasswordAuthentication no\nUsePAM no\nSetEnv PATH={FAKES}:/usr/bin:/bin "
                        f"FAKE_NPU_SMI={npu_host['env']['FAKE_NPU_SMI']}\n")
        argv = [SSHD, "-D", "-f", str(conf), "-e"]
        if private:  # the same path, another disk: a tmpfs only this sshd's namespace sees
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f'mount -t tmpfs vd-local "{ckpts}" && exec "$@"', "node-local", *argv]
        daemons.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        config += (f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {keys / 'id'}\n"
                   "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    ssh_config = keys / "config"
    ssh_config.write_text(config)
    env = {"VERL_DEPLOY_SSH_OPTIONS": f"-F {ssh_config}"}
    for name in ("worker1", "worker2"):
        deadline = time.monotonic() + 20
        while subprocess.run(["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", name, "true"],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, f"sshd {name} did not come up"
            time.sleep(0.3)
    yield {"env": {**npu_host["env"], **env}, "ckpts": ckpts}
    for daemon in daemons:
        daemon.terminate()
        daemon.wait(timeout=10)


def _storage(nodes, *extra):
    result = run_cli("check", "--json", "--no-save", "--no-verify", "--search-root", str(nodes["ckpts"].parent / "mnt"),
                     "--ckpts-dir", str(nodes["ckpts"]), *extra, env=nodes["env"])
    return result, json.loads(result.stdout)["areas"]["storage"]


def test_check_tells_a_shared_checkpoint_directory_from_a_node_local_one(nodes):
    _, shared = _storage(nodes, "--nodes", "127.0.0.1,worker1")
    assert shared["status"] == "ok" and shared["data"]["shared_with"] == ["worker1"]
    result, local = _storage(nodes, "--nodes", "127.0.0.1,worker1,worker2")
    assert result.returncode == 1 and local["status"] == "error"
    assert local["data"] == {"ckpts_dir": str(nodes["ckpts"]), "shared_with": ["worker1"], "not_shared_with": ["worker2"]}
    row = local["rows"][0]
    assert "is not seen on worker2" in row["value"] and "OOM ladder" in row["value"] and "resum" in row["value"]
    assert "--allow-local-checkpoints" in row["fix"]
    _, allowed = _storage(nodes, "--nodes", "127.0.0.1,worker2", "--allow-local-checkpoints")
    assert allowed["status"] == "warning"
    assert not list(nodes["ckpts"].glob(".verl-deploy-shared-*"))  # the token file is removed
    # a checkpoint directory that did not exist yet is not left behind by the check (only the launch makes it)
    fresh = nodes["ckpts"] / "not-yet" / "run"
    result = run_cli("check", "--json", "--no-save", "--no-verify", "--search-root", str(nodes["ckpts"].parent / "mnt"),
                     "--ckpts-dir", str(fresh), "--nodes", "127.0.0.1,worker1", env=nodes["env"])
    assert json.loads(result.stdout)["areas"]["storage"]["data"]["shared_with"] == ["worker1"]
    assert not (nodes["ckpts"] / "not-yet").exists()


def test_launch_refuses_node_local_checkpoints_before_anything_starts(nodes, npu_host):
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    (verl / "recipe" / "dapo" / "main_dapo.py").write_text("")
    result = subprocess.run([*VERL_BIN, "launch", "--yes", "--skip-check", "--no-verify", "--nodes", f"{this_host_ip()},worker2",
                             "--run-dir", str(verl), "--ckpts-dir", str(nodes["ckpts"]), "--backend", "local", "--json",
                             "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"),
                             "--train-file", str(npu_host["root"] / "data" / "dapo-math-17k.parquet"),
                             "--test-file", str(npu_host["root"] / "data" / "aime-2024.parquet")],
                            capture_output=True, text=True, env={**os.environ, **nodes["env"], "COLUMNS": "200"},
                            timeout=240)
    assert result.returncode == 1, result.stdout[-2000:]
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["field"] == "ckpts_dir" and "not shared" in finding["message"], finding
    assert "--allow-local-checkpoints" in finding["fix"] and "Traceback" not in result.stderr
    runs = json.loads(run_cli("runs", "--json", env=nodes["env"]).stdout)["runs"]
    assert runs == []  # nothing was started or recorded
