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

from conftest import has_shellcheck, run_cli
from rayports import free_port, node_ports
from test_ray import STANDIN, ray_env, stop_cluster

pytest.importorskip("ray")


@pytest.fixture()
def two_node_scripts(npu_host):
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    out = npu_host["tmp"] / "scripts"
    port = free_port()
    result = run_cli("generate", "--output-dir", str(out), "--nnodes", "2", "--devices", "0-7", "--master-addr",
                     "127.0.0.1", "--run-dir", str(verl), "--ckpts-dir", str(npu_host["tmp"] / "ckpts"),
                     "--train-steps", "3", "--save-freq", "1", "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"),
                     "--config", str(_ray_port_config(npu_host["tmp"], port)), env=npu_host["env"])
    assert result.returncode == 0, result.stderr
    temp_dir = tempfile.mkdtemp(prefix="vdn-", dir="/tmp")
    yield {"out": out, "temp_dir": temp_dir, "port": port}
    stop_cluster(temp_dir)


def _ray_port_config(tmp: Path, port: int) -> Path:
    config = tmp / "ports.yaml"
    config.write_text(f"ray_port: {port}\n")
    return config


def node_env(temp_dir: str, role: str, **extra: str) -> dict:
    ports = " ".join(node_ports(head=role == "head"))
    head_only = " --include-dashboard=false" if role == "head" else ""
    return {**ray_env(), "VERL_DEPLOY_ROLE": role, "STANDIN_STEP_SECONDS": "0.1",
            "RAY_START_ARGS": f"--num-cpus=1 --temp-dir={temp_dir} {ports}{head_only}", **extra}


def test_the_head_waits_for_the_worker_then_trains(two_node_scripts):
    out, temp_dir = two_node_scripts["out"], two_node_scripts["temp_dir"]
    if has_shellcheck():
        checked = subprocess.run(["shellcheck", str(out / "start_verl.sh")], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout
    head = subprocess.Popen(["bash", str(out / "start_verl.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=node_env(temp_dir, "head", WAIT_FOR_NODES_SECONDS="120"))
    time.sleep(8)  # the head is up and waiting: only 1 node, 8 NPU so far
    assert head.poll() is None
    worker = subprocess.Popen(["bash", str(out / "start_verl.sh")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=node_env(temp_dir, "worker"))
    try:
        output, _ = head.communicate(timeout=180)
    finally:
        worker.kill()
    assert head.returncode == 0, output[-3000:]
    assert "all 2 nodes and 16 NPU joined" in output
    assert output.index("all 2 nodes") < output.index("Total training steps: 3")
    assert "step:3 - " in output


def test_a_missing_node_times_out_with_the_numbers(two_node_scripts):
    out, temp_dir = two_node_scripts["out"], two_node_scripts["temp_dir"]
    started = time.monotonic()
    head = subprocess.run(["bash", str(out / "start_verl.sh")], capture_output=True, text=True, timeout=180,
                          env=node_env(temp_dir, "head", WAIT_FOR_NODES_SECONDS="6"))
    assert head.returncode == 3
    assert "waited 6 s for 2 nodes with 16 NPU; only 1 node(s) and 8 NPU joined" in head.stderr
    assert "VERL_DEPLOY_ROLE=worker bash start_verl.sh" in head.stderr
    assert "Total training steps" not in head.stdout and time.monotonic() - started < 120
