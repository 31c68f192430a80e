"""`verl-deploy clean RUN` after a crash: two real runs side by side, each with its own real Ray and a "rollout
server" of the stand-in trainer that left the process group holding a (fake) device file. Run A's supervisor
and training are killed (-9); its Ray and server live on. `clean A` ends exactly those, says what was freed
(the device included), and every process of run B goes on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import VERL_BIN, child_env, run_cli, skip_module_without
from rayports import free_port, node_ports
from test_launch import STANDIN, fake_torch_npu
from test_ray import RAY_BIN

skip_module_without("ray")


def _launch(npu_host, name: str) -> tuple[dict, dict]:
    tmp = npu_host["tmp"]
    verl = tmp / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True, exist_ok=True)
    (verl / "recipe" / "dapo" / "main_dapo.py").write_text(STANDIN.read_text())
    config = tmp / f"{name}.yaml"
    config.write_text(f"ray_port: {free_port()}\n")
    ray_args = " ".join(["--include-dashboard=false", "--num-cpus=1", *node_ports(head=True)])
    env = {**os.environ, **npu_host["env"], "PATH": f"{Path(sys.executable).parent}:{Path(RAY_BIN).parent}:/usr/bin:/bin",
           "RAY_START_ARGS": ray_args, "RAY_USAGE_STATS_ENABLED": "0", "STANDIN_STEP_SECONDS": "0.3",
           "RAY_AUTH_MODE": "disabled", "STANDIN_RAY": "1", "STANDIN_FAIL": "hang", "STANDIN_FAIL_STEP": "3",
           "STANDIN_SERVER_FILE": str(tmp / f"davinci-{name}"), "PYTHONPATH": str(fake_torch_npu(tmp)),
           "COLUMNS": "200"}
    args = ["launch", "--yes", "--skip-check", "--backend", "local", "--run-dir", str(verl), "--config", str(config),
            "--master-addr", "127.0.0.1", "--ckpts-dir", str(tmp / f"ckpts-{name}"),
            "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"), "--train-steps", "8", "--json"]
    env = child_env(env)
    result = subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), env


def _in_log(run: dict, pattern: str, timeout: float = 240) -> re.Match:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = Path(run["log"]).read_text(errors="replace")
        match = re.search(pattern, text)
        if match:
            return match
        time.sleep(0.5)
    raise AssertionError(f"{pattern!r} not in the log:\n{text[-3000:]}")


def _marked(log: str) -> set[int]:
    """Every live process whose environment names this attempt's log (what the run's wrapper gave it)."""
    entry = b"VD_LOG=" + log.encode()
    found = set()
    for process in psutil.process_iter(["pid"]):
        try:
            with open(f"/proc/{process.pid}/environ", "rb") as handle:
                if entry in handle.read().split(b"\0") and process.status() != psutil.STATUS_ZOMBIE:
                    found.add(process.pid)
        except (OSError, psutil.Error):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _processes(run: dict) -> dict:
    from verl_deploy.backends.rayprocs import ray_processes

    session = _in_log(run, r"started this run's Ray head at \S+ \(session (\S+),").group(1)
    server = int(_in_log(run, r"rollout server started \(pid (\d+)\)").group(1))
    _in_log(run, r"step:2 - ")
    return {"ray": {p.pid for p in ray_processes(session)}, "server": server, "all": _marked(run["log"])}


def test_clean_after_a_killed_run_ends_its_ray_and_server_and_touches_none_of_another_runs(npu_host):
    a, env = _launch(npu_host, "a")
    b, _ = _launch(npu_host, "b")
    try:
        ours, theirs = _processes(a), _processes(b)
        assert len(ours["ray"]) >= 2 and ours["server"] in ours["all"] and not ours["all"] & theirs["all"]
        record = json.loads((Path(a["directory"]) / "run.json").read_text())
        os.kill(record["supervisor_pid"], signal.SIGKILL)  # the crash: supervisor and training killed
        os.killpg(record["attempts"][0]["handle"]["pid"], signal.SIGKILL)
        time.sleep(1)
        left = _marked(a["log"])
        assert ours["server"] in left and ours["ray"] & left  # what the crash left behind

        env_clean = {**npu_host["env"], "VERL_DEPLOY_DEVICE_FILES": str(npu_host["tmp"] / "davinci-*")}
        refused = run_cli("clean", b["id"], env=env_clean)  # B is running and supervised: not cleaned
        assert refused.returncode == 1 and f"verl-deploy stop {b['id']}" in refused.stderr

        cleaned = run_cli("clean", a["id"], "--json", env=env_clean)
        assert cleaned.returncode == 0, cleaned.stderr[-2000:]
        report = json.loads(cleaned.stdout)
        freed = {f["pid"]: f for f in report["freed"]}
        assert ours["server"] in freed and freed[ours["server"]]["devices"] == [str(npu_host["tmp"] / "davinci-a")]
        assert report["devices_freed"] == [f"localhost:{npu_host['tmp'] / 'davinci-a'}"] and report["ok"]
        assert not [pid for pid in ours["all"] | ours["ray"] if _alive(pid)]  # nothing of run A is left
        assert not _marked(a["log"])
        assert all(_alive(pid) for pid in theirs["all"] | theirs["ray"])  # every process of run B goes on
        assert json.loads(run_cli("status", b["id"], "--json", env=env).stdout)["state"] == "running"
        human = run_cli("clean", a["id"], env=env_clean)
        assert human.returncode == 0 and "nothing was left" in human.stdout
    finally:
        run_cli("stop", b["id"], env=env)
        run_cli("clean", b["id"], env=env)
        run_cli("clean", a["id"], env=env)
    assert not _marked(b["log"])  # stop ends the training; clean what escaped its group (the server)
