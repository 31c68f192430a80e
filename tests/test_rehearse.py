"""`launch --rehearse` with the stand-in trainer: two short runs (train and save, then resume) before the real
one; the real run starts only after a good rehearsal, never after a bad one; `plan --rehearse` shows the changes."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli
from test_launch import launch, trainer, wait_for  # noqa: F401 - the stand-in trainer's fixture


def _runs(trainer) -> list[dict]:
    return json.loads(run_cli("runs", "--json", env=trainer["env"]).stdout)["runs"]


def _record(run_id: str, trainer) -> dict:
    return json.loads(run_cli("status", run_id, "--json", env=trainer["env"]).stdout)


def test_a_good_rehearsal_saves_resumes_and_then_the_real_run_starts(trainer):
    result = launch(trainer, "--rehearse", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    real = json.loads(result.stdout)
    assert "rehearsal: resumed from step 2 and trained step 3" in result.stderr
    ids = [r["id"] for r in _runs(trainer)]
    assert len(ids) == 3 and real["id"] == ids[0]  # newest first: the real run came last
    save, resume = _record(ids[2], trainer), _record(ids[1], trainer)
    assert save["state"] == "succeeded" and save["step"] == 2 and save["last_checkpoint_step"] == 2
    assert resume["state"] == "succeeded" and resume["step"] == 3 and resume["attempts"][0]["resumed_from_step"] == 2
    plan = json.loads((Path(save["log"]).parent / "scripts" / "plan.json").read_text())
    assert plan["spec"]["max_response_length"] == 8192 // 4 and plan["spec"]["max_prompt_length"] == 2048 // 4
    assert plan["spec"]["train_steps"] == 2 and plan["spec"]["max_oom_retries"] == 0
    assert plan["derived"]["ckpts_dir"].startswith(str(trainer["ckpts"]) + "-rehearsal/")
    final = wait_for(trainer, real["id"], lambda d: d["state"] in ("succeeded", "failed"))
    assert final["state"] == "succeeded" and final["step"] == 8
    assert final["attempts"][0]["resumed_from_step"] is None  # never from the rehearsal's checkpoints
    assert (trainer["ckpts"] / "latest_checkpointed_iteration.txt").read_text() == "8"


def test_a_failed_rehearsal_is_diagnosed_and_the_real_run_never_starts(trainer):
    result = launch(trainer, "--rehearse", "--json", env={"STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "1"})
    assert result.returncode == 1
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["field"] == "rehearsal" and "device_oom" in finding["message"]
    assert "the real run was not started" in finding["message"] and finding["fix"]
    runs = _runs(trainer)
    assert len(runs) == 1 and runs[0]["state"] == "failed"  # the rehearsal's record, diagnosed; no real run
    assert not (trainer["ckpts"] / "latest_checkpointed_iteration.txt").exists()


def test_rehearse_only_runs_just_the_rehearsal_and_plan_shows_what_it_changes(trainer):
    result = launch(trainer, "--rehearse-only", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    rehearsal = json.loads(result.stdout)["rehearsal"]
    assert [r["state"] for r in rehearsal["runs"]] == ["succeeded", "succeeded"] and len(_runs(trainer)) == 2
    assert rehearsal["runs"][1]["resumed_from_step"] == 2
    shown = run_cli("plan", "--json", "--rehearse", "--train-steps", "8", env=trainer["env"])
    changes = json.loads(shown.stdout)["rehearsal"]
    assert changes["train_steps"] == 3 and changes["save_step"] == 2 and changes["max_response_length"] == 2048
    human = run_cli("plan", "--rehearse", env=trainer["env"])
    assert "rehearsal (launch --rehearse): 3 step(s), saving at step 2 and resuming from it" in human.stdout
