"""Files read from disk or from a path the user gave may be FIFOs, /dev/zero, directories, not UTF-8 or
JSON nested past the parser's stack: every command ends in one line (or goes on), never a hang or traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from conftest import run_cli

DEEP = "[" * 100_000 + "]" * 100_000
RUN = "20261130-0101-x"


@pytest.fixture()
def dirs(tmp_path: Path) -> dict:
    state, config = tmp_path / "state", tmp_path / "config"
    state.mkdir()
    config.mkdir()
    return {"state": state, "config": config, "tmp": tmp_path,
            "env": {"VERL_DEPLOY_STATE_DIR": str(state), "VERL_DEPLOY_CONFIG_DIR": str(config)}}


def one_error_line(result, *needles: str) -> str:
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text[-3000:]
    assert result.returncode != 0, text[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and " — fix: " in lines[0], result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def write_record(state: Path, run_id: str, log: str, state_name: str = "failed") -> Path:
    """A record as launch writes it (the real dataclass), with one attempt whose log is `log`."""
    from verl_deploy.runs.record import Attempt, RunRecord

    record = RunRecord(id=run_id, backend="local", spec={}, state=state_name,
                       attempts=[Attempt(n=1, features=[], reason="launch", log=log, ended=time.time())])
    directory = state / "runs" / run_id
    (directory / "attempt-1").mkdir(parents=True, exist_ok=True)
    (directory / "run.json").write_text(json.dumps(asdict(record)))
    return directory


def test_a_run_record_nested_too_deep_is_damaged_everywhere_and_stop_still_ends_the_training(dirs):
    directory = dirs["state"] / "runs" / RUN
    (directory / "attempt-1").mkdir(parents=True)
    (directory / "run.json").write_text('{"id":"%s","metrics":%s}' % (RUN, DEEP))
    from verl_deploy.backends.process import process_identity

    training = subprocess.Popen(["sleep", "300"], start_new_session=True)  # stands in for the attempt's process group
    try:
        (directory / "attempt-1" / "handle.json").write_text(json.dumps(
            {"run": RUN, "attempt": 1, "backend": "local", "backend_options": {}, "container": None, "run_dir": None,
             "handle": {"pid": training.pid, "identity": process_identity(training.pid),
                        "log": str(directory / "attempt-1" / "train.log"),
                        "exit_file": str(directory / "attempt-1" / "exit_code")}}))
        listed = run_cli("runs", "--json", env=dirs["env"])
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-2000:]
        damaged = json.loads(listed.stdout)["damaged"]
        assert damaged[0]["id"] == RUN and "nested too deep" in json.dumps(damaged)
        for command in (["status", RUN], ["logs", RUN], ["report", RUN, "-o", str(dirs["tmp"] / "r")],
                        ["evidence", RUN]):
            one_error_line(run_cli(*command, env=dirs["env"]), "nested too deep")
        assert training.poll() is None  # looking stops nothing
        stopped = run_cli("stop", RUN, env=dirs["env"])
        assert "Traceback" not in stopped.stderr and stopped.returncode == 0, stopped.stderr[-2000:]
        assert "stopped attempt 1" in stopped.stdout
        assert training.wait(timeout=20) == -signal.SIGTERM or training.returncode < 0
    finally:
        if training.poll() is None:
            os.killpg(training.pid, signal.SIGKILL)
            training.wait()


def test_a_detected_file_that_is_dev_zero_is_ignored_with_a_warning_and_plan_goes_on(dirs):
    (dirs["state"] / "detected.json").symlink_to("/dev/zero")
    result = run_cli("plan", "--json", env=dirs["env"], cwd=dirs["tmp"])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    json.loads(result.stdout)  # the plan is made, from no detected facts
    assert "detected.json is a character device, not a regular file" in result.stderr


def test_a_saved_key_that_is_not_utf8_is_one_line_without_the_key(dirs):
    (dirs["config"] / "swanlab_api_key").write_bytes(b"sk-abc\xffdef")
    line = one_error_line(run_cli("plan", env=dirs["env"], cwd=dirs["tmp"]), "swanlab_api_key", "not UTF-8")
    assert "abc" not in line and "def" not in line.split("— fix")[0]


def test_hostfiles_that_are_devices_or_fifos_and_an_endless_key_on_stdin_are_refused(dirs):
    fifo = dirs["tmp"] / "hosts.fifo"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "a character device"), (str(fifo), "a FIFO")):
        one_error_line(run_cli("plan", "--nodes", "@" + path, env=dirs["env"], cwd=dirs["tmp"]), "nodes", kind)
    with open("/dev/zero", "rb") as zero:
        conftest = __import__("conftest")
        result = subprocess.run([*conftest.VERL_BIN, "plan", "--swanlab-api-key", "-"], stdin=zero,
                                capture_output=True, text=True, env=conftest.child_env({**os.environ, **dirs["env"]}),
                                cwd=dirs["tmp"], timeout=120)
    one_error_line(result, "swanlab_api_key", "longer than")


def test_a_model_config_nested_too_deep_is_a_model_path_error(dirs):
    model = dirs["tmp"] / "Qwen3-8B"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": %s}' % DEEP)
    result = run_cli("plan", "--model-path", str(model), env=dirs["env"], cwd=dirs["tmp"])
    text = result.stdout + result.stderr
    assert "Traceback" not in text, text[-3000:]
    assert result.returncode != 0
    line = next(line for line in text.splitlines() if line.startswith("error: model_path: cannot read the model config:"))
    assert "nested too deep" in line and " — fix: " in line
    checked = run_cli("check", "--model-path", str(model), env=dirs["env"], cwd=dirs["tmp"])
    assert "Traceback" not in checked.stdout + checked.stderr, checked.stderr[-3000:]
    assert "config.json is damaged: JSON nested too deep" in checked.stdout + checked.stderr


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_an_attempt_log_that_is_a_directory_or_fifo_is_one_line_naming_it(dirs, kind):
    log = dirs["state"] / "runs" / RUN / "attempt-1" / "train.log"  # where a run's log is
    log.parent.mkdir(parents=True)
    if kind == "directory":
        log.mkdir()
    else:
        os.mkfifo(log)
    write_record(dirs["state"], RUN, str(log))
    out = dirs["tmp"] / "report-out"
    for command in (["logs", RUN], ["logs", "--follow", RUN], ["report", RUN, "-o", str(out)]):
        one_error_line(run_cli(*command, env=dirs["env"]), "error: log: attempt 1's log", str(log),
                       "a directory" if kind == "directory" else "a FIFO")
    assert not out.exists()  # nothing half-written


def test_config_files_that_are_fifos_devices_directories_or_nested_too_deep_are_one_line(dirs):
    tmp = dirs["tmp"]
    os.mkfifo(tmp / "fifo.yaml")
    (tmp / "zero.yaml").symlink_to("/dev/zero")
    (tmp / "dir.yaml").mkdir()
    (tmp / "deep.yaml").write_text("model_path: " + DEEP + "\n")
    for name, what in (("fifo.yaml", "is a FIFO"), ("zero.yaml", "is a character device"),
                       ("dir.yaml", "is a directory"), ("deep.yaml", "nested too deep")):
        one_error_line(run_cli("plan", "--config", str(tmp / name), env=dirs["env"], cwd=tmp), "error: config:", what)


@pytest.mark.timeout(30)
def test_a_fifo_as_checkpoint_tracker_or_exit_file_never_blocks_the_supervisor(tmp_path):
    """The supervisor polls these files; a FIFO (no writer) in their place used to block it for good."""
    from verl_deploy.backends.handle import Handle
    from verl_deploy.backends.process import exit_code
    from verl_deploy.runs.checkpoints import tracked_step

    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    os.mkfifo(ckpts / "latest_checkpointed_iteration.txt")
    os.mkfifo(tmp_path / "exit_code")
    assert tracked_step(ckpts) is None
    assert exit_code(Handle(exit_file=str(tmp_path / "exit_code"))) is None
    os.unlink(ckpts / "latest_checkpointed_iteration.txt")
    (ckpts / "latest_checkpointed_iteration.txt").write_text("6\n")
    os.unlink(tmp_path / "exit_code")
    (tmp_path / "exit_code").write_text("3\n")
    assert tracked_step(ckpts) == 6 and exit_code(Handle(exit_file=str(tmp_path / "exit_code"))) == 3


def test_diagnose_names_a_fifo_or_device_instead_of_calling_it_empty(dirs):
    os.mkfifo(dirs["tmp"] / "train.log")
    for path, kind in ((str(dirs["tmp"] / "train.log"), "is a FIFO"), ("/dev/zero", "is a character device")):
        one_error_line(run_cli("diagnose", path, env=dirs["env"]), "error: LOGFILE:", kind)


@pytest.mark.timeout(30)
def test_calibration_log_and_notice_tail_survive_fifos_and_lines_nested_too_deep(tmp_path):
    from verl_deploy.memory import calibration
    from verl_deploy.runs.notify import last_lines

    log = tmp_path / calibration.LOG_NAME
    good = calibration.Entry("Qwen3-8B", "fsdp x8", 64.0, "rollout", ("offload",), "recompute",
                             time="2026-01-01T00:00:00Z")
    calibration.append(good, log)
    with open(log, "a") as handle:
        handle.write('{"model": %s}\n' % DEEP)  # a damaged line: skipped, the others kept
    calibration.append(good, log)
    assert calibration.read(log) == [good, good]
    os.mkfifo(tmp_path / "fifo")
    assert calibration.read(tmp_path / "fifo") == []
    assert last_lines(str(tmp_path / "fifo")) == []
    (tmp_path / "train.log").write_text("".join(f"line {i}\n" for i in range(100)))
    assert last_lines(str(tmp_path / "train.log"), 3) == ["line 97", "line 98", "line 99"]
