"""Multi-node scripts on real Ray: the head waits until every node and device joined, then trains.

Two Ray nodes run on this machine (the head started by start_verl.sh itself, a worker joined with
VERL_DEPLOY_ROLE=worker), each with 8 NPU as a custom resource; RAY_START_ARGS keeps their ports
apart. Everything a test starts is killed at its end, found by its own Ray temp dir.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import has_shellcheck, run_cli, skip_module_without
from rayports import free_port, node_ports
from test_ray import STANDIN, proc_cmdlines, ray_env, stop_cluster, write_token

skip_module_without("ray")


@pytest.fixture(params=["disabled", "token"])
def two_node_scripts(npu_host, request):
    """Scripts for two nodes, generated with Ray token auth off, and on (the generating user's token in the
    private HOME's ~/.ray/auth_token: the scripts hand it to the nodes in ray_auth_token, nowhere else)."""
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    out = npu_host["tmp"] / "scripts"
    port = free_port()
    token = "vd-node-token-" + "7" * 18 if request.param == "token" else None
    if token:
        write_token(Path(npu_host["env"]["HOME"]) / ".ray" / "auth_token", token)
    result = run_cli("generate", "--output-dir", str(out), "--nnodes", "2", "--devices", "0-7", "--master-addr",
                     "127.0.0.1", "--run-dir", str(verl), "--ckpts-dir", str(npu_host["tmp"] / "ckpts"),
                     "--train-steps", "3", "--save-freq", "1", "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"),
                     "--config", str(_ray_port_config(npu_host["tmp"], port)), "--ray-auth", request.param,
                     env=npu_host["env"])
    assert result.returncode == 0, result.stderr
    temp_dir = tempfile.mkdtemp(prefix="vdn-", dir="/tmp")
    yield {"out": out, "temp_dir": temp_dir, "port": port, "token": token, "mode": request.param}
    stop_cluster(temp_dir)


def _ray_port_config(tmp: Path, port: int) -> Path:
    config = tmp / "ports.yaml"
    config.write_text(f"ray_port: {port}\n")
    return config


def node_env(temp_dir: str, role: str, **extra: str) -> dict:
    """A node's environment: no Ray token of its own (a private HOME, no RAY_AUTH_* set but what start_verl.sh sets)."""
    ports = " ".join(node_ports(head=role == "head"))
    head_only = " --include-dashboard=false" if role == "head" else ""
    env = {**ray_env(), "VERL_DEPLOY_ROLE": role, "STANDIN_STEP_SECONDS": "0.1", "STANDIN_RAY": "1",
           "RAY_START_ARGS": f"--num-cpus=1 --temp-dir={temp_dir} {ports}{head_only}", **extra}
    env.pop("RAY_AUTH_MODE")
    return env


def test_the_head_waits_for_the_worker_then_trains(two_node_scripts):
    out, temp_dir = two_node_scripts["out"], two_node_scripts["temp_dir"]
    if has_shellcheck():
        checked = subprocess.run(["shellcheck", str(out / "start_verl.sh")], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout
    head = subprocess.Popen(["bash", str(out / "start_verl.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=node_env(temp_dir, "head", WAIT_FOR_NODES_SECONDS="300"))
    time.sleep(8)  # the head is up and waiting: only 1 node, 8 NPU so far
    assert head.poll() is None
    worker_log = out.parent / "worker.out"  # read back when the head gives up: why the worker did not join
    with worker_log.open("w") as sink:
        worker = subprocess.Popen(["bash", str(out / "start_verl.sh")], stdout=sink, stderr=subprocess.STDOUT,
                                  env=node_env(temp_dir, "worker"))
    try:
        time.sleep(5)
        cmdlines = proc_cmdlines()  # both nodes' Ray processes are up
        output, _ = head.communicate(timeout=400)
    finally:
        worker.kill()
    assert head.returncode == 0, output[-3000:] + "\n--- the worker ---\n" + worker_log.read_text()[-3000:]
    assert "all 2 nodes and 16 NPU joined" in output
    assert output.index("all 2 nodes") < output.index("Total training steps: 3")
    assert "step:3 - " in output and "connected to the Ray cluster" in output  # the driver authenticated too
    handed = out / "ray_auth_token"
    token = two_node_scripts["token"]
    if token:  # the nodes had no token but the one the scripts handed over, in a 0600 file, on no command line
        assert handed.read_text().strip() == token and handed.stat().st_mode & 0o777 == 0o600
        assert token not in cmdlines and token not in output
        assert [p.name for p in out.iterdir() if p.is_file() and token in p.read_text()] == ["ray_auth_token"]
    else:
        assert not handed.exists()
    assert f"export RAY_AUTH_MODE={two_node_scripts['mode']}" in (out / "start_verl.sh").read_text()


def test_a_missing_node_times_out_with_the_numbers(two_node_scripts):
    out, temp_dir = two_node_scripts["out"], two_node_scripts["temp_dir"]
    started = time.monotonic()
    head = subprocess.run(["bash", str(out / "start_verl.sh")], capture_output=True, text=True, timeout=180,
                          env=node_env(temp_dir, "head", WAIT_FOR_NODES_SECONDS="6"))
    assert head.returncode == 3
    assert "waited 6 s for 2 nodes with 16 NPU; only 1 node(s) and 8 NPU joined" in head.stderr
    assert "VERL_DEPLOY_ROLE=worker bash start_verl.sh" in head.stderr
    assert "Total training steps" not in head.stdout and time.monotonic() - started < 120
