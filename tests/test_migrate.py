"""`verl-deploy migrate CONFIG --to 0.9.1` (and `import --to`): moved keys mapped, removed ones named,
and the result checked like any plan, up to verl 0.9.1's own validation on this CPU box."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from test_benchmarks import run_benchmark
from test_verify import fixture_for, site_or_skip
from verl_deploy.profiles.keytables import key_table
from verl_deploy.profiles.entries import RELEASES

SCRIPTS = FIXTURES / "imported_scripts"


def test_every_release_has_a_key_table_with_defaults():
    for release in RELEASES:
        table = key_table(release)
        assert table is not None and len(table) > 500, release
    assert "reward_model.overlong_buffer.len" in key_table("0.7.0")
    assert "reward_model.overlong_buffer.len" not in key_table("0.9.1")
    assert "reward.reward_kwargs.overlong_buffer_cfg.len" in key_table("0.9.1")


def test_key_tables_know_which_entry_config_holds_a_key():
    """The DAPO recipe's config has the reward loop's overlong buffer; main_ppo's (ppo_trainer) does not."""
    key = "reward.reward_kwargs.overlong_buffer_cfg.len"
    assert key in key_table("0.9.1", "dapo_trainer") and key not in key_table("0.9.1", "ppo_trainer")
    assert "trainer.total_epochs" in key_table("0.9.1", "ppo_trainer")
    assert key_table("0.9.1", "no_such_trainer") is None


@pytest.mark.parametrize("mode,prefix", [("ppo", "+"), ("dapo", "")])
def test_a_moved_key_gets_the_prefix_the_target_entry_config_needs(mode, prefix):
    """main_ppo on 0.9.1 lacks reward.reward_kwargs.overlong_buffer_cfg (Hydra refuses it without `+`);
    the DAPO entry's config has it (Hydra refuses it with `+`)."""
    from verl_deploy.importer.migrate import migrate_values

    moved = migrate_values({"mode": mode, "framework": "fsdp", "verl_version": "0.6.1",
                            "overrides": ["+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096"]}, "0.9.1",
                           check=False)
    assert moved.values["overrides"] == [f"{prefix}reward.reward_kwargs.overlong_buffer_cfg.len=4096"]


def test_migrate_maps_moved_keys_and_names_removed_ones(tmp_path):
    config = tmp_path / "dapo.yaml"
    config.write_text("\n".join([
        "# my DAPO run",
        "verl_version: 0.7.0",
        "device: gpu",
        "dapo_source: recipe",  # the recipe trainer it ran (0.9.x's default is DAPO from verl's core: see below)
        "overrides:",
        "  - reward_model.overlong_buffer.log=True",  # a known move (the DAPO recipe -> the reward loop)
        "  - reward_model.sandbox_fusion.max_concurrent=32",  # a key-table candidate (same name and default)
        "  - actor_rollout_ref.actor.load_weight=False",  # gone in 0.9.1, nothing replaced it
        "  - trainer.log_val_generations=5",  # there in both
    ]) + "\n")
    out = tmp_path / "dapo-0.9.1.yaml"
    result = run_cli("migrate", str(config), "--to", "0.9.1", "--output", str(out), "--json")
    data = json.loads(result.stdout)
    assert data["source"] == "0.7.0" and data["target"] == "0.9.1"
    moved = {m["old"]: m["new"] for m in data["moved"]}
    assert moved["reward_model.overlong_buffer.log"] == "reward.reward_kwargs.overlong_buffer_cfg.log"
    assert moved["reward_model.sandbox_fusion.max_concurrent"] == "reward.sandbox_fusion.max_concurrent"
    assert [r["override"] for r in data["removed"]] == ["actor_rollout_ref.actor.load_weight=False"]
    text = out.read_text()
    assert "# my DAPO run" in text and "verl_version: 0.9.1" in text  # the user's comments are kept
    assert "reward.reward_kwargs.overlong_buffer_cfg.log=True" in text and "load_weight" not in text
    assert "trainer.log_val_generations=5" in text
    assert result.returncode == 0, data["findings"]
    assert "0.7.0" in config.read_text()  # the original is untouched


def test_a_section_that_follows_another_in_the_target_takes_no_sub_keys(tmp_path):
    """0.6.1 gives the reference a transformer config of its own; 0.9.1 makes it an interpolation of the actor's,
    and Hydra refuses a sub-key of a value: the override goes, saying which key the reference reads now."""
    ref, actor = ("actor_rollout_ref.ref.megatron.override_transformer_config.",
                  "actor_rollout_ref.actor.megatron.override_transformer_config.")
    config = tmp_path / "grpo.yaml"
    config.write_text("verl_version: 0.6.1\ndevice: gpu\nframework: megatron\nmaster_addr: 10.0.0.1\noverrides:\n"
                      f"  - ++{actor}num_layers_in_first_pipeline_stage=4\n"
                      f"  - ++{ref}num_layers_in_first_pipeline_stage=4\n"
                      f"  - ++{ref}num_layers_in_last_pipeline_stage=1\n")
    out = tmp_path / "grpo-0.9.1.yaml"
    result = run_cli("migrate", str(config), "--to", "0.9.1", "--output", str(out), "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 0, data["findings"]
    removed = {r["override"]: r["why"] for r in data["removed"]}
    assert set(removed) == {f"++{ref}num_layers_in_first_pipeline_stage=4", f"++{ref}num_layers_in_last_pipeline_stage=1"}
    assert "which the config sets to the same value" in removed[f"++{ref}num_layers_in_first_pipeline_stage=4"]
    assert f"reads {actor}num_layers_in_last_pipeline_stage" in removed[f"++{ref}num_layers_in_last_pipeline_stage=1"]
    assert ref not in out.read_text() and f"{actor}num_layers_in_first_pipeline_stage=4" in out.read_text()


def test_migrate_refusals_are_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("verl_version: 0.7.0\n")
    for args, words in ((["--to", "0.9.1"], "--output"), (["--to", "0.1.0", "--in-place"], "0.1.0")):
        result = run_cli("migrate", str(config), *args)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
        assert result.returncode == 1 and len(errors) == 1 and words in errors[0], result.stderr
        assert "Traceback" not in result.stderr


@pytest.fixture()
def env_dir(tmp_path):
    site = site_or_skip("0.9.1")
    root = tmp_path / "verify-env"
    root.mkdir()
    (root / "verl-0.9.1").symlink_to(site)
    return {"VERL_DEPLOY_VERIFY_ENV_DIR": str(root)}


@pytest.mark.parametrize("fixture,recipes", [
    ("verl-v0.7.0/recipe/dapo/run_dapo_qwen3_8b_base_npu.sh", ["recipes/verl-v0.7.0"]),
    ("verl-v0.7.0/recipe/one_step_off_policy/shell/dapo_7b_math_megatron_4_12.sh",
     ["recipes/verl-v0.7.0", "imported_scripts/verl-v0.7.0"]),
    ("verl-v0.6.1/recipe/dapo/run_dapo_qwen2.5_7b_npu.sh", ["recipes/verl-v0.6.1"]),
])
def test_imported_script_moved_to_091_passes_verls_own_validation(tmp_path, env_dir, fixture, recipes):
    ready = run_cli("verify-env", "0.9.1", "--recipe", str(fixture_for("0.9.1")), "--json", env=env_dir)
    assert ready.returncode == 0, ready.stderr
    run_dir = json.loads(ready.stdout)["run_dir"]  # verl 0.9.1 with verl-recipe's DAPO beside it
    out = tmp_path / "migrated.yaml"
    release = fixture.split("/")[0].removeprefix("verl-v")
    args = ["import", str(SCRIPTS / fixture), "--output", str(out), "--verl-version", release, "--to", "0.9.1",
            "--env", "HOME=/home/user", "--env", "PWD=/verl", "--json"]
    for recipe in recipes:
        args += ["--recipe-dir", str(FIXTURES / recipe)]
    imported = run_cli(*args)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    migrated = json.loads(imported.stdout)["migrated"]
    assert migrated["target"] == "0.9.1"
    # the only error a migrated plan may have is an input no script gives: the head of a multi-node run
    errors = [f for f in migrated["findings"] if f["level"] == "error"]
    assert all(f["field"] == "master_addr" for f in errors), errors
    assert "verl_version: 0.9.1" in out.read_text()
    head = ["--master-addr", "10.0.0.1"] if errors else []
    planned = run_cli("plan", "--config", str(out), "--run-dir", run_dir, *head, "--verify", "--verify-env", "--json",
                      env=env_dir)
    result = json.loads(planned.stdout)
    assert result["verify"]["status"] == "passed", (result["verify"], [f for f in result["findings"]
                                                                      if f["level"] == "error"])
    assert planned.returncode == 0, [f for f in result["findings"] if f["level"] == "error"]


def test_the_migration_benchmark_runs_one_script_through_verls_validation(tmp_path):
    site = site_or_skip("0.9.1")
    root = tmp_path / "verify-env"
    root.mkdir()
    (root / "verl-0.9.1").symlink_to(site)  # verify-env uses this release instead of installing it
    run_benchmark("migrate_to_091.py", ["1", "verl-v0.7.0/recipe/dapo/test_dapo_7b.sh"],
                  r"^1 of 1 verl launch scripts, imported and migrated to 0.9.1, pass", tmp_path,
                  {"VERL_DEPLOY_VERIFY_ENV_DIR": str(root)})


@pytest.mark.xfail(strict=True, reason="migrate writes reward.reward_kwargs.* without the `+` main_ppo's config "
                   "needs, so a 0.7.0 DAPO config moved to 0.9.1's default (DAPO from verl's core) is refused as an "
                   "unknown key (importer/migrate.py: left for the import helper)")
def test_migrate_to_core_dapo_keeps_the_plus_main_ppo_needs(tmp_path):
    config = tmp_path / "dapo.yaml"
    config.write_text("verl_version: 0.7.0\ndevice: gpu\noverrides:\n  - reward_model.overlong_buffer.log=True\n")
    result = run_cli("migrate", str(config), "--to", "0.9.1", "--output", str(tmp_path / "out.yaml"), "--json")
    assert result.returncode == 0, json.loads(result.stdout)["findings"]
