"""`evidence` asks only the Ray head this run started, at the address its start_verl.sh recorded, never a
default address (127.0.0.1:6379 may be another user's Ray on a shared host). The `ray` on PATH is the
conftest stub, which records every call."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from conftest import run_cli

RUN = "20261130-0101-ev"


def dead_local_run(tmp_path: Path, log_text: str, ray_auth: str = "disabled") -> dict:
    from verl_deploy.runs.record import Attempt, RunRecord

    state = tmp_path / "state"
    log = state / "runs" / RUN / "attempt-1" / "train.log"  # where a run's log is
    log.parent.mkdir(parents=True)
    log.write_text(log_text)
    record = RunRecord(id=RUN, backend="local", spec={"device": "gpu", "ray_auth": ray_auth}, state="failed",
                       attempts=[Attempt(n=1, features=[], reason="launch", log=str(log), ended=time.time(),
                                         handle={"pid": 2 ** 22 + 17})])  # no such process
    directory = state / "runs" / RUN
    (directory / "attempt-1").mkdir(parents=True, exist_ok=True)
    (directory / "run.json").write_text(json.dumps(asdict(record)))
    return {"VERL_DEPLOY_STATE_DIR": str(state), "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config")}


def evidence(stubs, env: dict) -> tuple[dict, list[str]]:
    result = run_cli("evidence", RUN, "--json",
                     env={**env, "PATH": f"{stubs['bin']}:{os.environ['PATH']}", "STUB_LOG": str(stubs["log"])})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    calls = stubs["log"] / "ray.calls"
    return json.loads(result.stdout), calls.read_text().splitlines() if calls.exists() else []


def test_a_run_that_recorded_no_ray_head_asks_no_ray_and_says_so(tmp_path, stubs):
    summary, calls = evidence(stubs, dead_local_run(tmp_path, "[start_verl] reusing the Ray cluster at "
                                                               "127.0.0.1:6379 (VERL_DEPLOY_REUSE_RAY=1)\nstep:1\n"))
    assert calls == []  # not `ray status --address 127.0.0.1:6379`
    assert summary["ray_address"] is None
    assert any("recorded no Ray head of its own" in p and "no Ray was asked" in p for p in summary["problems"])
    assert not (Path(summary["folder"]) / "ray-status.txt").exists()


def test_a_run_that_started_its_own_head_is_asked_at_that_address_only(tmp_path, stubs):
    line = ("[start_verl] started this run's Ray head at 10.1.2.3:41234 "
            "(session /tmp/vdr-ab12cd34/session_2026-11-30_01-01-01_000000_1, temp dir /tmp/vdr-ab12cd34)\n")
    summary, calls = evidence(stubs, dead_local_run(tmp_path, line + "step:1 - a:1\n"))
    assert calls == ["status --address 10.1.2.3:41234"]
    assert summary["ray_address"] == "10.1.2.3:41234"
    assert (Path(summary["folder"]) / "ray-status.txt").read_text().startswith("$ ray status --address 10.1.2.3:41234")


def test_ray_status_speaks_the_auth_mode_the_runs_head_started_with(tmp_path, stubs):
    """Ray's gRPC clients send the token only with RAY_AUTH_MODE=token: `ray status` gets the run's own mode."""
    (stubs["bin"] / "ray").write_text('#!/usr/bin/env bash\nprintf "%s %s\\n" "${RAY_AUTH_MODE:-unset}" "$*" '
                                      '>> "$STUB_LOG/ray.calls"\necho "Node status"\n')
    line = ("[start_verl] started this run's Ray head at 10.1.2.3:41234 "
            "(session /tmp/vdr-ab12cd34/session_2026-11-30_01-01-01_000000_1, temp dir /tmp/vdr-ab12cd34)\n")
    for mode in ("token", "disabled"):
        (tmp_path / mode).mkdir()
        env = dead_local_run(tmp_path / mode, line, ray_auth=mode)
        summary, calls = evidence(stubs, {**env, "RAY_AUTH_MODE": "disabled" if mode == "token" else "token"})
        assert calls[-1] == f"{mode} status --address 10.1.2.3:41234", calls
        assert (Path(summary["folder"]) / "ray-status.txt").read_text().endswith("Node status\n")
