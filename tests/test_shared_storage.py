"""The shared-storage check of a multi-node run, over real SSH to two "nodes" of this machine: `worker1` sees
the same file system; `worker2` is an sshd in a mount namespace of its own with a tmpfs over the checkpoint
directory, so the same path there is a node-local disk. `check` says which, and `launch` refuses the local one
without --allow-local-checkpoints."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import FAKES, VERL_BIN, run_cli
from sshnodes import SSHD, start_nodes, stop_nodes
from test_ssh_nodes import this_host_ip
pytestmark = pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"),
                                reason="needs sshd, unshare and root (a mount namespace for the node-local disk)")


@pytest.fixture()
def nodes(tmp_path, npu_host):
    ckpts = npu_host["tmp"] / "ckpts"
    ckpts.mkdir()
    node_env = {"PATH": f"{FAKES}:/usr/bin:/bin", "FAKE_NPU_SMI": npu_host["env"]["FAKE_NPU_SMI"]}
    private = ["unshare", "--mount", "--propagation", "private", "sh", "-c",  # the same path, another disk
               f'mount -t tmpfs vd-local "{ckpts}" && exec "$@"', "node-local"]
    env, daemons = start_nodes(tmp_path / "ssh", {"worker1": {"env": node_env},
                                                  "worker2": {"env": node_env, "wrap": private}})
    yield {"env": {**npu_host["env"], **env}, "ckpts": ckpts}
    stop_nodes(daemons)


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
