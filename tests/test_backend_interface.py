"""One backend interface: a run record written before the Handle was typed (plain dict handles, as run.json and
handle.json held them) still loads, reads, and is stopped; every kind is built from what its record keeps; and no
code outside backends/ asks which kind a backend is."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

RUN = "20261130-101500-ab12"


def _identity(pid: int) -> dict:
    from verl_deploy.backends.process import process_identity

    identity = process_identity(pid)
    assert identity is not None
    return identity


def old_record(directory: Path, backend: str, handle: dict, backend_options: dict | None = None,
               state: str = "running") -> dict:
    """run.json exactly as the version with dict handles wrote it (dataclasses.asdict of its RunRecord)."""
    return {"id": directory.name, "backend": backend, "spec": {"device": "gpu", "container": handle.get("container")},
            "backend_options": backend_options or {}, "state": state, "created": time.time(),
            "attempts": [{"n": 1, "features": [], "reason": "launch", "resumed_from_step": None, "exit_code": None,
                          "failure": None, "started": time.time(), "ended": None, "handle": handle,
                          "log": handle.get("log", ""), "changes": {}, "resume": {}, "features_on": [],
                          "feature_origins": {}, "exit_seen": None}],
            "step": 3, "total_steps": 10, "eta_seconds": None, "metrics": {}, "swanlab_url": None,
            "last_checkpoint_step": None, "failure": None, "validation": {}, "notices": [], "notify": [],
            "supervisor_pid": None, "launcher_pid": None, "stall_seconds": 600, "scan": {}, "disk_full": None,
            "supervisor_deaths": [], "calibrated_features": {}}


@pytest.fixture
def state(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_DEPLOY_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "state"


def test_old_dict_handles_of_every_backend_load_typed_and_save_back_as_they_were(state):
    from verl_deploy.runs.record import RunRecord

    directory = state / "runs" / RUN
    attempt = directory / "attempt-1"
    attempt.mkdir(parents=True)
    base = {"pid": 4242, "log": str(attempt / "train.log"), "exit_file": str(attempt / "exit_code"),
            "spawned": 1764500000.5, "identity": {"start_ticks": 99, "pgid": 4242, "cmdline": ["bash", "-c", "x"]}}
    handles = {
        "local": {**base, "ray_temp_dir": "/tmp/vdr-1a2b3c4d"},
        "docker": {**base, "container": "verl-npu", "remote": "/verl/verl-deploy-runs/x/attempt-1",
                   "workers": [{"host": "node2", "pid": "777", "directory": "/s", "container": None,
                                "ray_temp_dir": "/tmp/vdr-99999999"}]},
        "ray": {**base, "job_id": "raysubmit_1", "address": "http://head:8265"},
        "slurm": {**base, "job_id": "17", "scheduler_file": str(attempt / "scheduler.json"),
                  "scheduler": {"scheduler": "slurm", "state": "PENDING", "reason": "Resources", "queued": True}},
        "kuberay": {**base, "rayjob": "vd-x-a1", "namespace": None, "scheduler_file": str(attempt / "scheduler.json")},
    }
    for kind, handle in handles.items():
        (directory / "run.json").write_text(json.dumps(old_record(directory, kind, handle)))
        record = RunRecord.load(RUN)
        typed = record.current.handle
        assert typed.pid == 4242 and typed.log == handle["log"] and typed.identity == handle["identity"]
        assert typed.container == handle.get("container") and typed.job_id == handle.get("job_id")
        assert typed.workers == handle.get("workers", [])
        assert typed.queued == (kind == "slurm")
        assert typed.remote_cluster == ("http://head:8265" if kind == "ray" else None)
        assert record.status_document()["scheduler"] == handle.get("scheduler")
        record.save()
        saved = json.loads((directory / "run.json").read_text())["attempts"][0]["handle"]
        assert saved == {k: v for k, v in handle.items() if v is not None}, kind  # the same object, nulls left out


def test_a_handle_naming_a_file_outside_the_run_is_still_refused(state):
    from verl_deploy.runs.record import RecordError, RunRecord

    directory = state / "runs" / RUN
    (directory / "attempt-1").mkdir(parents=True)
    handle = {"pid": 4242, "log": str(directory / "attempt-1" / "train.log"), "exit_file": "/etc/passwd"}
    (directory / "run.json").write_text(json.dumps(old_record(directory, "local", handle)))
    with pytest.raises(RecordError, match="exit_file /etc/passwd"):
        RunRecord.load(RUN)


def test_stop_ends_a_run_recorded_with_an_old_dict_handle(state):
    """A live run launched by the version with dict handles: `stop` (a new process) reads it and ends it."""
    training = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        directory = state / "runs" / RUN
        (directory / "attempt-1").mkdir(parents=True)
        handle = {"pid": training.pid, "identity": _identity(training.pid), "spawned": time.time(),
                  "log": str(directory / "attempt-1" / "train.log"), "exit_file": str(directory / "attempt-1" / "exit_code")}
        (directory / "run.json").write_text(json.dumps(old_record(directory, "local", handle)))
        stopped = run_cli("stop", RUN, env={"VERL_DEPLOY_STATE_DIR": str(state)})
        assert stopped.returncode == 0 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
        assert training.wait(timeout=20) == -signal.SIGTERM
        assert json.loads((directory / "run.json").read_text())["state"] == "stopped"
    finally:
        if training.poll() is None:
            os.killpg(training.pid, signal.SIGKILL)


def test_a_damaged_run_is_stopped_from_an_old_handle_json(state):
    training = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        directory = state / "runs" / RUN
        (directory / "attempt-1").mkdir(parents=True)
        (directory / "run.json").write_text("{ not json")
        (directory / "attempt-1" / "handle.json").write_text(json.dumps(
            {"run": RUN, "attempt": 1, "backend": "local", "backend_options": {}, "container": None, "run_dir": "/verl",
             "handle": {"pid": training.pid, "identity": _identity(training.pid),
                        "log": str(directory / "attempt-1" / "train.log")}}))
        stopped = run_cli("stop", RUN, env={"VERL_DEPLOY_STATE_DIR": str(state)})
        assert stopped.returncode == 0 and "stopped attempt 1 from its handle file" in stopped.stdout, stopped.stderr
        assert training.wait(timeout=20) == -signal.SIGTERM
        rebuilt = json.loads((directory / "run.json").read_text())
        assert rebuilt["state"] == "stopped" and rebuilt["attempts"][0]["handle"]["pid"] == training.pid
    finally:
        if training.poll() is None:
            os.killpg(training.pid, signal.SIGKILL)


def test_every_kind_is_built_from_what_its_record_keeps():
    from verl_deploy.backends.registry import KINDS, UnknownBackend, backend_class, choose, make_backend, runs_here

    options = {"local": {"reuse_ray": True}, "docker": {}, "ray": {"address": "http://head:8265", "env": {"A": "1"}},
               "slurm": {"scheduler": {"partition": "a800", "time": "1:00:00"}}, "kuberay": {"scheduler": {"namespace": "rl"}}}
    for kind in KINDS:
        backend = make_backend(kind, options[kind], None, "verl-npu", "/verl")
        assert backend.kind == kind and backend_class(kind) is type(backend)
    assert make_backend("docker", {}, None, "verl-npu", "/data/verl").remote_base == "/data/verl/verl-deploy-runs"
    assert make_backend("slurm", options["slurm"]).options.partition == "a800"
    assert [k for k in KINDS if runs_here(k)] == ["local", "docker"]
    assert (choose("auto", ray_address="http://h:8265", container="c"), choose("auto", ray_address=None, container="c"),
            choose("auto", ray_address=None, container=None), choose("slurm", ray_address=None, container=None)) == \
        ("ray", "docker", "local", "slurm")
    with pytest.raises(UnknownBackend):
        backend_class("podman")


KIND_NAMES = {"local", "docker", "ray", "slurm", "kuberay"}
ASKED = {"backend", "kind", "chosen"}  # what holds a backend's kind where it is compared


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _kinds(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def test_no_code_outside_backends_compares_a_backends_kind():
    """Recovery, records, notices, views and the CLI ask the backend (a method, a capability), never its kind."""
    package = ROOT / "src" / "verl_deploy"
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(package / "backends"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(_name(s) in ASKED for s in sides) and any(_kinds(s) & KIND_NAMES for s in sides):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
