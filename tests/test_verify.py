"""verify and DAPO's source per release, against REAL verl (installed per release by tests/realverl.py)
and the real recipe code at the chosen commits (tests/fixtures/recipes, see SOURCES.md there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realverl
from conftest import FIXTURES, run_cli, run_scripts
from verl_deploy.pipeline import prepare
from verl_deploy.profiles.recipes import DAPO_SOURCES, dapo_source
from verl_deploy.verify import findings_for, verify_plan

RECIPES = FIXTURES / "recipes"


def site_or_skip(version: str) -> Path:
    site = realverl.verl_site(version)
    if site is None:
        pytest.skip(f"real verl {version} cannot be installed here: {realverl.why_not(version)}")
    return site


def fixture_for(version: str) -> Path:
    source = dapo_source(version)
    name = f"verl-v{version}" if source.kind == "in-tree" else f"verl-recipe-{source.short}"
    return RECIPES / name


def run_dir_with(tmp_path: Path, site: Path, recipe: Path | None) -> Path:
    """A verl source root as the scripts expect it: verl/ (the real release) and recipe/ (the real recipe code)."""
    root = tmp_path / "verl-root"
    root.mkdir()
    (root / "verl").symlink_to(site / "verl")
    if recipe is not None:
        shutil.copytree(recipe / "recipe", root / "recipe")
    return root


def python_with(tmp_path: Path, site: Path) -> Path:
    """A `python3` that has this verl, as on a host or in an image where verl is installed."""
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    return shim


def import_entry(version: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import recipe.dapo.main_dapo"], cwd=root, capture_output=True,
                          text=True, env=realverl.env_with_verl(version), timeout=300)


@pytest.mark.parametrize("version", sorted(DAPO_SOURCES))
def test_dapo_entry_imports_with_the_recipe_source_chosen_for_each_release(tmp_path, version):
    site = site_or_skip(version)
    result = import_entry(version, run_dir_with(tmp_path, site, fixture_for(version)))
    assert result.returncode == 0, result.stderr[-1500:]


@pytest.mark.parametrize("version, recipe, error", [
    ("0.9.1", "verl-recipe-e7f8895", "cannot import name 'TaskRunner' from 'verl.trainer.main_ppo'"),  # 0.9's pinned one
    ("0.8.0", "verl-recipe-ac8b84f", "No module named 'verl.trainer.main_ppo_v0'"),  # why 0.8 keeps its pin
])
def test_the_recipe_commits_not_chosen_really_fail_to_import(tmp_path, version, recipe, error):
    site = site_or_skip(version)
    result = import_entry(version, run_dir_with(tmp_path, site, RECIPES / recipe))
    assert result.returncode != 0 and error in result.stderr


def dapo_plan(version: str, root: Path, **flags):
    base = {"verl_version": version, "run_dir": str(root)}
    return prepare(flags={**base, **flags}, environ={}).plan


ONE_STEP_OFF_GPU = {"mode": "one-step-off", "framework": "fsdp", "device": "gpu", "trainer_gpus": 4, "rollout_gpus": 4}
# every release with the built-in example (DAPO, Megatron, 8 NPUs); FSDP on GPUs on both sides of the
# engine-worker change; one-step-off where the release's wheel ships its entry (0.6-0.7.0 keep it in the
# recipe, 0.7.1's wheel has only its configs: plan says to run from a source checkout there)
VERIFIED = [(version, {}) for version in ("0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")] + [
    ("0.6.1", {"framework": "fsdp", "device": "gpu"}), ("0.8.0", {"framework": "fsdp", "device": "gpu"}),
    ("0.8.0", ONE_STEP_OFF_GPU), ("0.9.0", ONE_STEP_OFF_GPU), ("0.9.1", ONE_STEP_OFF_GPU),
    ("0.9.1", {"mode": "one-step-off", "train_tp": 2, "train_pp": 1, "trainer_gpus": 4, "rollout_gpus": 4}),
    # 0.9.x plans DAPO from verl's core by default (the rows above); the recipe trainer stays available
    ("0.9.0", {"dapo_source": "recipe"}), ("0.9.1", {"dapo_source": "recipe"}),
]


@pytest.mark.parametrize("version,flags", VERIFIED, ids=[f"{v}-{'-'.join(str(x) for x in f.values()) or 'example'}"
                                                         for v, f in VERIFIED])
def test_verify_passes_the_generated_dapo_launch_with_real_verl(tmp_path, version, flags):
    site = site_or_skip(version)
    root = run_dir_with(tmp_path, site, fixture_for(version))
    plan = dapo_plan(version, root, **flags)
    result = verify_plan(plan, python=str(python_with(tmp_path, site)))
    assert result.status == "passed", result.as_dict()
    assert result.verl_version == version and result.where == "host"
    steps = [s["step"] for s in result.steps]
    assert {"compose", "validate_config", "dataclass:actor_rollout_ref.actor", "import_entry"} <= set(steps)
    assert [f.level for f in findings_for(result, plan, required=True)] == ["info"]


def test_one_step_off_on_the_0_7_1_wheel_is_refused_with_the_source_checkout_to_use(tmp_path):
    """verl 0.7.1's wheel has one_step_off_policy/config but no main_ppo.py (no __init__.py at the tag)."""
    site = site_or_skip("0.7.1")
    assert (site / "verl/experimental/one_step_off_policy/config").is_dir()
    assert not (site / "verl/experimental/one_step_off_policy/main_ppo.py").exists()
    plan = dapo_plan("0.7.1", run_dir_with(tmp_path, site, fixture_for("0.7.1")), **ONE_STEP_OFF_GPU)
    findings = findings_for(verify_plan(plan, python=str(python_with(tmp_path, site))), plan, required=True)
    [entry] = [f for f in findings if f.level == "error"]
    assert "verl.experimental.one_step_off_policy.main_ppo" in entry.message
    assert "git clone --branch v0.7.1" in entry.fix and "source checkout" in entry.fix
    notes = [f["message"] for f in json.loads(run_cli("plan", "--json", "--verl-version", "0.7.1", "--mode",
                                                       "one-step-off", "--framework", "fsdp", "--device", "gpu",
                                                       "--trainer-gpus", "4", "--rollout-gpus", "4").stdout)["findings"]]
    assert any("source checkout" in n for n in notes)
    dapo = json.loads(run_cli("plan", "--json", "--verl-version", "0.7.1").stdout)["findings"]
    assert not any("source checkout" in f["message"] for f in dapo)  # DAPO comes from the recipe: no such note


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_verify_fails_with_verls_own_message(tmp_path, version):
    site = site_or_skip(version)
    root = run_dir_with(tmp_path, site, fixture_for(version))
    python = str(python_with(tmp_path, site))
    # temperature 0 while validation samples: verl's validate_config asserts
    plan = dapo_plan(version, root, overrides=["actor_rollout_ref.rollout.temperature=0"])
    findings = findings_for(verify_plan(plan, python=python), plan, required=True)
    errors = [f for f in findings if f.level == "error"]
    assert len(errors) == 1 and errors[0].field == "temperature"
    assert "validation gen temperature should be greater than 0 when enabling do_sample" in errors[0].message
    assert "verl/utils/config.py:" in errors[0].message and "--temperature" in errors[0].fix
    # verl's batch assertion without dynamic batching: 3 prompts x 2 answers over 8 GPUs
    plan = dapo_plan(version, root, framework="fsdp", device="gpu", batch_size=3, n_resp_per_prompt=2,
                     mini_batch_size=3, features=["-dynamic_batch"])
    errors = [f for f in findings_for(verify_plan(plan, python=python), plan, required=True) if f.level == "error"]
    assert errors and "must be divisible by" in errors[0].message and errors[0].field in ("batch_size", "mini_batch_size")


def test_verify_reports_an_entry_that_does_not_import_with_the_checkout_command(tmp_path):
    site = site_or_skip("0.9.1")
    root = run_dir_with(tmp_path, site, RECIPES / "verl-recipe-e7f8895")  # what `git submodule update` gives on 0.9
    plan = dapo_plan("0.9.1", root, dapo_source="recipe")
    findings = findings_for(verify_plan(plan, python=str(python_with(tmp_path, site))), plan, required=True)
    entry = [f for f in findings if f.field == "entry"]
    assert entry and "cannot import name 'TaskRunner'" in entry[0].message
    assert "git -C recipe checkout ac8b84f" in entry[0].fix


def test_plan_verify_json_says_what_was_verified_and_by_which_verl(tmp_path):
    site = site_or_skip("0.9.1")
    root = run_dir_with(tmp_path, site, None)
    env = {"PATH": f"{python_with(tmp_path, site).parent}:{os.environ['PATH']}"}
    args = ["plan", "--verify", "--json", "--verl-version", "0.9.1", "--framework", "fsdp", "--device", "gpu",
            "--mode", "one-step-off", "--trainer-gpus", "4", "--rollout-gpus", "4", "--run-dir", str(root)]
    bad = run_cli(*args, "--override", "actor_rollout_ref.rollout.temperature=0", env=env)
    data = json.loads(bad.stdout)
    assert bad.returncode == 1 and data["verify"]["status"] == "failed" and data["verify"]["verl_version"] == "0.9.1"
    assert data["verify"]["entry"] == "verl.experimental.one_step_off_policy.main_ppo"
    assert any(f["field"] == "temperature" and f["area"] == "verify" for f in data["findings"])


def test_verify_without_verl_there_is_unavailable_not_a_crash(tmp_path):
    plan = dapo_plan("0.9.1", tmp_path)
    result = verify_plan(plan, python=sys.executable)  # the test environment's python has no verl
    assert result.status == "unavailable" and "cannot import verl" in result.detail
    assert [f.level for f in findings_for(result, plan, required=False)] == ["info"]  # launch goes on
    assert [f.level for f in findings_for(result, plan, required=True)] == ["error"]  # plan --verify asked for it
    missing = verify_plan(dapo_plan("0.9.1", tmp_path / "absent"), python=sys.executable)
    assert missing.status == "unavailable" and "does not exist" in missing.detail


def test_plan_shows_where_dapo_comes_from(tmp_path):
    result = run_cli("plan", "--verl-version", "0.9.1", "--dapo-source", "recipe", "--json")
    notes = [f["message"] for f in json.loads(result.stdout)["findings"] if f["level"] == "info"]
    assert any("verl-recipe ac8b84f" in n and "e7f8895" in n for n in notes), notes
    human = run_cli("plan", "--verl-version", "0.9.1", "--dapo-source", "recipe")
    assert "verl-recipe ac8b84f" in human.stdout


def test_start_script_checks_the_entry_imports_before_ray(tmp_path, stubs):
    out = tmp_path / "out"
    assert run_cli("generate", "--output-dir", str(out), "--verl-version", "0.9.1", "--dapo-source", "recipe",
                   "--run-dir", str(stubs["verl_root"])).returncode == 0
    error = "ImportError: cannot import name 'TaskRunner' from 'verl.trainer.main_ppo'"
    result = run_scripts(out, stubs, {"STUB_IMPORT_ERROR": error})
    assert result.returncode == 2
    assert error in result.stderr and "git -C recipe checkout ac8b84f" in result.stderr
    assert not (stubs["log"] / "ray.calls").exists()  # Ray was never started
    assert "recipe.dapo.main_dapo" in (stubs["log"] / "python3.checks").read_text()
    ok = run_scripts(out, stubs)
    assert ok.returncode == 0 and "start --head" in (stubs["log"] / "ray.calls").read_text()


def test_launch_is_blocked_by_what_verl_rejects_before_anything_starts(tmp_path):
    site = site_or_skip("0.9.1")
    root = run_dir_with(tmp_path, site, fixture_for("0.9.1"))
    env = {"PATH": f"{python_with(tmp_path, site).parent}:{os.environ['PATH']}",
           "VERL_DEPLOY_STATE_DIR": str(tmp_path / "state")}
    result = run_cli("launch", "--yes", "--skip-check", "--backend", "local", "--verl-version", "0.9.1",
                     "--run-dir", str(root), "--override", "actor_rollout_ref.actor.megatron.router_replay.mode=bogus", env=env)
    # plan's own rules pass this value; only verl's ActorConfig rejects it, so the refusal is verify's
    assert run_cli("plan", "--verl-version", "0.9.1", "--override", "actor_rollout_ref.actor.megatron.router_replay.mode=bogus",
                   env=env).returncode == 0
    assert result.returncode == 1
    assert "Invalid router_replay mode: bogus" in result.stdout + result.stderr
    assert json.loads(run_cli("runs", "--json", env=env).stdout)["runs"] == []  # nothing was started


def test_verify_runs_on_the_ray_head_as_a_job(tmp_path_factory):
    pytest.importorskip("ray")
    from test_ray import cluster as _cluster  # the private head the Ray tests use (free ports, own temp dir)

    site = site_or_skip("0.9.1")
    tmp = tmp_path_factory.mktemp("rayverify")
    root = run_dir_with(tmp, site, fixture_for("0.9.1"))
    from verl_deploy.verify import verify_on_ray

    head = _cluster.__wrapped__()  # the fixture's generator: start, then stop below
    started = next(head)
    try:
        plan = dapo_plan("0.9.1", root, overrides=["actor_rollout_ref.rollout.temperature=0"])
        result = verify_on_ray(plan, started["address"], python=str(python_with(tmp, site)))
        assert result.where.startswith("Ray head") and result.status == "failed", result.as_dict()
        assert result.verl_version == "0.9.1" and result.run_dir == str(root)
        errors = [f for f in findings_for(result, plan, required=True) if f.level == "error"]
        assert errors[0].field == "temperature" and "greater than 0" in errors[0].message
        missing = verify_on_ray(dapo_plan("0.9.1", tmp / "absent"), started["address"],
                                python=str(python_with(tmp, site)))
        assert missing.status == "unavailable" and "does not exist there" in missing.detail
    finally:
        next(head, None)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_printed_checkout_command_gives_the_chosen_recipe_commit(tmp_path):
    """The fix start_verl.sh prints, run in a verl checkout whose recipe submodule pins another commit."""
    from verl_deploy.profiles.recipes import RecipeSource

    env = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow",
           "GIT_CONFIG_VALUE_0": "always", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args, cwd):
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()

    recipe = tmp_path / "verl-recipe"
    (recipe / "dapo").mkdir(parents=True)
    git("init", "-q", cwd=recipe)
    commits = []
    for text in ("pinned", "works"):
        (recipe / "dapo" / "main_dapo.py").write_text(f"# {text}\n")
        git("add", "-A", cwd=recipe)
        git("commit", "-qm", text, cwd=recipe)
        commits.append(git("rev-parse", "HEAD", cwd=recipe))
    verl = tmp_path / "verl"
    verl.mkdir()
    git("init", "-q", cwd=verl)
    git("submodule", "add", "-q", str(recipe), "recipe", cwd=verl)
    git("-C", "recipe", "checkout", "-q", commits[0], cwd=verl)
    git("commit", "-qam", "pin the recipe", cwd=verl)
    clone = tmp_path / "clone"
    git("clone", "-q", str(verl), str(clone), cwd=tmp_path)  # a user's checkout: submodule not initialised
    source = RecipeSource("verl-recipe", commits[1], pinned=commits[0][:7])
    subprocess.run(["bash", "-c", source.checkout_command(str(clone), "0.9.1")], env=env, check=True,
                   capture_output=True)
    assert (clone / "recipe" / "dapo" / "main_dapo.py").read_text() == "# works\n"
    assert git("rev-parse", "HEAD", cwd=clone) == git("rev-parse", "HEAD", cwd=verl)  # verl's own tree untouched


def test_check_includes_verls_own_validation_and_says_when_it_could_not_run(npu_host):
    base = ["check", "--json", "--search-root", str(npu_host["root"]), "--run-dir", str(npu_host["tmp"] / "no-verl")]
    data = json.loads(run_cli(*base, env=npu_host["env"]).stdout)
    verify = data["areas"]["verify"]
    assert verify["data"]["status"] == "unavailable" and verify["data"]["entry"] == "recipe.dapo.main_dapo"
    assert verify["rows"][0]["status"] == "info" and "did not run" in verify["rows"][0]["value"]
    assert not any(f["area"] == "verify" for f in data["findings"])  # not blocking: verl is not there
    skipped = json.loads(run_cli(*base, "--no-verify", env=npu_host["env"]).stdout)
    assert "verify" not in skipped["areas"]
    stack = data["areas"]["stack"]  # the Ascend stack against verl 0.7.0's documented one
    assert stack["data"]["release"] == "0.7.0" and "ascend_quick_start.rst" in stack["data"]["source"]


LEGACY_FSDP = {"framework": "fsdp", "device": "gpu", "n_resp_per_prompt": 2}


@pytest.mark.parametrize("version", ["0.6.1", "0.7.0"])
def test_verify_runs_the_legacy_fsdp_workers_own_batch_normalisation(tmp_path, version):
    """0.6.x-0.7.0 FSDP: ActorRolloutRefWorker.__init__ rewrites the mini-batch (x n, / DP) and asserts on it
    after the model's config is validated: verify runs that code of the release (#24 item 5)."""
    site = site_or_skip(version)
    root = run_dir_with(tmp_path, site, fixture_for(version))
    python = str(python_with(tmp_path, site))
    cases = {
        "floors-to-zero": (dict(batch_size=6, mini_batch_size=3), "should be larger than 0 after normalization"),
        "micro-does-not-divide": (dict(batch_size=32, mini_batch_size=8, features=["-dynamic_batch"],
                                       overrides=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]),
                                  "should be divisible by ppo_micro_batch_size_per_gpu 4"),
        "fits": (dict(batch_size=32, mini_batch_size=8), None),
    }
    for name, (flags, failure) in cases.items():
        plan = dapo_plan(version, root, **LEGACY_FSDP, **flags)
        result = verify_plan(plan, python=python)
        [worker] = [s for s in result.steps if s["step"] == "worker:legacy_fsdp_normalisation"]
        if failure is None:
            assert result.status == "passed" and worker["detail"] == {"world": 8, "ppo_mini_batch_size_per_rank": 2}
            continue
        assert result.status == "failed" and failure in worker["message"], (name, worker)
        assert worker["where"].startswith("verl/workers/fsdp_workers.py:")
        [refusal] = [f for f in findings_for(result, plan, required=True) if f.level == "error"]
        assert "worker:legacy_fsdp_normalisation" in refusal.message and refusal.fix


def test_verify_leaves_the_engine_workers_normalisation_to_train_time(tmp_path):
    """0.8.0+ engine workers do not rewrite batch sizes when they start: no worker step runs there."""
    site = site_or_skip("0.9.1")
    root = run_dir_with(tmp_path, site, fixture_for("0.9.1"))
    result = verify_plan(dapo_plan("0.9.1", root, **LEGACY_FSDP), python=str(python_with(tmp_path, site)))
    assert result.status == "passed"
    assert not any(s["step"].startswith("worker:") for s in result.steps)
