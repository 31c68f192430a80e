"""`verl-deploy launch` and the supervisor with the stand-in trainer: real processes, files, signals.

The stand-in (tests/standin_trainer.py) is installed as verl's DAPO entry module in a temporary
verl directory, so the generated scripts run it the way they would run verl; `ray` is the fake.
"""

from __future__ import annotations

import http.server
import json
import re
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import VERL_BIN, run_cli

STANDIN = Path(__file__).parent / "standin_trainer.py"


@pytest.fixture()
def trainer(npu_host):
    verl = npu_host["tmp"] / "verl"
    for module in ("recipe/dapo/main_dapo.py", "recipe/one_step_off_policy/main_ppo.py"):
        (verl / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STANDIN, verl / module)
    ckpts = npu_host["tmp"] / "ckpts"
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1")
    args = ["--yes", "--search-root", str(npu_host["root"]), "--run-dir", str(verl), "--ckpts-dir", str(ckpts),
            "--train-steps", "8", "--save-freq", "2", "--backend", "local"]
    return {"env": env, "args": args, "ckpts": ckpts, "verl": verl, "host": npu_host}


def launch(trainer, *extra, env=None, timeout=240):
    full = dict(trainer["env"], **(env or {}))
    result = subprocess.run([*VERL_BIN, "launch", *trainer["args"], *extra], capture_output=True, text=True,
                            env={**os.environ, **full, "COLUMNS": "200"}, timeout=timeout)
    return result


def status(trainer, run_id=None):
    result = run_cli("status", *( [run_id] if run_id else []), "--json", env=trainer["env"])
    return json.loads(result.stdout)


def wait_for(trainer, run_id, predicate, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = status(trainer, run_id)
        if predicate(data):
            return data
        time.sleep(0.3)
    raise AssertionError(f"timed out; last status: {json.dumps(data)[:2000]}")


def test_a_healthy_run_is_started_detached_and_succeeds(trainer):
    result = launch(trainer, "--json")
    assert result.returncode == 0, result.stderr
    started = json.loads(result.stdout)
    assert started["state"] in ("running", "succeeded") and started["attempts"][0]["reason"] == "launch"
    final = wait_for(trainer, started["id"], lambda d: d["state"] in ("succeeded", "failed"))
    assert final["state"] == "succeeded" and final["step"] == 8 and final["total_steps"] == 8
    assert final["metrics"]["critic/score/mean"] == pytest.approx(0.18)
    assert (trainer["ckpts"] / "latest_checkpointed_iteration.txt").read_text() == "8"
    runs = json.loads(run_cli("runs", "--json", env=trainer["env"]).stdout)["runs"]
    assert [r["id"] for r in runs] == [started["id"]]


def test_the_oom_ladder_ends_in_success_after_two_retries_resuming_each_time(trainer):
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    attempts = final["attempts"]
    assert [a["features"] for a in attempts] == [[], ["offload"], ["recompute"]]
    assert [a["failure"]["class"] if a["failure"] else None for a in attempts] == ["device_oom", "device_oom", None]
    assert attempts[0]["failure"]["phase"] == "actor_update"
    assert attempts[1]["resumed_from_step"] == 2 and attempts[2]["resumed_from_step"] == 4
    assert "Setting global step to 2" in Path(attempts[1]["log"]).read_text()
    plan = json.loads((Path(attempts[2]["log"]).parent / "scripts" / "plan.json").read_text())
    assert plan["spec"]["oom_features"] == ["offload", "recompute"]
    assert final["step"] == 8


def test_host_oom_adds_no_offload_and_stops_with_a_notice(trainer):
    received = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"json://127.0.0.1:{server.server_address[1]}/hook"
        result = launch(trainer, "--follow", "--json", "--notify", url, env={"STANDIN_FAIL": "host_oom"})
    finally:
        server.shutdown()
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed"
    assert len(final["attempts"]) == 1 and final["failure"]["class"] == "host_oom"
    assert "offload would make it worse" in final["failure"]["decision"]
    assert received and "host_oom" in received[0]["message"] and final["id"] in received[0]["message"]
    assert "Task was killed due to the node running low on memory" in received[0]["message"]  # the last log lines


def test_kv_cache_oom_lowers_gpu_memory_utilization(trainer):
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "kv_cache"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-2000:]
    assert [a["changes"] for a in final["attempts"]] == [{}, {"gpu_memory_utilization": 0.5}]
    assert final["attempts"][1]["features"] == []


def test_killing_the_supervisor_does_not_stop_the_training_and_status_reattaches(trainer):
    result = launch(trainer, "--json", env={"STANDIN_STEP_SECONDS": "0.4"})
    run = json.loads(result.stdout)
    record = json.loads((Path(run["directory"]) / "run.json").read_text())
    supervisor, training = record["supervisor_pid"], record["attempts"][0]["handle"]["pid"]
    wait_for(trainer, run["id"], lambda d: d["step"] >= 2)
    os.kill(supervisor, signal.SIGKILL)
    time.sleep(0.5)
    os.kill(training, 0)  # the training is still there
    data = status(trainer, run["id"])  # reattaches: a new supervisor
    new = json.loads((Path(run["directory"]) / "run.json").read_text())["supervisor_pid"]
    assert new != supervisor
    final = wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"))
    assert final["state"] == "succeeded" and final["step"] == 8 and data["id"] == run["id"]


def test_a_stall_is_noticed(trainer):
    result = launch(trainer, "--json", "--stall-minutes", "0.02", env={"STANDIN_FAIL": "hang", "STANDIN_FAIL_STEP": "3"})
    run = json.loads(result.stdout)
    record_path = Path(run["directory"]) / "run.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        notices = json.loads(record_path.read_text())["notices"]
        if notices:
            break
        time.sleep(0.3)
    assert notices and notices[0]["title"].startswith("stalled") and "step 2" in notices[0]["body"]
    stopped = run_cli("stop", run["id"], env=trainer["env"])
    assert stopped.returncode == 0
    final = wait_for(trainer, run["id"], lambda d: d["state"] == "stopped", timeout=30)
    training = json.loads(record_path.read_text())["attempts"][0]["handle"]["pid"]
    from verl_deploy.backends.base import _group_alive

    assert not _group_alive(training)  # nothing of the training left running
    assert final["state"] == "stopped"


def test_logs_and_errors_filter(trainer):
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "hccl_timeout"})
    final = json.loads(result.stdout)
    assert final["state"] == "failed" and final["failure"]["class"] == "collective_timeout"
    everything = run_cli("logs", final["id"], env=trainer["env"]).stdout
    errors = run_cli("logs", final["id"], "--errors", env=trainer["env"]).stdout.splitlines()
    assert "Training Progress" in everything
    assert errors and all("Training Progress" not in line for line in errors)
    assert any("Watchdog caught collective operation timeout" in line for line in errors)
    human = run_cli("status", final["id"], env=trainer["env"]).stdout
    assert "collective_timeout" in human and "HCCL_EXEC_TIMEOUT" in human and "npu-smi info" in human


def docker_state(tmp: Path, status: str | None) -> dict:
    state = tmp / "docker-state.json"
    items = [] if status is None else [{"Name": "/verl-npu", "State": {"Running": status == "running", "Status": status},
                                        "Config": {"Image": "quay.io/ascend/verl:v0.7.0"},
                                        "HostConfig": {"Privileged": True, "NetworkMode": "host"}}]
    state.write_text(json.dumps(items))
    return {"FAKE_DOCKER_STATE": str(state), "FAKE_DOCKER_LOG": str(tmp / "docker.calls")}


@pytest.mark.parametrize("status, expected", [("running", []), ("exited", ["start -- verl-npu"]), (None, ["run -d --name=verl-npu"])])
def test_docker_backend_reuses_starts_or_creates_then_copies_and_runs_inside(trainer, status, expected):
    tmp = trainer["host"]["tmp"]
    env = docker_state(tmp, status)
    result = launch(trainer, "--container", "verl-npu", "--backend", "docker", "--follow", "--json", env=env)
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    calls = (tmp / "docker.calls").read_text().splitlines()
    for prefix in expected:
        assert any(c.startswith(prefix) for c in calls), calls
    for never in ("start -- verl-npu", "run -d"):
        if not any(never.startswith(e) or e.startswith(never) for e in expected):
            assert not any(c.startswith(never) for c in calls), calls
    copy = next(c for c in calls if c.startswith("cp "))
    assert copy.endswith(f"verl-npu:{trainer['verl']}/verl-deploy-runs/{final['id']}/attempt-1")
    run_inside = next(c for c in calls if c.startswith("exec -- verl-npu bash -c"))
    inside = run_inside.split("bash -c", 1)[1]
    assert "start_verl.sh" in inside and not re.search(r"\bdocker (cp|exec|run|start)\b", inside)  # no docker inside
    if status is None:
        create = next(c for c in calls if c.startswith("run -d"))
        assert "--device /dev/davinci7 --device /dev/davinci_manager" in create and "--net=host" in create


def test_the_seed_run_scripts_launch(trainer):
    scripts = Path(__file__).resolve().parents[1] / "scripts"
    env = {**os.environ, **trainer["env"], "TRAIN_STEPS": "4", "TRAINER_GPUS": "4", "ROLLOUT_GPUS": "4"}
    args = trainer["args"]
    cut = args.index("--train-steps")
    extra = [a for a in args[:cut] + args[cut + 2:] if a != "--yes"] + ["--json"]  # steps from TRAIN_STEPS
    for name, mode in (("run_dapo.sh", "dapo"), ("run_one_step_off_policy.sh", "one-step-off")):
        result = subprocess.run(["bash", str(scripts / name), *extra], capture_output=True, text=True, env=env, timeout=240)
        assert result.returncode == 0, result.stderr[-2000:]
        run = json.loads(result.stdout)
        final = wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"))
        record = json.loads((Path(run["directory"]) / "run.json").read_text())
        assert final["state"] == "succeeded" and record["spec"]["mode"] == mode and final["total_steps"] == 4


def test_status_of_an_unknown_run_is_one_finding_also_in_json(trainer):
    result = run_cli("status", "nope", "--json", env=trainer["env"])
    assert result.returncode == 1
    assert json.loads(result.stdout)["findings"][0]["message"] == "no run 'nope'"
    human = run_cli("logs", env=trainer["env"])
    assert human.returncode == 1 and "no runs yet" in human.stderr and "Traceback" not in human.stderr


def test_a_swanlab_key_piped_on_stdin_is_read_once_and_reaches_the_run(trainer):
    full = {**os.environ, **trainer["env"], "COLUMNS": "200"}
    result = subprocess.run([*VERL_BIN, "launch", *trainer["args"], "--swanlab", "yes", "--swanlab-mode", "local",
                             "--swanlab-api-key", "-", "--json"], input="sk-piped-4242\n", capture_output=True,
                            text=True, env=full, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    scripts = Path(run["log"]).parent / "scripts"
    assert "sk-piped-4242" in (scripts / "swanlab.env").read_text()
    assert "sk-piped-4242" not in result.stdout + result.stderr
    wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"))
