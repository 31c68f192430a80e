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


@pytest.mark.parametrize("mode,chosen,prefix", [("ppo", {}, "+"), ("dapo", {"dapo_source": "recipe"}, ""),
                                                ("dapo", {}, "+")])
def test_a_moved_key_gets_the_prefix_the_target_entry_config_needs(mode, chosen, prefix):
    """main_ppo on 0.9.1 lacks reward.reward_kwargs.overlong_buffer_cfg (Hydra refuses it without `+`); the DAPO
    recipe's config has it (Hydra refuses it with `+`). DAPO moves to main_ppo (verl's core) unless kept."""
    from verl_deploy.importer.migrate import migrate_values

    moved = migrate_values({"mode": mode, "framework": "fsdp", "verl_version": "0.6.1",
                            "overrides": ["+reward_model.reward_kwargs.overlong_buffer_cfg.len=4096"]}, "0.9.1",
                           check=False, **chosen)
    assert moved.values["overrides"] == [f"{prefix}reward.reward_kwargs.overlong_buffer_cfg.len=4096"]


def _migrate_json(tmp_path, text: str, *args: str) -> tuple[dict, str, int]:
    config = tmp_path / "old.yaml"
    config.write_text(text)
    out = tmp_path / "new.yaml"
    out.unlink(missing_ok=True)
    result = run_cli("migrate", str(config), "--to", "0.9.1", "--output", str(out), "--json", *args)
    return json.loads(result.stdout), out.read_text() if out.exists() else "", result.returncode


RECIPE_DAPO = ("verl_version: 0.7.0\ndevice: npu\nframework: fsdp\nbatch_size: 64\nmini_batch_size: 16\n"
               "gen_batch_size: 192\nmax_num_gen_batches: 10\nfilter_groups: true\nmax_ckpt_to_keep: null\n"
               "overlong_buffer_len: 512\noverrides:\n  - trainer.log_val_generations=5\n")


def test_the_dapo_recipe_moves_to_dapo_in_verls_core_and_names_what_it_drops(tmp_path):
    """A DAPO recipe config of 0.7.0 runs DAPO in verl's core on 0.9.1 (main_ppo, V1 sync): every field is kept or
    named as dropped with what replaces it, the line names the recipe as the other choice and its flag, and the
    result plans without errors; --dapo-source recipe keeps the recipe trainer."""
    data, text, code = _migrate_json(tmp_path, RECIPE_DAPO)
    assert code == 0, data["findings"]
    [trainer] = data["trainer"]
    assert (trainer["old"], trainer["new"]) == ("recipe.dapo.main_dapo", "verl.trainer.main_ppo")
    assert "--dapo-source recipe keeps it" in trainer["other"] and "V1 trainer" in trainer["why"]
    assert {d["field"].split("=")[0] for d in data["dropped_fields"]} == {"gen_batch_size", "max_num_gen_batches"}
    assert all("V1" in d["why"] for d in data["dropped_fields"])
    assert "dapo_source: core" in text and "gen_batch_size" not in text and "max_num_gen_batches" not in text
    assert "max_ckpt_to_keep" in text and "overlong_buffer_len: 512" in text  # verl's null and the rest stay
    planned = json.loads(run_cli("plan", "--config", str(tmp_path / "new.yaml"), "--json").stdout)
    command = " ".join(planned["command"])
    assert "verl.trainer.main_ppo" in command and "trainer.v1.trainer_mode=sync" in command
    assert "algorithm.filter_groups.enable=True" in command and "reward.reward_manager.name=dapo" in command
    assert "+reward.reward_kwargs.overlong_buffer_cfg.len=512" in command
    from verl_deploy.sources import resolve

    spec = resolve(config_file=str(tmp_path / "new.yaml"), environ={})
    assert spec.max_ckpt_to_keep is None  # verl's null (keep every checkpoint) is not lost on the way
    kept, text, code = _migrate_json(tmp_path, RECIPE_DAPO, "--dapo-source", "recipe")
    assert code == 0 and kept["dropped_fields"] == [] and "dapo_source: recipe" in text
    assert kept["trainer"][0]["new"] == "recipe.dapo.main_dapo" and "--dapo-source core" in kept["trainer"][0]["other"]
    lines = run_cli("migrate", str(tmp_path / "old.yaml"), "--to", "0.9.1", "--output", str(tmp_path / "x.yaml"))
    assert "  trainer: recipe.dapo.main_dapo -> verl.trainer.main_ppo: DAPO in verl's core" in lines.stdout
    assert "  dropped: gen_batch_size=192 (" in lines.stdout


ONE_STEP_OFF = ("verl_version: 0.7.0\nmode: one-step-off\ndevice: gpu\nframework: fsdp\nbatch_size: 64\n"
                "mini_batch_size: 16\ntrainer_gpus: 4\nrollout_gpus: 4\ndevices: 8\n")


def test_one_step_off_moves_to_the_v1_separate_async_mode(tmp_path):
    """verl's V1 separate_async: its own rollout pool, a sync step with batch == sync step x mini-batch, a checkpoint
    engine that is not naive, an off-policy bound of one step behind, and no group filtering one-step-off did not
    do; --mode one-step-off keeps verl.experimental's one-step-off."""
    data, text, code = _migrate_json(tmp_path, ONE_STEP_OFF)
    assert code == 0, data["findings"]
    [trainer] = data["trainer"]
    assert (trainer["old"], trainer["new"]) == ("recipe.one_step_off_policy.main_ppo", "verl.trainer.main_ppo")
    assert "--mode one-step-off keeps it" in trainer["other"]
    changed = {c["field"]: c["new"] for c in data["set"]}
    assert changed == {"mode": "separate-async", "parameter_sync_step": 4, "max_off_policy": 2,
                       "off_policy_strategy": "wait", "filter_groups": False}
    # one-step-off's own yaml ran the rollout's log-probs as the old policy; separate_async recomputes them
    dropped = {d["field"]: d["why"] for d in data["dropped_fields"]}
    assert "runs its config's False" in dropped["algorithm.rollout_correction.bypass_mode=True"]
    planned = json.loads(run_cli("plan", "--config", str(tmp_path / "new.yaml"), "--json").stdout)
    command = " ".join(planned["command"])
    for sent in ("trainer.v1.trainer_mode=separate_async", "trainer.v1.separate_async.parameter_sync_step=4",
                 "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", "actor_rollout_ref.rollout.n_gpus_per_node=4",
                 "trainer.v1.sampler.max_off_policy_threshold=2", "trainer.n_gpus_per_node=4"):
        assert sent in command, sent
    assert "algorithm.filter_groups.enable=True" not in command
    kept, text, code = _migrate_json(tmp_path, ONE_STEP_OFF, "--mode", "one-step-off")
    assert code == 0 and "mode: one-step-off" in text and kept["set"] == []
    assert kept["trainer"][0]["new"] == "verl.experimental.one_step_off_policy.main_ppo"
    # a batch that is no multiple of the mini-batch cannot run separate_async: one-step-off stays and says why (and
    # verl 0.9.1's engine workers refuse that batch in any mode: the plan says so)
    odd, text, code = _migrate_json(tmp_path, ONE_STEP_OFF.replace("batch_size: 64", "batch_size: 40"))
    assert "mode: one-step-off" in text and "no multiple of mini-batch 16" in odd["trainer"][0]["why"]
    assert code == 1 and {f["field"] for f in odd["findings"] if f["level"] == "error"} == {"mini_batch_size"}


def test_a_trainer_choice_that_does_not_apply_is_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(RECIPE_DAPO)
    for args, words in ((["--to", "0.9.1", "--mode", "one-step-off"], "--mode one-step-off"),
                        (["--to", "0.8.0", "--dapo-source", "core"], "--dapo-source core"),
                        (["--to", "0.9.1", "--mode", "fast"], "fast")):
        result = run_cli("migrate", str(config), *args, "--output", str(tmp_path / "n.yaml"))
        errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        assert len(errors) == 1 and words in errors[0], result.stderr
        assert not (tmp_path / "n.yaml").exists()


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
    other = tmp_path / "other.yaml"
    for args, words in ((["--to", "0.9.1"], "--output"), (["--to", "0.1.0", "--in-place"], "0.1.0"),
                        (["--to", "0.9.1", "--in-place", "-o", str(other)], "two places")):
        result = run_cli("migrate", str(config), *args)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
        assert result.returncode == 1 and len(errors) == 1 and words in errors[0], result.stderr
        assert "Traceback" not in result.stderr
    assert config.read_text() == "verl_version: 0.7.0\n" and not other.exists()  # nothing written


@pytest.fixture()
def env_dir(tmp_path):
    site = site_or_skip("0.9.1")
    root = tmp_path / "verify-env"
    root.mkdir()
    (root / "verl-0.9.1").symlink_to(site)
    return {"VERL_DEPLOY_VERIFY_ENV_DIR": str(root)}


_ONE_STEP_OFF_070 = "verl-v0.7.0/recipe/one_step_off_policy/shell/dapo_7b_math_megatron_4_12.sh"


@pytest.mark.parametrize("fixture,recipes,chosen,entry", [
    ("verl-v0.7.0/recipe/dapo/run_dapo_qwen3_8b_base_npu.sh", ["recipes/verl-v0.7.0"], [], "verl.trainer.main_ppo"),
    (_ONE_STEP_OFF_070, ["recipes/verl-v0.7.0", "imported_scripts/verl-v0.7.0"], [], "verl.trainer.main_ppo"),
    ("verl-v0.6.1/recipe/dapo/run_dapo_qwen2.5_7b_npu.sh", ["recipes/verl-v0.6.1"], [], "verl.trainer.main_ppo"),
    ("verl-recipe-e7f8895/dapo/run_dapo_qwen3_moe_30b_megatron_npu.sh", ["recipes/verl-recipe-e7f8895"], [],
     "verl.trainer.main_ppo"),
    ("verl-v0.6.1/recipe/one_step_off_policy/grpo_0.6b_gsm8k_fsdp2_2_6.sh",
     ["recipes/verl-v0.6.1", "imported_scripts/verl-v0.6.1"], [], "verl.trainer.main_ppo"),
    ("verl-v0.7.0/recipe/dapo/run_dapo_qwen3_8b_base_npu.sh", ["recipes/verl-v0.7.0"], ["--dapo-source", "recipe"],
     "recipe.dapo.main_dapo"),
    (_ONE_STEP_OFF_070, ["recipes/verl-v0.7.0", "imported_scripts/verl-v0.7.0"], ["--mode", "one-step-off"],
     "verl.experimental.one_step_off_policy.main_ppo"),
])
def test_imported_script_moved_to_091_passes_verls_own_validation(tmp_path, env_dir, fixture, recipes, chosen, entry):
    """The DAPO recipe and one-step-off scripts move to DAPO in verl's core and the V1 separate_async mode (or keep
    their trainer when asked), and verl 0.9.1's own validation passes the result."""
    ready = run_cli("verify-env", "0.9.1", "--recipe", str(fixture_for("0.9.1")), "--json", env=env_dir)
    assert ready.returncode == 0, ready.stderr
    run_dir = json.loads(ready.stdout)["run_dir"]  # verl 0.9.1 with verl-recipe's DAPO beside it
    out = tmp_path / "migrated.yaml"
    release = next(row["release"] for row in json.loads((SCRIPTS / "manifest.json").read_text())
                   if row["fixture"] == fixture)
    args = ["import", str(SCRIPTS / fixture), "--output", str(out), "--verl-version", release, "--to", "0.9.1",
            "--env", "HOME=/home/user", "--env", "PWD=/verl", "--json", *chosen]
    for recipe in recipes:
        args += ["--recipe-dir", str(FIXTURES / recipe)]
    imported = run_cli(*args)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    migrated = json.loads(imported.stdout)["migrated"]
    assert migrated["target"] == "0.9.1"
    assert [t["new"] for t in migrated["trainer"]] == [entry]
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
    assert result["command"][2] == entry  # python3 -m ENTRY


def test_the_migration_benchmark_runs_one_script_through_verls_validation(tmp_path):
    site = site_or_skip("0.9.1")
    root = tmp_path / "verify-env"
    root.mkdir()
    (root / "verl-0.9.1").symlink_to(site)  # verify-env uses this release instead of installing it
    run_benchmark("migrate_to_091.py", ["1", "verl-v0.7.0/recipe/dapo/test_dapo_7b.sh"],
                  r"^1 of 1 verl launch scripts, imported and migrated to 0.9.1, pass", tmp_path,
                  {"VERL_DEPLOY_VERIFY_ENV_DIR": str(root)})


def test_migrate_to_core_dapo_keeps_the_plus_main_ppo_needs(tmp_path):
    config = tmp_path / "dapo.yaml"
    config.write_text("verl_version: 0.7.0\ndevice: gpu\noverrides:\n  - reward_model.overlong_buffer.log=True\n")
    result = run_cli("migrate", str(config), "--to", "0.9.1", "--output", str(tmp_path / "out.yaml"), "--json")
    assert result.returncode == 0, json.loads(result.stdout)["findings"]
