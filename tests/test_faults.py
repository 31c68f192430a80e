"""Faults with real processes: damaged records, a full disk, kills, a shared checkpoint directory, torn checkpoints.

Each test ends by asking `status` (the real CLI) and checks it tells the truth with no traceback.
The stand-in trainer (tests/standin_trainer.py) plays verl; `ray` is the fake unless said.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import VERL_BIN, child_env, run_cli
from test_launch import fake_torch_npu, launch, status, trainer, wait_for  # noqa: F401  (trainer is a fixture)

DONE = ("succeeded", "failed", "stopped")


def record_of(run: dict) -> dict:
    return json.loads((Path(run["directory"]) / "run.json").read_text())


def no_traceback(result) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-2000:]


def test_launch_trains_exactly_the_spec_the_check_checked(trainer):
    """No --model-path: the check finds the model and data under --search-root, and that is what runs."""
    result = launch(trainer, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    spec = record_of(run)["spec"]
    root = trainer["host"]["root"]
    assert spec["model_path"] == str(root / "models" / "Qwen3-8B")
    assert spec["train_file"] == str(root / "data" / "dapo-math-17k.parquet")
    script = (Path(run["log"]).parent / "scripts" / "run_training.sh").read_text()
    assert str(root / "models" / "Qwen3-8B") in script and "/mnt/public" not in script
    wait_for(trainer, run["id"], lambda d: d["state"] in DONE)


def test_damaged_records_are_one_line_and_stop_still_ends_the_training(trainer):
    from verl_deploy.backends.process import _group_alive

    good = json.loads(launch(trainer, "--follow", "--json").stdout)
    assert good["state"] == "succeeded"
    hung = json.loads(launch(trainer, "--json", "--ckpts-dir", str(trainer["ckpts"]) + "-2",
                             env={"STANDIN_FAIL": "hang", "STANDIN_FAIL_STEP": "2"}).stdout)
    record = record_of(hung)
    os.kill(record["supervisor_pid"], signal.SIGKILL)  # nothing rewrites the record any more
    training = record["attempts"][0]["handle"]["pid"]
    path = Path(hung["directory"]) / "run.json"
    text = path.read_text()
    damages = {"truncated": text[: len(text) // 2], "empty": "",
               "wrong types": json.dumps({**record, "attempts": 5, "step": "many"})}
    for kind, damaged in damages.items():
        path.write_text(damaged)
        listed = run_cli("runs", "--json", env=trainer["env"])
        no_traceback(listed)
        runs = json.loads(listed.stdout)
        assert [r["id"] for r in runs["runs"]] == [good["id"]], kind  # the others are still listed
        assert runs["damaged"][0]["id"] == hung["id"]
        for command in (["status", hung["id"]], ["logs", hung["id"]]):
            shown = run_cli(*command, env=trainer["env"])
            no_traceback(shown)
            lines = [line for line in shown.stderr.splitlines() if line.strip()]
            assert shown.returncode == 1 and len(lines) == 1 and "run.json" in lines[0], (kind, shown.stderr)
        assert _group_alive(training)  # looking never stops anything
    stopped = run_cli("stop", hung["id"], env=trainer["env"])
    no_traceback(stopped)
    assert stopped.returncode == 0 and "stopped attempt 1" in stopped.stdout
    deadline = time.monotonic() + 20
    while _group_alive(training) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group_alive(training)
    assert (Path(hung["directory"]) / "run.json.damaged").read_text() == damages["wrong types"]  # kept, not deleted
    assert status(trainer, hung["id"])["state"] == "stopped"


@pytest.fixture()
def small_disk(tmp_path):
    mount = tmp_path / "small-state"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root and mount permission): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_state_disk_is_recorded_as_disk_full_and_status_keeps_working(trainer, small_disk):
    env = {"VERL_DEPLOY_STATE_DIR": str(small_disk), "STANDIN_STEP_SECONDS": "0.3"}
    full_env = dict(trainer["env"], **env)
    result = launch(trainer, "--json", "--train-steps", "40", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    directory = Path(run["directory"])
    deadline = time.monotonic() + 30
    while record_of(run)["step"] < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    with open(small_disk / "filler", "wb") as filler:  # fill the disk the records and the log live on
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = run_cli("status", run["id"], "--json", env=full_env)
            no_traceback(shown)
            assert shown.returncode == 0, shown.stderr
            data = json.loads(shown.stdout)
            if data["state"] in DONE:
                break
            time.sleep(0.5)
        assert data["state"] in DONE and data["disk_full"]["path"].startswith(str(small_disk)), data
        if data["state"] == "failed":  # the trainer could not write its log any more
            assert data["failure"]["class"] == "disk_full" and str(small_disk) in data["failure"]["cause"]
        else:  # the freed reserve let it finish: a success only with the trainer's own end
            assert data["state"] == "succeeded" and data["step"] == data["total_steps"] == 40
        assert not [p.name for p in directory.iterdir() if p.name.startswith(".run.json.")]  # no temp files left
        json.loads((directory / "run.json").read_text())  # the record on disk is whole
        human = run_cli("status", run["id"], env=full_env)
        no_traceback(human)
        assert "disk full" in human.stdout
    finally:
        (small_disk / "filler").unlink()


@pytest.mark.parametrize("warned", [None, "start-head-npu-without-acl.log", "start-retried-then-handed-over.log"])
def test_a_killed_trainer_is_a_named_failure(trainer, warned):
    """With `warned`, the log first holds real Ray start output with its NPU probe's traceback (a warning class), or
    a `ray start` failure the scripts retried past before handing over (a survived fatal line): the signal that
    ended the trainer is still the failure, not those lines."""
    # slow steps: on a loaded machine the trainer must still be alive when it is looked for (it is killed at once)
    env = {"STANDIN_STEP_SECONDS": "3"}
    if warned:
        env["STANDIN_LINES_FILE"] = str(Path(__file__).parent / "fixtures" / "ray" / warned)
    run = json.loads(launch(trainer, "--json", env=env).stdout)
    wait_for(trainer, run["id"], lambda d: d["step"] >= 1)
    import psutil

    wrapper = psutil.Process(record_of(run)["attempts"][0]["handle"]["pid"])
    trainer_process = next(p for p in wrapper.children(recursive=True) if "main_dapo" in " ".join(p.cmdline()))
    trainer_process.kill()
    final = wait_for(trainer, run["id"], lambda d: d["state"] in DONE)
    assert final["state"] == "failed" and final["failure"]["class"] == "killed", final["failure"]
    assert "SIGKILL" in final["failure"]["cause"]


@pytest.mark.parametrize("seed", [1, 2])
def test_launch_killed_at_a_random_point_ends_in_a_true_record(trainer, seed):
    delay = random.Random(seed).uniform(0.5, 6.0)
    env = child_env({**os.environ, **trainer["env"], "COLUMNS": "200"})
    process = subprocess.Popen([*VERL_BIN, "launch", *trainer["args"], "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    time.sleep(delay)
    process.kill()
    process.communicate()
    listed = json.loads(run_cli("runs", "--json", env=trainer["env"]).stdout)
    if not listed["runs"]:
        return  # killed before any record: nothing was started (checked below: no trainer left)
    run_id = listed["runs"][0]["id"]
    final = wait_for(trainer, run_id, lambda d: d["state"] in DONE)
    if final["state"] == "failed":
        assert final["failure"]["class"] == "interrupted" and not final["attempts"]
    else:
        assert final["state"] == "succeeded" and final["step"] == 8


def test_killed_supervisor_and_a_removed_log_never_make_a_false_success(trainer):
    run = json.loads(launch(trainer, "--json", env={"STANDIN_FAIL": "quit_early", "STANDIN_FAIL_STEP": "5",
                                                     "STANDIN_STEP_SECONDS": "1.0"}).stdout)
    wait_for(trainer, run["id"], lambda d: d["step"] >= 2)
    os.kill(record_of(run)["supervisor_pid"], signal.SIGKILL)
    Path(run["log"]).unlink()  # the trainer goes on writing into the removed file; nobody can read it
    final = wait_for(trainer, run["id"], lambda d: d["state"] in DONE)  # status starts a new supervisor
    assert final["state"] == "failed" and final["failure"]["class"] == "incomplete", final
    assert "exited 0 at step" in final["failure"]["cause"] and "of 8 without reaching its end" in final["failure"]["cause"]
    assert final["attempts"][0]["exit_code"] == 0


def test_a_second_live_run_on_the_same_checkpoint_directory_is_refused(trainer):
    first = json.loads(launch(trainer, "--json", env={"STANDIN_FAIL": "hang", "STANDIN_FAIL_STEP": "3"}).stdout)
    second = launch(trainer, "--json")
    no_traceback(second)
    assert second.returncode == 1
    finding = json.loads(second.stdout)["findings"][0]
    assert finding["field"] == "ckpts_dir" and first["id"] in finding["message"] and "--force" in finding["fix"]
    assert [r["id"] for r in json.loads(run_cli("runs", "--json", env=trainer["env"]).stdout)["runs"]] == [first["id"]]
    assert run_cli("stop", first["id"], env=trainer["env"]).returncode == 0
    again = launch(trainer, "--json")  # stopped: the directory is free again
    assert again.returncode == 0, again.stderr[-2000:]
    wait_for(trainer, json.loads(again.stdout)["id"], lambda d: d["state"] in DONE)


def test_a_retry_resumes_from_the_last_complete_checkpoint_not_a_torn_one(trainer):
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "torn_checkpoint", "STANDIN_FAIL_STEP": "4"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    first, second = final["attempts"]
    assert first["failure"]["class"] == "device_oom"
    assert (trainer["ckpts"] / "global_step_4").is_dir()  # torn, and still there: nothing is deleted
    assert second["resumed_from_step"] == 2 and "global_step_4 is incomplete" in second["reason"]
    assert second["resume"]["skipped"][0]["step"] == 4 and "metadata.json" in second["resume"]["skipped"][0]["missing"] \
        or "data.pt" in second["resume"]["skipped"][0]["missing"]
    log = Path(second["log"]).read_text()
    assert f"Load from checkpoint folder: {trainer['ckpts'] / 'global_step_2'}" in log
    assert final["step"] == 8


def test_a_resume_that_trains_no_step_is_a_failure(trainer):
    from test_checkpoints import write_checkpoint

    write_checkpoint(trainer["ckpts"], 2, "megatron")
    (trainer["ckpts"] / "latest_checkpointed_iteration.txt").write_text("2")
    result = launch(trainer, "--follow", "--json", env={"STANDIN_FAIL": "resume_noop"})
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed"
    assert final["failure"]["class"] == "no_progress" and final["attempts"][0]["resumed_from_step"] == 2


def test_notify_urls_are_checked_at_launch_and_every_delivery_is_recorded(trainer):
    refused = launch(trainer, "--notify", "notaurl")
    no_traceback(refused)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 1 and len(lines) == 1 and "--notify 'notaurl'" in lines[0] and "json://" in lines[0]
    assert json.loads(run_cli("runs", "--json", env=trainer["env"]).stdout)["runs"] == []  # nothing written
    from rayports import free_port

    dead = f"json://127.0.0.1:{free_port()}/hook"  # nobody listens there
    final = json.loads(launch(trainer, "--follow", "--json", "--notify", dead, env={"STANDIN_FAIL": "host_oom"}).stdout)
    delivery = final["notices"][0]["deliveries"][0]
    assert delivery["ok"] is False and delivery["target"].startswith("json://127.0.0.1:") and delivery["error"]
    human = run_cli("status", final["id"], env=trainer["env"]).stdout
    assert "notice not delivered" in " ".join(human.split())


def test_stopping_a_ray_by_its_marks_spares_a_neighbour_with_a_similar_path(tmp_path):
    """The two ways a run ends its Ray: by session dir here (with renamed children), by temp dir on a worker."""
    import sys

    import psutil

    from verl_deploy.backends.nodes import kill_marked
    from verl_deploy.backends.rayprocs import stop_session

    sleeper = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    session = tmp_path / "vdr-a1" / "session_2026_1"
    ours = subprocess.Popen([sys.executable, "-c", sleeper, f"--log-dir={session}/logs"])
    neighbour = subprocess.Popen([sys.executable, "-c", sleeper, f"--log-dir={session}0/logs"])
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--temp-dir={tmp_path / 'vdr-w'}"])
    other_worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--temp-dir={tmp_path / 'vdr-w2'}"])
    deaf = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    stubborn = subprocess.Popen([sys.executable, "-c", deaf, f"--temp-dir={tmp_path / 'vdr-w'}"], stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout.readline().strip() == b"ready"  # it ignores TERM from here on
        deadline = time.monotonic() + 20
        while not psutil.Process(ours.pid).children() and time.monotonic() < deadline:
            time.sleep(0.1)
        child = psutil.Process(ours.pid).children()[0]  # stands for a renamed ray::DashboardAgent
        stop_session(str(session), grace=5)
        assert ours.wait(timeout=10) is not None and not child.is_running()
        subprocess.run(["sh", "-c", kill_marked(str(tmp_path / "vdr-w"))], timeout=30, check=True)
        assert worker.wait(timeout=10) is not None
        assert stubborn.wait(timeout=10) == -9  # TERM was ignored: the KILL after the wait ended it
        assert neighbour.poll() is None and other_worker.poll() is None
    finally:
        for process in (ours, neighbour, worker, other_worker, stubborn):
            try:
                for grandchild in psutil.Process(process.pid).children():
                    grandchild.kill()
            except psutil.Error:
                pass
            process.kill()
