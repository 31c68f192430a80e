"""`verify-env`: verl's own validation on a machine with no accelerator and no container.

The environments are the ones the tests' real-verl cache holds (tests/realverl.py builds them with the same
`localenv.build`, so on a fresh machine that builder ran with pip for real); each test gets its own
VERL_DEPLOY_VERIFY_ENV_DIR with a link to one, so nothing is installed twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from test_verify import fixture_for, site_or_skip


@pytest.fixture()
def env_dir(tmp_path):
    site = site_or_skip("0.9.1")
    root = tmp_path / "verify-env"
    root.mkdir()
    (root / "verl-0.9.1").symlink_to(site)
    return {"VERL_DEPLOY_VERIFY_ENV_DIR": str(root)}


def test_verify_env_then_plan_verify_runs_verls_own_code_here(env_dir):
    ready = run_cli("verify-env", "0.9.1", "--recipe", str(fixture_for("0.9.1")), "--json", env=env_dir)
    assert ready.returncode == 0, ready.stderr
    data = json.loads(ready.stdout)
    assert data["recipe"] is True and Path(data["python"]).is_file()
    planned = run_cli("plan", "--verl-version", "0.9.1", "--verify", "--verify-env", "--json", env=env_dir)
    result = json.loads(planned.stdout)
    assert planned.returncode == 0 and result["verify"]["status"] == "passed", result["verify"]
    assert result["verify"]["verl_version"] == "0.9.1" and result["verify"]["run_dir"] == data["run_dir"]
    steps = {s["step"] for s in result["verify"]["steps"]}
    assert {"compose", "validate_config", "dataclass:actor_rollout_ref.actor", "import_entry"} <= steps
    # a value only verl's own dataclass rejects: verl's message, before any cluster is booked
    bad = run_cli("plan", "--verl-version", "0.9.1", "--verify", "--verify-env", "--json", "--override",
                  "actor_rollout_ref.actor.megatron.router_replay.mode=bogus", env=env_dir)
    refused = json.loads(bad.stdout)
    assert bad.returncode == 1 and refused["verify"]["status"] == "failed"
    assert any("Invalid router_replay mode: bogus" in f["message"] for f in refused["findings"])


def test_without_a_recipe_dapo_before_core_dapo_names_the_missing_entry(env_dir):
    assert run_cli("verify-env", "0.9.1", env=env_dir).returncode == 0
    planned = json.loads(run_cli("plan", "--verl-version", "0.9.1", "--dapo-source", "recipe", "--verify",
                                 "--verify-env", "--json", env=env_dir).stdout)
    entry = [f for f in planned["findings"] if f["field"] == "entry"]
    assert entry and "recipe.dapo.main_dapo does not import" in entry[0]["message"]
    core = json.loads(run_cli("plan", "--verl-version", "0.9.1", "--verify", "--verify-env", "--json",
                              env=env_dir).stdout)  # DAPO from verl's core (the 0.9 default) needs no recipe
    assert core["verify"]["status"] == "passed" and core["verify"]["entry"] == "verl.trainer.main_ppo", core["verify"]


def test_plan_verify_env_without_one_says_how_to_build_it(tmp_path):
    result = run_cli("plan", "--verl-version", "0.9.1", "--verify", "--verify-env",
                     env={"VERL_DEPLOY_VERIFY_ENV_DIR": str(tmp_path / "none")})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "verl-deploy verify-env 0.9.1" in errors[0]


@pytest.mark.parametrize("args, words", [(["0.5.0"], "no verify environment is known for verl 0.5.0"),
                                         (["0.9.1", "--recipe", str(FIXTURES)], "holds no dapo/ recipe")])
def test_verify_env_refusals_are_one_line(env_dir, args, words):
    result = run_cli("verify-env", *args, env=env_dir)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and words in errors[0], result.stderr
