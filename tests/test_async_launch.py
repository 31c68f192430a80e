"""launch -> watch -> OOM retry on the pool that failed, for the async modes (the stand-in speaks their metrics).

The stand-in trainer (tests/standin_trainer.py) is installed as verl.trainer.main_ppo (the V1 trainer's entry)
and verl.experimental.fully_async_policy.fully_async_main in a temporary verl tree. verl's own validation is off
here (--no-verify): that tree is the stand-in, not verl (tests/test_async_modes.py runs verl's validation).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from test_launch import STANDIN, launch

SPLIT = ["--train-tp", "2", "--train-pp", "1", "--trainer-gpus", "4", "--rollout-gpus", "4", "--mini-batch-size", "8"]
MODES = {
    "separate-async": (["--mode", "separate-async", *SPLIT], "training/off_policy/trajectory_staleness/mean"),
    "fully-async": (["--mode", "fully-async", *SPLIT], "fully_async/count/stale_samples_processed"),
    "colocate-async": (["--mode", "colocate-async"], "training/off_policy/trajectory_staleness/mean"),
}


@pytest.fixture()
def async_trainer(trainer):
    verl = trainer["verl"]
    for module in ("verl/trainer/main_ppo.py", "verl/experimental/fully_async_policy/fully_async_main.py"):
        (verl / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STANDIN, verl / module)
    trainer["args"] = [*trainer["args"], "--verl-version", "0.9.1", "--no-verify"]
    return trainer


from test_launch import trainer  # noqa: E402,F401  (the fixture)


@pytest.mark.parametrize("mode", list(MODES))
def test_an_async_run_succeeds_and_status_shows_its_staleness_metrics(async_trainer, mode):
    flags, metric = MODES[mode]
    result = launch(async_trainer, *flags, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert final["step"] == 8 and metric in final["metrics"]
    log = open(final["attempts"][0]["log"]).read()
    entry = "fully_async_main" if mode == "fully-async" else "verl.trainer.main_ppo"
    assert entry in log or entry in open(final["attempts"][0]["log"].rsplit("/", 1)[0] + "/scripts/run_training.sh").read()
    # the report plots the mode's staleness / weight-sync metrics together, under their own heading
    out = async_trainer["ckpts"].parent / "report"
    shown = run_cli("report", final["id"], "--output", str(out), "--json", env=async_trainer["env"])
    assert shown.returncode == 0, shown.stderr[-2000:]
    written = json.loads(shown.stdout)
    groups = {Path(p).stem.split("-")[0] for p in written["plots"]}
    assert "async" in groups and "Off-policy staleness and weight sync" in Path(written["html"]).read_text()


@pytest.mark.parametrize("mode", ["separate-async", "fully-async"])
def test_an_oom_in_the_rollout_pool_lowers_the_rollout_memory_not_the_trainers_features(async_trainer, mode):
    flags, _ = MODES[mode]
    result = launch(async_trainer, *flags, "--follow", "--json", env={"STANDIN_FAIL": "rollout_oom"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    attempts = final["attempts"]
    assert attempts[0]["failure"]["class"] == "device_oom" and attempts[0]["failure"]["phase"] == "rollout"
    assert [a["changes"] for a in attempts] == [{}, {"gpu_memory_utilization": 0.5}]
    assert all(a["features"] == [] for a in attempts)  # no offload was added to the trainer pool
    assert "in the rollout pool" in attempts[1]["reason"], attempts[1]["reason"]


@pytest.mark.parametrize("mode", list(MODES))
def test_an_oom_in_the_trainer_pool_adds_offload(async_trainer, mode):
    flags, _ = MODES[mode]
    result = launch(async_trainer, *flags, "--follow", "--json", env={"STANDIN_FAIL": "device_oom",
                                                                      "STANDIN_FAIL_STEP": "3"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    attempts = final["attempts"]
    assert attempts[0]["failure"]["phase"] == "actor_update" and attempts[1]["features"] == ["offload"]
    assert attempts[1]["changes"].get("gpu_memory_utilization") is None  # the rollout's share is not the fix
    if mode != "colocate-async":  # colocated: one pool, nothing to name
        assert "in the trainer pool" in attempts[1]["reason"], attempts[1]["reason"]


def test_a_kv_cache_oom_of_the_colocated_async_rollout_lowers_its_memory_share(async_trainer):
    """colocate-async shares the devices: the rollout's OOM lowers gpu_memory_utilization, like dapo's."""
    flags, _ = MODES["colocate-async"]
    result = launch(async_trainer, *flags, "--follow", "--json", env={"STANDIN_FAIL": "rollout_oom"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    attempts = final["attempts"]
    assert attempts[0]["failure"]["phase"] == "rollout"
    assert set(attempts[1]["changes"]) == {"gpu_memory_utilization"} and attempts[1]["features"] == []
    shares = []
    for attempt in attempts:  # what each attempt's run_training.sh really sent
        script = Path(attempt["log"]).parent / "scripts" / "run_training.sh"
        shares.append(float(script.read_text().split("rollout.gpu_memory_utilization=", 1)[1].split()[0]))
    assert shares[1] == attempts[1]["changes"]["gpu_memory_utilization"] < shares[0], shares
