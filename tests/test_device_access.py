"""Where a run's devices and processes can be read from: the backend says (Backend.device_access, Backend.evidence).

A job a scheduler placed on its nodes (Slurm, KubeRay, a Ray cluster) runs elsewhere: the live view and the stall
evidence say so and how to read them there, and never show this host's devices (or dump this host's pump) in
their place. Local and container runs are read here, the container's inside it (`docker exec`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAKES, HW, run_cli

RUN = "20261130-0202-da"
OPTIONS = {"local": {}, "docker": {}, "ray": {"address": "http://head:8265"},
           "slurm": {"scheduler": {"partition": "a800"}}, "kuberay": {"scheduler": {"namespace": "rl"}}}


def _backend(kind: str):
    from verl_deploy.backends.registry import make_backend

    return make_backend(kind, OPTIONS[kind], None, "verl-npu" if kind == "docker" else None, "/verl")


def test_each_backend_says_where_its_devices_can_be_read():
    from verl_deploy.backends.handle import Handle

    assert _backend("local").device_access(Handle(pid=1)) == {"where": "host"}
    assert _backend("docker").device_access(Handle(pid=1, container="verl-npu")) == {"where": "container",
                                                                                      "container": "verl-npu"}
    slurm = _backend("slurm").device_access(Handle(pid=1, job_id="77", scheduler={"nodes": "node[01-02]"}))
    assert slurm["where"] is None and "srun --jobid 77 --overlap" in slurm["why"] and "node[01-02]" in slurm["why"]
    kube = _backend("kuberay").device_access(Handle(pid=1, rayjob="vd-run-1", namespace="rl"))
    assert kube["where"] is None and "kubectl exec -n rl" in kube["why"] and "ray.io/node-type=head" in kube["why"]
    ray = _backend("ray").device_access(Handle(pid=1, job_id="raysubmit_1", address="http://head:8265"))
    assert ray["where"] is None and "http://head:8265" in ray["why"] and "dashboard" in ray["why"]


def _record(kind: str, handle: dict, devices: list[int] | None = None):
    from verl_deploy.runs.record import Attempt, RunRecord

    return RunRecord(RUN, kind, {"device": "npu", "devices": devices or [0, 1]}, backend_options=OPTIONS[kind],
                     attempts=[Attempt(n=1, features=[], reason="launch", handle=handle)])


def test_the_live_view_reads_devices_only_where_the_backend_says_it_can(monkeypatch):
    """This host's npu-smi lists 8 busy 910B3: a local run shows its two, a Slurm job's view shows none of them and
    says where they are, for a handle written now (the backend's word) and for one written before it was kept."""
    from verl_deploy.backends.handle import Handle
    from verl_deploy.views.devices import read_devices

    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPU_SMI", str(HW / "npu-smi-910b3-8npu-busy-container.txt"))
    local = read_devices(_record("local", {"pid": 1, "devices": {"where": "host"}}))
    assert [r.id for r in local.rows] == [0, 1] and local.problem is None
    handle = Handle(pid=1, job_id="77", scheduler={"state": "RUNNING", "nodes": "node[01-02]"})
    handle.devices = _backend("slurm").device_access(Handle(pid=1, job_id="77"))  # as start_attempt records it
    slurm = read_devices(_record("slurm", handle.to_dict()))
    assert slurm.rows == [] and slurm.problem is not None
    assert slurm.problem.startswith("not readable from this host") and "srun --jobid 77" in slurm.problem
    assert "node[01-02]" in slurm.problem  # the nodes the job got since
    old = read_devices(_record("kuberay", {"pid": 1, "rayjob": "vd-run-1", "namespace": "rl"}))  # no `devices`
    assert old.rows == [] and "not readable from this host" in (old.problem or "")


def _dead_run(state: Path, kind: str, handle: dict) -> None:
    from verl_deploy.runs.record import Attempt, RunRecord

    directory = state / "runs" / RUN
    log = directory / "attempt-1" / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("step:1 - a:1\n")
    record = RunRecord(id=RUN, backend=kind, spec={"device": "npu", "devices": [0, 1]}, state="running",
                       backend_options=OPTIONS[kind],
                       attempts=[Attempt(n=1, features=[], reason="launch", log=str(log), handle={**handle, "log": str(log)})])
    (directory / "run.json").write_text(json.dumps(record.as_json()))


def _stub(bin_dir: Path, name: str, calls: Path, output: str = "") -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nprintf "%s" "{output}"\n')
    (bin_dir / name).chmod(0o755)


@pytest.mark.parametrize("kind,handle,where", [
    ("slurm", {"job_id": "77"}, "srun --jobid 77 --overlap"),
    ("kuberay", {"rayjob": "vd-run-1", "namespace": "rl"}, "kubectl exec -n rl"),
])
def test_evidence_of_a_job_on_a_schedulers_nodes_takes_nothing_of_this_host(tmp_path, kind, handle, where):
    """The attempt's pid is the pump that follows the job on this host: it is not dumped, and this host's
    npu-smi is not run; the evidence says where the stacks and the devices are."""
    pump = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = tmp_path / "state"
        calls = tmp_path / "calls"
        _stub(tmp_path / "bin", "npu-smi", calls, "NPU 0 910B3")
        _stub(tmp_path / "bin", "py-spy", calls)
        _dead_run(state, kind, {"pid": pump.pid, **handle})
        result = run_cli("evidence", RUN, "--json", env={
            "VERL_DEPLOY_STATE_DIR": str(state), "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config"),
            "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, subprocess_only=True)
    finally:
        pump.kill()
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    folder = Path(summary["folder"])
    assert summary["stacks"] == [] and not calls.exists()  # neither py-spy nor npu-smi ran here
    assert any("no stack dumps from here" in p and where in p for p in summary["problems"])
    assert summary["devices"]["where"] is None
    devices = (folder / "devices.txt").read_text()
    assert devices.startswith("not readable from this host") and where in devices and "910B3" not in devices


def test_evidence_of_a_ray_job_whose_job_server_does_not_answer_says_so_beside_where_the_stacks_are(tmp_path):
    """The job server's record is asked over its REST API; a server that does not answer is one problem line naming
    the job, next to where the stacks are, and no ray-job.json is written."""
    import socket

    from verl_deploy.backends.handle import Handle
    from verl_deploy.backends.rayjobs import RayJobsBackend

    with socket.socket() as closed:  # a port nothing listens on once this socket is gone
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    taken = RayJobsBackend(f"http://127.0.0.1:{port}").evidence(
        Handle(pid=1, job_id="raysubmit_1", address=f"http://127.0.0.1:{port}"), tmp_path, time.monotonic() + 20)
    assert any(p.startswith("no stack dumps from here") and "raysubmit_1" in p for p in taken.problems)
    assert any(p.startswith("ray job raysubmit_1: ") for p in taken.problems), taken.problems
    assert not (tmp_path / "ray-job.json").exists() and taken.dumps == []


def _py_spy() -> str | None:
    from verl_deploy.backends.stacks import find_py_spy

    return find_py_spy()


@pytest.mark.skipif(_py_spy() is None or os.geteuid() != 0, reason="py-spy with ptrace (root) needed")
def test_a_container_runs_stacks_and_devices_are_taken_inside_it(tmp_path):
    """Backend docker: every command goes through `docker exec CONTAINER` (a docker whose exec runs the command on
    this host stands in for the engine: the container is this host), the stacks with py-spy there."""
    from verl_deploy.backends.handle import Handle

    calls = tmp_path / "docker.calls"
    shim = tmp_path / "bin" / "docker"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n[ "$1" = exec ] || exit 1\nshift 2\n'
                    '[ "$1" = ps ] && { echo "$TARGET_PID python3 -c waiting"; exit 0; }\nexec "$@"\n')  # only ours
    shim.chmod(0o755)
    target = subprocess.Popen([sys.executable, "-c", "def waiting_in_the_container():\n import time\n time.sleep(60)\n"
                                                     "waiting_in_the_container()"])
    try:
        time.sleep(0.5)
        env_path = f"{tmp_path / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}"
        old_path = os.environ["PATH"]
        os.environ.update(PATH=env_path, TARGET_PID=str(target.pid))
        try:
            (tmp_path / "stacks").mkdir()
            taken = _backend("docker").evidence(Handle(pid=1, container="verl-npu"), tmp_path, time.monotonic() + 40)
        finally:
            os.environ["PATH"] = old_path
            os.environ.pop("TARGET_PID", None)
    finally:
        target.kill()
    lines = calls.read_text().splitlines()
    assert "exec verl-npu ps -eo pid=,args=" in lines and any(" dump --nonblocking --pid " in line for line in lines)
    mine = [d for d in taken.dumps if d.pid == target.pid]
    assert mine and mine[0].file and "waiting_in_the_container" in Path(mine[0].file).read_text()
    assert all(line.startswith("exec verl-npu ") for line in lines)
