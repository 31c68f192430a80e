"""`verl-deploy launch` and the supervisor with the stand-in trainer: real processes, files, signals.

The stand-in (tests/standin_trainer.py) is installed as verl's DAPO entry module in a temporary
verl directory, so the generated scripts run it the way they would run verl; `ray` is the fake.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import VERL_BIN, child_env, run_cli, webhook_server

STANDIN = Path(__file__).parent / "standin_trainer.py"


def fake_torch_npu(tmp: Path) -> Path:
    """The fake Ascend host's python3 sees a torch_npu matching its torch (the check's software probe asks)."""
    site = tmp / "fake-site"
    try:
        import torch
    except ImportError:  # no torch: the probe asks for no torch_npu either
        return site
    version = torch.__version__.split("+")[0]
    (site / "torch_npu").mkdir(parents=True, exist_ok=True)
    (site / "torch_npu" / "__init__.py").write_text("")
    info = site / f"torch_npu-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {version}\n")
    return site


@pytest.fixture()
def trainer(npu_host):
    verl = npu_host["tmp"] / "verl"
    for module in ("recipe/dapo/main_dapo.py", "recipe/one_step_off_policy/main_ppo.py"):
        (verl / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STANDIN, verl / module)
    ckpts = npu_host["tmp"] / "ckpts"
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1", PYTHONPATH=str(fake_torch_npu(npu_host["tmp"])))
    args = ["--yes", "--search-root", str(npu_host["root"]), "--run-dir", str(verl), "--ckpts-dir", str(ckpts),
            "--train-steps", "8", "--save-freq", "2", "--backend", "local"]
    return {"env": env, "args": args, "ckpts": ckpts, "verl": verl, "host": npu_host}


def launch(trainer, *extra, env=None, timeout=240):
    return run_cli("launch", *trainer["args"], *extra, env=dict(trainer["env"], **(env or {})), timeout=timeout)


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


def test_an_oom_whose_driver_hangs_is_stopped_after_a_short_grace_and_recovered(trainer):
    """Ray's driver can wait on a dead worker for minutes: after control.ACT_NOW_GRACE the supervisor ends
    the attempt itself (not after the 120 s given other fatal errors) and recovery goes on."""
    from verl_deploy.runs.follow import ACT_NOW_GRACE, GRACE_AFTER_FATAL

    started = time.monotonic()
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3",
                                                        "STANDIN_EXIT_DELAY": "600"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    assert [a["features"] for a in final["attempts"]] == [[], ["offload"], ["recompute"]]
    first = final["attempts"][0]
    assert first["failure"]["class"] == "device_oom" and first["exit_code"] != 0
    assert time.monotonic() - started < GRACE_AFTER_FATAL and ACT_NOW_GRACE < 30


def test_an_oom_on_a_host_too_busy_to_stop_ray_quickly_keeps_the_trainers_own_exit_status(trainer, tmp_path):
    """The trainer exits on the OOM at once, but start_verl.sh's EXIT trap still stops its Ray (a /proc scan, TERM,
    up to 2 s for it to work, KILL: seconds on a loaded host, CI saw 5 s pass). The supervisor lets that cleanup
    finish instead of killing the script mid-way after ACT_NOW_GRACE: the record keeps the exit file's status.
    Here a Ray process ignores TERM and the cleanup's first wait for it is slowed past the grace."""
    from verl_deploy.runs.follow import ACT_NOW_GRACE, CLEANUP_GRACE

    slow = tmp_path / "slow-host"
    slow.mkdir()
    pause = int(ACT_NOW_GRACE) + 3  # the cleanup's pause, longer than the grace an OOM gets
    assert pause < CLEANUP_GRACE
    (slow / "sleep").write_text(f"#!/bin/bash\nif [ \"$1\" = 0.1 ] && mkdir {slow}/slowed-$PPID 2>/dev/null; then "
                                f"exec /bin/sleep {pause}; fi\nexec /bin/sleep \"$@\"\n")  # once per script
    (slow / "sleep").chmod(0o755)
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3",
                                                        "PATH": f"{slow}:{trainer['env']['PATH']}",
                                                        "FAKE_RAY_STUBBORN": "1"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    for attempt in final["attempts"][:2]:
        assert attempt["exit_code"] == 1 and attempt["exit_seen"] is None, attempt
        assert (Path(attempt["log"]).parent / "exit_code").read_text().strip() == "1"
    record = json.loads((Path(final["directory"]) / "run.json").read_text())
    temp_dirs = {attempt["handle"]["ray_temp_dir"] for attempt in record["attempts"]}
    assert len(temp_dirs) == 3  # each attempt started its own Ray, with a process that ignored TERM
    assert len(list(slow.glob("slowed-*"))) == 3  # and each cleanup waited for it, slowed past the grace
    left = [process.info["cmdline"] for process in psutil.process_iter(["cmdline"])
            if any(temp_dir in part for part in process.info["cmdline"] or [] for temp_dir in temp_dirs)]
    assert not left  # KILLed


def test_host_oom_adds_no_offload_and_stops_with_a_notice(trainer):
    server, received, url = webhook_server()
    try:
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
    result = launch(trainer, "--json", env={"STANDIN_STEP_SECONDS": "1.2"})
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
    from verl_deploy.backends.process import _group_alive

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


# The docker backend (reuse / start / create, docker cp + exec, OOM ladder inside, stop, restart) runs against a
# real engine: tests/test_docker_real.py.


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


def test_stop_never_signals_a_process_that_took_the_recorded_pid(trainer):
    """The run's processes die (kill -9); its pid slot is then held by an unrelated process group of this user
    (pid reuse cannot be forced: the record is pointed at one). `stop` leaves that process alive and says why."""
    from verl_deploy.backends.handle import Handle
    from verl_deploy.backends.process import _group_alive, process_identity, stop_group, stranger

    result = launch(trainer, "--json", env={"STANDIN_STEP_SECONDS": "1.2"})
    run = json.loads(result.stdout)
    path = Path(run["directory"]) / "run.json"
    wait_for(trainer, run["id"], lambda d: d["step"] >= 1)
    record = json.loads(path.read_text())
    training = record["attempts"][-1]["handle"]
    assert training["identity"]["pgid"] == training["pid"] and training["identity"]["start_ticks"] > 0
    os.kill(record["supervisor_pid"], signal.SIGKILL)
    os.killpg(training["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _group_alive(training["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)  # a group leader: killpg would end it
    try:
        time.sleep(0.2)
        record = json.loads(path.read_text())
        assert record["state"] == "running"
        record["attempts"][-1]["handle"]["pid"] = other.pid  # the identity recorded at start stays
        path.write_text(json.dumps(record))
        stopped = run_cli("stop", run["id"], env=trainer["env"])
        assert stopped.returncode == 0, stopped.stderr
        assert other.poll() is None, "stop signalled a process it did not start"
        assert f"pid {other.pid} is now another process ('sleep 300'" in stopped.stdout
        assert "it was not signalled" in stopped.stdout
        final = json.loads(path.read_text())
        assert final["state"] == "stopped" and final["attempts"][-1]["ended"]
        # an older record without an identity is matched on its spawn time: a later process is refused too
        legacy = Handle.from_dict({"pid": other.pid, "spawned": time.time() - 3600})
        assert stranger(legacy) is not None and stop_group(legacy, grace=0.5) is not None and other.poll() is None
        # and the process itself, with its own identity, is stopped: the check refuses strangers only
        own = Handle(pid=other.pid, identity=process_identity(other.pid))
        assert stop_group(own, grace=2) is None
        assert other.wait(timeout=10) == -signal.SIGTERM
    finally:
        if other.poll() is None:
            other.kill()


def test_a_worker_pid_is_killed_only_while_it_runs_in_the_attempts_scripts_folder(tmp_path):
    """stop_workers' command (run here with bash, as ssh runs it on a node) spares a later process at that pid."""
    from verl_deploy.backends.nodes import kill_if_ours

    ours, elsewhere = tmp_path / "scripts", tmp_path / "elsewhere"
    ours.mkdir()
    elsewhere.mkdir()
    other = subprocess.Popen(["sleep", "300"], cwd=elsewhere)
    try:
        subprocess.run(["bash", "-c", kill_if_ours(str(other.pid), str(ours))], check=True, timeout=30)
        assert other.poll() is None
        worker = subprocess.Popen(["sleep", "300"], cwd=ours)
        subprocess.run(["bash", "-c", kill_if_ours(str(worker.pid), str(ours))], check=True, timeout=30)
        assert worker.wait(timeout=10) == -signal.SIGTERM
    finally:
        other.kill()
