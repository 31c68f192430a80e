"""Two real Ray clusters on one host: a run starts, uses and stops only its own.

A "foreign" cluster (someone else's, started here by the test) holds the run's Ray port. The run
must not reuse it unless asked (--reuse-ray), must start its own head on a free port, and `stop`
must end exactly its own Ray processes (found by their session directory), never a bare
`ray stop`: the foreign cluster keeps running. Every port is private (tests/rayports.py).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import VERL_BIN, child_env, run_cli, skip_module_without
from rayports import free_port, node_ports, start_ray_head
from test_launch import STANDIN, fake_torch_npu
from test_ray import RAY_BIN, files_holding, proc_cmdlines, ray_env, stop_cluster, write_token

skip_module_without("ray")


def _up(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(params=["token", "disabled"])
def auth(request, npu_host):
    """The Ray token authentication mode this test runs in: with `token`, this user's token is in the private
    HOME's ~/.ray/auth_token (where Ray looks by default) and RAY_AUTH_MODE=token is set explicitly."""
    import secrets as random_secrets

    token = random_secrets.token_hex(16) if request.param == "token" else None
    if token:
        write_token(Path(npu_host["env"]["HOME"]) / ".ray" / "auth_token", token)
    return {"mode": request.param, "token": token}


@pytest.fixture()
def foreign(tmp_path, auth):
    """Someone else's Ray on the run's port, in the same auth mode (and with the same user's token)."""
    temp_dir = tempfile.mkdtemp(prefix="vdf-", dir="/tmp")
    port = free_port()
    token_path = write_token(Path(temp_dir) / "token", auth["token"]) if auth["token"] else None
    started = start_ray_head([RAY_BIN, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                              "--include-dashboard=false", "--num-cpus=1", f"--temp-dir={temp_dir}",
                              *node_ports(head=True), "--disable-usage-stats"], ray_env(auth["mode"], token_path), temp_dir)
    assert started.returncode == 0, started.stderr[-2000:]
    yield {"port": port, "temp_dir": temp_dir, "auth": auth}
    stop_cluster(temp_dir)


def _foreign_alive(foreign) -> bool:
    from verl_deploy.backends.rayprocs import ray_processes

    session = os.path.realpath(os.path.join(foreign["temp_dir"], "session_latest"))
    return _up(foreign["port"]) and len(ray_processes(session)) >= 2


def _launch(npu_host, foreign, *extra, env=None):
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True, exist_ok=True)
    (verl / "recipe" / "dapo" / "main_dapo.py").write_text(STANDIN.read_text())
    config = npu_host["tmp"] / "port.yaml"
    config.write_text(f"ray_port: {foreign['port']}\n")
    ray_args = " ".join(["--include-dashboard=false", "--num-cpus=1", *node_ports(head=True)])
    full = {**os.environ, **npu_host["env"], "PATH": f"{Path(sys.executable).parent}:{Path(RAY_BIN).parent}:/usr/bin:/bin",
            "RAY_START_ARGS": ray_args, "RAY_USAGE_STATS_ENABLED": "0", "STANDIN_STEP_SECONDS": "0.3",
            "RAY_AUTH_MODE": foreign["auth"]["mode"], "STANDIN_RAY": "1",  # the driver connects, as verl's does
            "PYTHONPATH": str(fake_torch_npu(npu_host["tmp"])), "COLUMNS": "200", **(env or {})}
    full = child_env(full)
    args = ["launch", "--yes", "--skip-check", "--backend", "local", "--run-dir", str(verl), "--config", str(config),
            "--master-addr", "127.0.0.1", "--ckpts-dir", str(npu_host["tmp"] / f"ckpts-{len(extra)}"),
            "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"), "--train-steps", "8", "--json", *extra]
    result = subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=full, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), full


def _wait_in_log(run, pattern, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = Path(run["log"]).read_text(errors="replace")
        match = re.search(pattern, text)
        if match:
            return match
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} not in the log:\n{text[-3000:]}")


def test_a_run_starts_its_own_ray_beside_a_foreign_one_and_stopping_it_leaves_the_other(npu_host, foreign):
    from verl_deploy.backends.rayprocs import ray_processes

    run, env = _launch(npu_host, foreign, env={"STANDIN_FAIL": "hang", "STANDIN_FAIL_STEP": "3"})
    assert "taken by something this run did not start" in _wait_in_log(run, r"port \d+ is taken[^\n]*").group(0)
    started = _wait_in_log(run, r"started this run's Ray head at 127\.0\.0\.1:(\d+) \(session (\S+),")
    own_port, session = int(started.group(1)), started.group(2)
    assert own_port != foreign["port"]
    _wait_in_log(run, r"step:2 - ")
    assert "connected to the Ray cluster" in Path(run["log"]).read_text()  # the driver authenticated (token mode)
    ours = ray_processes(session)  # GCS, raylet, ... and their renamed children (ray::DashboardAgent, workers)
    assert len(ours) >= 3 and _foreign_alive(foreign)
    plan = json.loads((Path(run["log"]).parent / "scripts" / "plan.json").read_text())
    assert plan["spec"]["ray_auth"] == foreign["auth"]["mode"] and plan["sources"]["ray_auth"] == "env RAY_AUTH_MODE"
    shown = []
    evidence = run_cli("evidence", run["id"], "--json", env=env)
    status = (Path(json.loads(evidence.stdout)["folder"]) / "ray-status.txt").read_text()
    assert f"ray status --address 127.0.0.1:{own_port}" in status and "Node status" in status  # asked with the token
    cmdlines = proc_cmdlines()  # the run's Ray head, its raylet, workers and driver are all up now
    stopped = run_cli("stop", run["id"], env=env)
    assert stopped.returncode == 0
    deadline = time.monotonic() + 30
    while any(_running(p) for p in ours) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p.pid for p in ours if _running(p)]  # ours: all gone
    assert _foreign_alive(foreign)  # theirs: untouched
    secret = foreign["auth"]["token"]
    if secret:  # the token: in no command line, output, record, log, script or evidence
        assert secret not in cmdlines
        assert not [o for o in (*shown, evidence.stdout, evidence.stderr, stopped.stdout, stopped.stderr) if secret in o]
        assert files_holding(Path(env["VERL_DEPLOY_STATE_DIR"]), secret) == []


def _running(process) -> bool:
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_reuse_ray_uses_the_running_cluster_and_never_stops_it(npu_host, foreign):
    run, env = _launch(npu_host, foreign, "--reuse-ray")
    _wait_in_log(run, r"reusing the Ray cluster at 127\.0\.0\.1:\d+")
    deadline = time.monotonic() + 120
    while json.loads(run_cli("status", run["id"], "--json", env=env).stdout)["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert "started this run's Ray head" not in Path(run["log"]).read_text()
    assert _foreign_alive(foreign)


@pytest.mark.parametrize("auth", ["disabled"], indirect=True)
def test_a_rehearsal_and_the_real_run_all_use_the_warm_cluster_with_reuse_ray(npu_host, foreign):
    """#28.1: `launch --rehearse --reuse-ray` runs both rehearsal parts and the real run on the running cluster (no
    Ray start between them), and leaves that cluster running."""
    run, env = _launch(npu_host, foreign, "--reuse-ray", "--rehearse")
    deadline = time.monotonic() + 240
    while json.loads(run_cli("status", run["id"], "--json", env=env).stdout)["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    runs = json.loads(run_cli("runs", "--json", env=env).stdout)["runs"]
    assert len(runs) == 3 and runs[0]["id"] == run["id"]  # save part, resume part, then the real run
    for each in runs:
        log = Path(json.loads(run_cli("status", each["id"], "--json", env=env).stdout)["log"]).read_text()
        assert re.search(r"reusing the Ray cluster at 127\.0\.0\.1:\d+", log), log[-2000:]
        assert "started this run's Ray head" not in log
    assert json.loads(run_cli("status", run["id"], "--json", env=env).stdout)["state"] == "succeeded"
    assert _foreign_alive(foreign)
