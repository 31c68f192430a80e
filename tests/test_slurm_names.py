"""A real one-node Slurm whose NodeName does not resolve (`NodeName=vdnode NodeAddr=127.0.0.1`), with a real Ray.

The job finds the Ray head's address from Slurm (the node's NodeAddr) when nobody gives one; a job
whose own scripts fail before the training starts is reported as that, with the step, the exit
status and the script's lines, never as a failure of the training.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import slurmcluster
from conftest import run_cli, skip_module_without
from test_slurm import job_host, launch, node_ray, status  # noqa: F401  (fixtures: this module's cluster)

skip_module_without("ray")
WHY_NOT = slurmcluster.available()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")
NODE = "vdnode"


@pytest.fixture(scope="module")
def slurm():
    try:
        socket.getaddrinfo(NODE, None)
        pytest.skip(f"{NODE} resolves on this host: the test needs a NodeName that does not")
    except socket.gaierror:
        pass
    cluster = slurmcluster.start(devices=8, gres="npu", node_name=NODE)
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("job_host", ["own ray"], indirect=True)
def test_a_node_whose_name_does_not_resolve_gets_the_head_address_from_slurm(job_host):
    job_host["env"].pop("VERL_DEPLOY_MASTER_ADDR")  # nobody gives the head's address: the job finds it
    result = launch(job_host, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert final["step"] == 6
    log = Path(final["log"]).read_text()
    assert f"Ray head {NODE} at 127.0.0.1 (from Slurm's NodeAddr 127.0.0.1)" in log
    assert "started this run's Ray head at 127.0.0.1:" in log and "Total training steps: 6" in log


@pytest.mark.parametrize("job_host", ["own ray"], indirect=True)
def test_a_job_whose_script_fails_before_the_training_says_which_step(job_host):
    job_host["env"].pop("VERL_DEPLOY_MASTER_ADDR")
    args = job_host["env"]["RAY_START_ARGS"]
    job_host["env"]["RAY_START_ARGS"] = f"{args} --no-such-ray-option"  # `ray start` on the node refuses it
    result = launch(job_host, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed", result.stderr[-3000:]
    failure = final["failure"]
    assert failure["class"] == "script_failed" and failure["step"] == "starting the Ray head", failure
    assert failure["cause"].startswith("the training never started: verl-deploy's start_verl.sh failed at "
                                       "starting the Ray head (exit status 2); its last lines: ")
    assert "no-such-ray-option" in failure["cause"]  # ray's own word, from the job's output
    assert "no known failure" not in json.dumps(final) and final["attempts"][0]["failure"] == {
        k: v for k, v in failure.items() if k not in ("decision", "next")}  # the run's failure adds what comes next
    assert "next" not in failure or failure["next"]["command"].startswith("verl-deploy ")
    assert len(final["attempts"]) == 1  # the scripts' failure is not retried as if the training had failed
    assert status(job_host, final["id"])["failure"]["cause"] == failure["cause"]
    shown = " ".join(run_cli("status", final["id"], env=job_host["env"]).stdout.split())
    assert "failure: script_failed — the training never started: verl-deploy's start_verl.sh failed at starting " \
           "the Ray head (exit status 2)" in shown and "fix: read the job's output" in shown, shown
