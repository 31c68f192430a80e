"""`stop` with no run id stops the newest live run (as `status`/`logs` default to the newest run); with several
live it asks, and off a terminal without --yes it refuses and names them (#27.7)."""

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


@pytest.fixture
def state(tmp_path: Path) -> dict:
    (tmp_path / "state").mkdir()
    (tmp_path / "config").mkdir()
    return {"dir": tmp_path / "state",
            "env": {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config")}}


def live_run(state_dir: Path, run_id: str, state_name: str = "running") -> subprocess.Popen:
    """A run record as launch writes it, whose attempt is a real process group (a `sleep` stands in)."""
    from verl_deploy.backends.process import process_identity
    from verl_deploy.runs.record import Attempt, RunRecord

    training = subprocess.Popen(["sleep", "300"], start_new_session=True)
    directory = state_dir / "runs" / run_id
    (directory / "attempt-1").mkdir(parents=True)
    handle = {"pid": training.pid, "identity": process_identity(training.pid),
              "log": str(directory / "attempt-1" / "train.log"), "exit_file": str(directory / "attempt-1" / "exit_code")}
    record = RunRecord(id=run_id, backend="local", spec={}, state=state_name,
                       attempts=[Attempt(n=1, features=[], reason="launch", handle=handle, log=handle["log"])])
    (directory / "run.json").write_text(json.dumps(asdict(record)))
    return training


def ended(process: subprocess.Popen) -> bool:
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return True


def cleanup(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_stop_without_a_run_stops_the_only_live_run_and_leaves_finished_ones(state):
    live_run(state["dir"], "20261202-000001-aaaa", "succeeded").kill()
    training = live_run(state["dir"], "20261202-000002-bbbb")
    time.sleep(0.1)
    try:
        stopped = run_cli("stop", env=state["env"])
        assert stopped.returncode == 0 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
        assert "run 20261202-000002-bbbb stopped" in stopped.stdout
        assert ended(training)
    finally:
        cleanup(training)


def test_stop_without_a_run_and_several_live_names_them_off_a_terminal_and_stops_nothing(state):
    older = live_run(state["dir"], "20261202-000001-aaaa")
    newer = live_run(state["dir"], "20261202-000002-bbbb")
    try:
        refused = run_cli("stop", env=state["env"])
        assert refused.returncode == 2, refused.stdout + refused.stderr
        [line] = [l for l in refused.stderr.splitlines() if l.strip()]
        assert "2 runs are live (newest 20261202-000002-bbbb; also 20261202-000001-aaaa)" in line and "--yes" in line
        assert older.poll() is None and newer.poll() is None  # nothing was stopped
        stopped = run_cli("stop", "--yes", env=state["env"])
        assert stopped.returncode == 0 and "run 20261202-000002-bbbb stopped" in stopped.stdout, stopped.stderr
        assert ended(newer) and older.poll() is None  # only the newest
    finally:
        cleanup(older, newer)


def test_stop_without_a_run_when_none_is_live_says_so(state):
    live_run(state["dir"], "20261202-000001-aaaa", "failed").kill()
    result = run_cli("stop", env=state["env"])
    assert result.returncode == 1 and "no live run to stop" in result.stderr
