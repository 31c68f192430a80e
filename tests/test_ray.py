"""`launch --backend ray`: Ray Jobs on a real Ray head started here, with 8 NPU as a custom resource.

No accelerator is needed: verl asks Ray for {"NPU": 1} bundles and the stand-in trainer asks for
nothing, so a head started with --resources '{"NPU": 8}' stands for an Ascend node. Only the
cluster this module starts is stopped at the end (by its own temp dir, not a global `ray stop`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ENV_BIN, VERL_BIN, env_tool, run_cli
from rayports import free_port, kill_processes_naming, node_ports

ray = pytest.importorskip("ray")
STANDIN = Path(__file__).parent / "standin_trainer.py"
# the `ray` console script the README's test command installed beside this interpreter (never a base one)
RAY_BIN = env_tool("ray") or str(ENV_BIN / "ray")




def ray_env() -> dict:
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": f"{Path(sys.executable).parent}:{Path(RAY_BIN).parent}:{os.environ['PATH']}"}


def stop_cluster(temp_dir: str) -> None:
    """Kill the Ray processes of one cluster (found by its temp dir), leaving any other Ray alone."""
    kill_processes_naming(temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    temp_dir = tempfile.mkdtemp(prefix="vdr-", dir="/tmp")  # short: Ray's unix sockets live here
    gcs, dashboard = free_port(), free_port()
    started = subprocess.run([RAY_BIN, "start", "--head", f"--port={gcs}", f"--dashboard-port={dashboard}",
                              "--dashboard-host=127.0.0.1", "--num-cpus=2", "--resources", '{"NPU": 8}',
                              f"--temp-dir={temp_dir}", *node_ports(head=True),
                              "--disable-usage-stats"], capture_output=True, text=True, env=ray_env(), timeout=180)
    assert started.returncode == 0, started.stderr[-2000:]
    address = f"http://127.0.0.1:{dashboard}"
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + 60
    while True:
        try:
            JobSubmissionClient(address).list_jobs()
            break
        except Exception:
            assert time.monotonic() < deadline, "the job server did not come up"
            time.sleep(0.5)
    yield {"address": address, "client": JobSubmissionClient(address)}
    stop_cluster(temp_dir)


@pytest.fixture()
def job_host(npu_host, cluster):
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1", PATH=f"{Path(sys.executable).parent}:{npu_host['env']['PATH']}")
    args = ["--yes", "--backend", "ray", "--ray-address", cluster["address"], "--run-dir", str(verl),
            "--ckpts-dir", str(npu_host["tmp"] / "ckpts"), "--train-steps", "6", "--save-freq", "2",
            "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"),
            "--job-env", "STANDIN_STEP_SECONDS", "--job-env", "STANDIN_FAIL"]
    return {"env": env, "args": args, "cluster": cluster}


def launch(job_host, *extra, env=None):
    full = {**os.environ, **job_host["env"], **(env or {}), "COLUMNS": "200"}
    return subprocess.run([*VERL_BIN, "launch", *job_host["args"], *extra], capture_output=True, text=True,
                          env=full, timeout=300)


def test_a_run_is_submitted_as_a_ray_job_and_followed_to_the_end(job_host):
    result = launch(job_host, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert final["backend"] == "ray" and final["step"] == 6
    jobs = {j.submission_id: j for j in job_host["cluster"]["client"].list_jobs()}
    job = jobs[f"verl-deploy-{final['id']}-attempt-1"]
    assert job.status == "SUCCEEDED" and job.entrypoint == "bash run_training.sh"
    assert "ASCEND_RT_VISIBLE_DEVICES" in job.runtime_env["env_vars"]
    assert "Training Progress" in Path(final["log"]).read_text()


def test_launch_prints_none_of_rays_own_info_lines(job_host):
    result = launch(job_host, "--follow")  # for people: the confirmation, events, the end; Ray's logging is not ours
    assert result.returncode == 0, result.stderr[-3000:]
    leaked = [line for line in (result.stdout + result.stderr).splitlines() if re.search(r"\bINFO\b \S+\.py:\d+ --", line)]
    assert leaked == [] and "succeeded at step 6/6" in result.stdout


def test_evidence_of_a_ray_job_holds_the_job_servers_record_and_says_where_the_stacks_are(job_host):
    run = json.loads(launch(job_host, "--json", env={"STANDIN_STEP_SECONDS": "2"}).stdout)
    result = run_cli("evidence", run["id"], "--json", env=job_host["env"])
    evidence = json.loads(result.stdout)
    job = json.loads((Path(evidence["folder"]) / "ray-job.json").read_text())
    assert job["submission_id"] == f"verl-deploy-{run['id']}-attempt-1" and job["status"] in ("RUNNING", "PENDING")
    assert any("dashboard" in problem for problem in evidence["problems"]) and evidence["stacks"] == []
    assert run_cli("stop", run["id"], env=job_host["env"]).returncode == 0


def test_a_device_oom_resubmits_with_offload_and_resumes(job_host):
    result = launch(job_host, "--follow", "--json", env={"STANDIN_FAIL": "device_oom"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    assert [a["features"] for a in final["attempts"]] == [[], ["offload"], ["recompute"]]
    assert final["attempts"][1]["resumed_from_step"] == 2
    statuses = {j.submission_id: j.status for j in job_host["cluster"]["client"].list_jobs()}
    assert statuses[f"verl-deploy-{final['id']}-attempt-1"] in ("STOPPED", "FAILED")
    assert statuses[f"verl-deploy-{final['id']}-attempt-3"] == "SUCCEEDED"


def test_more_devices_than_the_cluster_has_are_refused_before_submitting(job_host):
    before = len(job_host["cluster"]["client"].list_jobs())
    result = launch(job_host, "--devices", "0-15")
    assert result.returncode == 1
    assert "needs 1 node(s) x 16 NPU = 16; the cluster has 1 node(s), 8 NPU" in " ".join(result.stderr.split())
    result = launch(job_host, "--nnodes", "2")
    assert result.returncode == 1 and "needs 2 node(s) x 8 NPU" in " ".join(result.stderr.split())
    assert len(job_host["cluster"]["client"].list_jobs()) == before


def test_a_gpu_run_on_an_npu_cluster_names_the_resource(job_host):
    result = launch(job_host, "--device", "gpu", "--framework", "fsdp")
    assert result.returncode == 1 and "registers NPU, not GPU" in " ".join(result.stderr.split())


def test_stop_stops_the_job_and_the_key_never_goes_into_the_job(job_host):
    refused = launch(job_host, "--job-env", "SWANLAB_API_KEY=sk-x")
    assert refused.returncode == 1 and "must not go into the job" in refused.stderr
    result = launch(job_host, "--json", "--swanlab", "yes", "--swanlab-host", "http://127.0.0.1:9",
                    env={"STANDIN_FAIL": "hang", "SWANLAB_API_KEY": "sk-secret-ray-77"})
    run = json.loads(result.stdout)
    submission = f"verl-deploy-{run['id']}-attempt-1"
    job = next(j for j in job_host["cluster"]["client"].list_jobs() if j.submission_id == submission)
    assert "sk-secret-ray-77" not in json.dumps(job.runtime_env)
    assert job.runtime_env["env_vars"]["SWANLAB_API_HOST"] == "http://127.0.0.1:9/api"  # what swanlab reads
    assert run_cli("stop", run["id"], env=job_host["env"]).returncode == 0
    deadline = time.monotonic() + 60
    while job_host["cluster"]["client"].get_job_status(submission) not in ("STOPPED", "FAILED"):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert json.loads(run_cli("status", run["id"], "--json", env=job_host["env"]).stdout)["state"] == "stopped"
