"""`launch --backend slurm` on a real one-node Slurm cluster (slurmctld + slurmd + munge) with a real Ray.

The cluster (tests/slurmcluster.py) announces 8 npu as a count-only gres; the job that
`verl-deploy launch` submits runs the generated start_verl.sh on the node, which starts a real
Ray head with 8 NPU as a custom resource, then the stand-in trainer. Everything runs on free
ports; every daemon and Ray process a test starts is ended by pid or by its own temp dir.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import slurmcluster
from conftest import ENV_BIN, VERL_BIN, env_tool, has_shellcheck, run_cli, skip_module_without
from rayports import start_ray_head
from test_ray import STANDIN, free_port, stop_cluster

skip_module_without("ray")
WHY_NOT = slurmcluster.available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
RAY_BIN = env_tool("ray") or str(ENV_BIN / "ray")  # the test environment's own ray, never a base one

# `ray stop` inside the job would end every Ray on this shared host: the shim ends only this test's cluster
RAY_SHIM = """#!/usr/bin/env bash
if [ "$1" = stop ]; then exec {python} {tests}/slurmcluster.py stop-ray "$VD_TEST_RAY_DIR"; fi
exec {ray} "$@"
"""


@pytest.fixture(scope="module")
def slurm():
    cluster = slurmcluster.start(devices=8, gres="npu")
    yield cluster
    cluster.stop()


def ray_ports() -> str:
    return (f"--dashboard-agent-listen-port={free_port()} --dashboard-agent-grpc-port={free_port()} "
            f"--metrics-export-port={free_port()} --runtime-env-agent-port={free_port()} --include-dashboard=false "
            f"--ray-client-server-port={free_port()}")


@pytest.fixture(scope="module")
def node_ray(slurm):
    """A Ray head already running on the node at the run's address: start_verl.sh reuses it (and leaves it up),
    so the tests about recovery do not wait for a Ray start per submission. The first test starts its own."""
    ray_dir = tempfile.mkdtemp(prefix="vds-", dir="/tmp")
    port = free_port()
    started = start_ray_head([RAY_BIN, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                              "--num-cpus=1", "--resources", '{"NPU": 8}', f"--temp-dir={ray_dir}",
                              "--disable-usage-stats", *ray_ports().split()],
                             {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HOME": ray_dir},
                             ray_dir)
    assert started.returncode == 0, started.stderr[-2000:]
    yield {"port": port, "dir": ray_dir}
    stop_cluster(ray_dir)


@pytest.fixture()
def job_host(npu_host, slurm, request):
    tmp = npu_host["tmp"]
    verl = tmp / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    own_ray = getattr(request, "param", None) == "own ray"
    shared = None if own_ray else request.getfixturevalue("node_ray")
    ray_dir = tempfile.mkdtemp(prefix="vds-", dir="/tmp") if own_ray else shared["dir"]
    shim = tmp / "shim"
    shim.mkdir()
    (shim / "ray").write_text(RAY_SHIM.format(python=sys.executable, tests=Path(__file__).parent, ray=RAY_BIN))
    (shim / "ray").chmod(0o755)
    (tmp / "ports.yaml").write_text(f"ray_port: {free_port() if own_ray else shared['port']}\n")
    env = dict(npu_host["env"], **slurm.env, STANDIN_STEP_SECONDS="0.2", VD_TEST_RAY_DIR=ray_dir,
               RAY_USAGE_STATS_ENABLED="0", RAY_START_ARGS=f"--num-cpus=1 --temp-dir={ray_dir} {ray_ports()}",
               VERL_DEPLOY_MASTER_ADDR="127.0.0.1", RAY_AUTH_MODE="disabled",
               PATH=f"{shim}:{npu_host['env']['PATH']}")
    args = ["--yes", "--backend", "slurm", "--partition", slurm.partition, "--run-dir", str(verl),
            "--ckpts-dir", str(tmp / "ckpts"), "--train-steps", "6", "--save-freq", "2",
            "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"), "--config", str(tmp / "ports.yaml")]
    yield {"env": env, "args": args, "slurm": slurm, "tmp": tmp, "ray_dir": ray_dir}
    slurm.run("scancel", f"--partition={slurm.partition}")  # a failed test's jobs must not hold the node (our cluster)
    if own_ray:
        stop_cluster(ray_dir)


def launch(job_host, *extra, env=None, timeout=240):
    full = {**os.environ, **job_host["env"], **(env or {}), "COLUMNS": "200"}
    return subprocess.run([*VERL_BIN, "launch", *job_host["args"], *extra], capture_output=True, text=True,
                          env=full, timeout=timeout)


def status(job_host, run_id):
    return json.loads(run_cli("status", run_id, "--json", env=job_host["env"]).stdout)


def wait_for(job_host, run_id, predicate, timeout=120):
    deadline = time.monotonic() + timeout
    data = {}
    while time.monotonic() < deadline:
        data = status(job_host, run_id)
        if predicate(data):
            return data
        time.sleep(0.5)
    raise AssertionError(f"timed out; last status: {json.dumps(data)[:3000]}")


def slurm_job(job_host, job_id: str) -> dict:
    shown = job_host["slurm"].run("scontrol", "show", "job", "-o", job_id).stdout
    return dict(part.split("=", 1) for part in shown.split() if "=" in part)


def job_count(job_host) -> int:
    return len([line for line in job_host["slurm"].run("scontrol", "show", "job", "-o").stdout.splitlines()
                if line.startswith("JobId=")])


@pytest.mark.parametrize("job_host", ["own ray"], indirect=True)  # the job starts (and stops) Ray itself
def test_a_run_is_submitted_with_sbatch_and_followed_to_the_end(job_host):
    result = launch(job_host, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert final["backend"] == "slurm" and final["step"] == 6
    handle_job = final["scheduler"]
    assert handle_job["scheduler"] == "slurm" and handle_job["state"] == "COMPLETED"
    log = Path(final["log"]).read_text()
    job_id = log.split("slurm job ", 1)[1].split(":", 1)[0]
    job = slurm_job(job_host, job_id)
    assert job["JobState"] == "COMPLETED" and job["TresPerNode"] == "gres:npu:8" and job["Partition"] == "debug"
    assert job["JobName"] == f"verl-deploy-{final['id']}-attempt-1"
    assert handle_job["nodes"] == job["NodeList"]  # the pump keeps the nodes Slurm gave the job
    handle = json.loads((Path(final["directory"]) / "run.json").read_text())["attempts"][0]["handle"]
    assert handle["devices"]["where"] is None and f"srun --jobid {job_id} --overlap" in handle["devices"]["why"]
    # the job ran start_verl.sh on the node: a real Ray head with the devices, then the trainer
    assert "Ray runtime started" in log and "Total training steps: 6" in log
    assert not [p for p in psutil.process_iter(["cmdline"]) if job_host["ray_dir"] in " ".join(p.info["cmdline"] or [])]
    assert log.index("submitted") < log.index("RUNNING") < log.index("Total training steps")
    scripts = Path(final["log"]).parent / "scripts"
    if has_shellcheck():
        checked = subprocess.run(["shellcheck", str(scripts / "submit.sbatch")], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout


def test_a_device_oom_resubmits_with_the_next_feature_and_resumes(job_host):
    result = launch(job_host, "--follow", "--json", env={"STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3"})
    final = json.loads(result.stdout)
    why = json.dumps({k: final.get(k) for k in ("failure", "attempts", "end", "notices")}, default=str)[-4000:]
    assert final["state"] == "succeeded", why + "\n" + "".join(  # the failure, then each attempt's log tail
        Path(a["log"]).read_text(errors="replace")[-1500:] for a in final["attempts"] if Path(a["log"]).exists())
    attempts = final["attempts"]
    assert [a["features"] for a in attempts] == [[], ["offload"], ["recompute"]]
    assert [a["failure"]["class"] if a["failure"] else None for a in attempts] == ["device_oom", "device_oom", None]
    assert attempts[1]["resumed_from_step"] == 2 and attempts[2]["resumed_from_step"] == 4
    jobs = []
    for attempt in attempts:
        log = Path(attempt["log"]).read_text()
        jobs.append(log.split("slurm job ", 1)[1].split(":", 1)[0])
    assert len(set(jobs)) == 3  # one sbatch per attempt
    assert "Setting global step to 2" in Path(attempts[1]["log"]).read_text()
    assert slurm_job(job_host, jobs[2])["JobState"] == "COMPLETED"
    assert slurm_job(job_host, jobs[0])["JobState"] in ("CANCELLED", "FAILED")


def test_a_queued_run_shows_why_and_stop_cancels_the_job(job_host):
    slurm = job_host["slurm"]
    blocker = slurm.run("sbatch", "--parsable", "--gres=npu:8", "--output=/dev/null", "--wrap", "sleep 120").stdout.strip()
    try:
        started = launch(job_host, "--json", "--stall-minutes", "0.05", env={"STANDIN_FAIL": "hang"})
        assert started.returncode == 0, started.stderr[-3000:]
        run_id = json.loads(started.stdout)["id"]
        pending = wait_for(job_host, run_id, lambda d: (d.get("scheduler") or {}).get("state") == "PENDING"
                           and d["scheduler"].get("reason"))  # the first look may come before Slurm gave one
        assert pending["state"] == "running" and pending["scheduler"]["reason"] in ("Resources", "Priority")
        text = run_cli("status", run_id, env=job_host["env"]).stdout
        assert "slurm job" in text and "PENDING (" in text
        time.sleep(5)  # longer than --stall-minutes: waiting in the queue is not a stall
        record = json.loads((Path(pending["directory"]) / "run.json").read_text())
        assert record["attempts"][0]["handle"]["scheduler"]["state"] == "PENDING" and record["notices"] == []
    finally:
        slurm.run("scancel", blocker)
    running = wait_for(job_host, run_id, lambda d: d["step"] >= 1)
    assert running["scheduler"]["state"] == "RUNNING"
    assert run_cli("stop", run_id, env=job_host["env"]).returncode == 0
    log = Path(running["log"]).read_text()
    job_id = log.split("slurm job ", 1)[1].split(":", 1)[0]
    deadline = time.monotonic() + 60
    while slurm_job(job_host, job_id).get("JobState") not in ("CANCELLED",):
        assert time.monotonic() < deadline, slurm_job(job_host, job_id)
        time.sleep(0.5)
    assert status(job_host, run_id)["state"] == "stopped"


def test_a_job_the_partition_can_never_hold_is_refused_before_sbatch(job_host):
    before = job_count(job_host)
    result = launch(job_host, "--devices", "0-15")
    assert result.returncode == 1
    said = " ".join(result.stderr.split())
    assert "the job needs 1 node(s) x 16 npu = 16; partition debug has 1 node(s), 0 with 16 npu" in said, said
    result = launch(job_host, "--nnodes", "2")
    assert result.returncode == 1 and "needs 2 node(s) x 8 npu = 16" in " ".join(result.stderr.split())
    result = launch(job_host, "--gres-name", "gpu")
    assert result.returncode == 1 and "0 with 8 gpu" in " ".join(result.stderr.split())
    result = launch(job_host, "--time", "soon")
    assert result.returncode == 1 and "--time" in result.stderr and "Traceback" not in result.stderr
    assert job_count(job_host) == before


def test_a_failed_node_resubmits_the_same_run_and_it_resumes(job_host):
    slurm = job_host["slurm"]
    started = launch(job_host, "--json", env={"STANDIN_STEP_SECONDS": "1.0"})
    assert started.returncode == 0, started.stderr[-3000:]
    run_id = json.loads(started.stdout)["id"]
    wait_for(job_host, run_id, lambda d: (d.get("last_checkpoint_step") or 0) >= 2)
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DOWN", "Reason=verl-deploy-test")
    try:
        wait_for(job_host, run_id, lambda d: len(d["attempts"]) == 2, timeout=90)
    finally:
        slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=RESUME")
    final = wait_for(job_host, run_id, lambda d: d["state"] in ("succeeded", "failed", "stopped"), timeout=180)
    assert final["state"] == "succeeded", json.dumps(final)[:3000]
    first, second = final["attempts"]
    assert first["reason"] == "launch" and second["reason"].startswith("resubmitted: the scheduler ended the job (NODE_FAIL")
    assert second["features"] == [] and second["resumed_from_step"] >= 2
    assert first["failure"]["class"] == "scheduler_interrupted" and "NODE_FAIL" in first["failure"]["cause"]
    assert "Setting global step to" in Path(second["log"]).read_text()


def test_the_generated_job_submitted_by_hand_runs_from_its_folder(job_host):
    """The README's path without launch: generate --scheduler slurm, then `sbatch submit.sbatch` in the folder."""
    out = job_host["tmp"] / "by-hand"
    args = [a for a in job_host["args"] if a not in ("--yes", "--backend", "slurm")]
    generated = run_cli("generate", "--output-dir", str(out), "--scheduler", "slurm", *args, env=job_host["env"])
    assert generated.returncode == 0, generated.stderr
    submitted = subprocess.run(["sbatch", "--parsable", "submit.sbatch"], cwd=out, capture_output=True, text=True,
                               env={**os.environ, **job_host["env"]}, timeout=60)
    job_id = submitted.stdout.strip()
    assert submitted.returncode == 0 and job_id.isdigit(), submitted.stderr
    deadline = time.monotonic() + 120
    while slurm_job(job_host, job_id).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < deadline, slurm_job(job_host, job_id)
        time.sleep(1)
    output = (out / f"verl-deploy-{job_id}.out").read_text()
    assert slurm_job(job_host, job_id)["JobState"] == "COMPLETED", output[-3000:]
    assert "Total training steps: 6" in output and "start_verl.sh on the head exited with status 0" in output
    assert output.index("Ray head ") < output.index("[verl-deploy] handing over to the training:") \
        < output.index("Total training steps")
    assert not list(out.glob(".head-exit-*"))
