"""`verl-deploy import`: verl's own DAPO, GRPO and one-step-off launch scripts (verl v0.6.1, v0.7.0 and
verl-recipe, kept as fixtures with their source in the manifest) read, mapped to a config, and proven
by composing both launches with Hydra against the real config tree of that release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from verl_deploy.compiler import compile_plan
from verl_deploy.pipeline import prepare_spec
from verl_deploy.importer import compose as composing
from verl_deploy.importer.build import import_script
from verl_deploy.importer.configout import render, write
from verl_deploy.importer.launch import NoLaunch, find_launch
from verl_deploy.importer.shell import read_script
from verl_deploy.profiles import profile_for
from verl_deploy.sources import resolve
from verl_deploy.verlconfig.locate import locate

ROOT = FIXTURES / "imported_scripts"
MANIFEST = json.loads((ROOT / "manifest.json").read_text())
# the recipe configs of each source (DAPO's yaml and one-step-off's are not in verl's wheels)
RECIPES = {"verl-v0.6.1": (FIXTURES / "recipes" / "verl-v0.6.1", ROOT / "verl-v0.6.1"),
           "verl-v0.7.0": (FIXTURES / "recipes" / "verl-v0.7.0", ROOT / "verl-v0.7.0"),
           "verl-recipe-e7f8895": (FIXTURES / "recipes" / "verl-recipe-e7f8895",)}
ENV = {"HOME": "/home/user", "PWD": "/verl"}  # what the scripts read from the environment for their paths


def _entry(row) -> str:
    try:
        return find_launch(read_script(ROOT / row["fixture"], ENV)).entry
    except NoLaunch:
        return ""


def _known_entry(row) -> bool:
    from verl_deploy.profiles.entries import entry_of

    return entry_of(_entry(row)) is not None


# every script whose entry verl-deploy knows: DAPO's and one-step-off's recipes, and main_ppo (GRPO)
RUNNABLE = [row for row in MANIFEST if _known_entry(row)]
# What no spec field, feature or override can say today, each with the scripts it stays in; any other key
# left is an importer bug. None is left: every fixture whose own release takes it imports equivalent
# (benchmarks/import_equivalence.py counts). Megatron's attention_backend=auto is the script's own override, the
# legacy +reward_model.overlong_buffer.* of verl-recipe's NPU scripts on 0.8.0 is replaced at start by verl's
# migrate_legacy_reward_impl on both sides (profiles/startup.py), and the reference offloaded with the actor's
# gradients is the grad_offload feature.
KNOWN_LEFT: set[str] = set()


def test_manifest_names_the_source_of_every_fixture():
    assert len(MANIFEST) >= 150
    for row in MANIFEST:
        assert (ROOT / row["fixture"]).is_file(), row
        assert row["repository"] in ("verl-project/verl", "verl-project/verl-recipe")
        assert len(row["commit"]) == 40 and row["release"] in ("0.6.1", "0.7.0", "0.8.0")
    sources = {row["fixture"].split("/")[0] for row in MANIFEST}
    assert sources == set(RECIPES)
    kinds = {row["path"].split("/")[-2] if "shell" not in row["path"] else "one_step_off_policy" for row in MANIFEST}
    assert {"dapo", "grpo_trainer", "one_step_off_policy"} <= kinds


def test_every_fixture_script_is_read_and_its_launch_found():
    found, without = 0, []
    for row in MANIFEST:
        reading = read_script(ROOT / row["fixture"], ENV)
        try:
            launch = find_launch(reading)
        except NoLaunch:
            without.append(row["fixture"])
            continue
        found += 1
        assert launch.entry.startswith(("recipe.", "verl.")), (row["fixture"], launch.entry)
        assert launch.settings, row["fixture"]
        for setting in launch.settings:  # every setting is Hydra text with its script line
            assert setting.line >= 1 and setting.key and "<unknown" not in setting.text
    print(f"\n{found} of {len(MANIFEST)} fixture scripts have a verl launch the reader finds; without: {without}")
    assert found >= len(MANIFEST) - 5, without

# verl's own scripts that verl itself would refuse at run time, each for the rule `plan` refuses it by first
VERLS_OWN_MISTAKES = {
    # actor_rollout_ref.rollout.mode=sync: RolloutConfig raises 'Rollout mode 'sync' has been removed' (0.7.0+)
    "verl-v0.7.0/recipe/dapo/test_dapo_8b_megatron_fp8train.sh": {"override"},
    "verl-recipe-e7f8895/dapo/test_dapo_8b_megatron_fp8train.sh": {"override"},
    # 4 nodes x 8 devices with expert TP 4 x EP 8 x PP 4 = 128: Megatron's initialize_model_parallel raises
    "verl-v0.7.0/recipe/dapo/test_dapo_qwen3_moe_30b_megatron_fp16.sh": {"override"},
    "verl-recipe-e7f8895/dapo/test_dapo_qwen3_moe_30b_megatron_fp16.sh": {"override"},
    # KL loss on the legacy Megatron workers builds a reference worker, which asserts ref.log_prob_micro_batch_size
    # or ref.log_prob_micro_batch_size_per_gpu is set (megatron_workers.py:289 at 0.6.1, 350 at 0.7.0); the script
    # sets neither, and both default to null
    "verl-v0.6.1/examples/grpo_trainer/run_deepseek671b_math_megatron_80gb.sh": {"overrides"},
    "verl-v0.7.0/examples/grpo_trainer/run_deepseek671b_math_megatron_80gb.sh": {"overrides"},
}


@pytest.mark.parametrize("row", RUNNABLE, ids=[r["fixture"] for r in RUNNABLE])
def test_imported_config_composes_as_the_check_says(tmp_path, row):
    """The config written composes (through resolve -> plan, as `generate --config` does) to the script's
    own config, except exactly the keys the check names, each one a spec field or feature owns."""
    source = row["fixture"].split("/")[0]
    try:
        result = import_script(str(ROOT / row["fixture"]), verl_version=row["release"], environ=ENV,
                               recipe_dirs=tuple(str(p) for p in RECIPES[source]))
    except Exception as exc:  # a script whose own overrides its release's config refuses (a bug in the script),
        # or an entry that is only a name: the importer says so in one line naming the key, and writes nothing
        assert ("refuses the script's overrides" in str(exc) and "Could not" in str(exc)) or \
            "dapo_transfer_queue" in row["fixture"], exc
        assert "\n" not in str(exc).strip() and not (tmp_path / "imported.yaml").exists()
        return
    assert not result.problem, result.problem  # every DAPO / GRPO / one-step-off script has a mode
    config = write(tmp_path / "imported.yaml", render(result, row["fixture"]))
    spec = resolve(config_file=config, environ={})
    profile = profile_for(spec.verl_version)
    plan = compile_plan(spec, profile)
    locate_source = composing.source_with_recipe(locate(row["release"]), *RECIPES[source])
    original = composing.compose(locate_source, result.launch.entry, result.launch.config_name or
                                 _default_config(result), [s.text for s in result.launch.settings], profile,
                                 result.framework, result.mechanism)
    generated = composing.compose(locate_source, plan.entry_module, plan.config_name, plan.argv()[3:], profile,
                                  result.framework, result.mechanism)
    left = {d.key for d in composing.differences(original, generated)}
    mirrored = {d.key for d, _ in result.mirrored}
    alike = {d.key for d in result.read_alike}
    assert left - {d.key for d in result.aside} - mirrored - alike == {d.key for d in result.remaining}
    owned = {o.key for o in plan.overrides if o.origin != "--override"}
    assert {d.key for d in result.remaining} <= owned, "a difference an override could remove is left"
    assert {d.key for d in result.remaining} <= KNOWN_LEFT, "a key a field, feature or override could carry is left"
    for diff, copied in result.mirrored:  # a key added as a copy holds the very value of the key the script sets
        assert composing.same(original.resolved[copied], diff.generated), (diff.key, copied)
    # the config plans: no error but the head of a multi-node run (no script gives it) and verl's own mistakes
    errors = [f for f in prepare_spec(spec, check_verl=False).findings if f.level == "error" and f.field != "master_addr"]
    assert {f.field for f in errors} == VERLS_OWN_MISTAKES.get(row["fixture"], set()), [f.message for f in errors]


def _default_config(result) -> str:
    from verl_deploy.profiles.entries import entry_of

    return entry_of(result.launch.entry).default_config


def test_verls_start_up_replaces_the_reward_kwargs_only_for_the_entries_that_call_it():
    """migrate_legacy_reward_impl (0.7.1+): a script's reward_model.reward_kwargs replaces reward.reward_kwargs whole,
    in main_ppo 0.7.1-0.8.x, fully_async_main and verl-recipe's main_dapo; not in 0.9's V1 main_ppo or one-step-off."""
    from verl_deploy.profiles.startup import as_verl_reads

    flat = {"reward.reward_kwargs.overlong_buffer_cfg.len": 0, "reward_model.reward_kwargs.max_resp_len": 20480,
            "trainer.nnodes": 1}
    read = as_verl_reads(flat, "recipe.dapo.main_dapo", "0.8.0")
    assert read == {"reward.reward_kwargs.max_resp_len": 20480, "reward_model.reward_kwargs.max_resp_len": 20480,
                    "trainer.nnodes": 1}
    assert as_verl_reads(flat, "verl.trainer.main_ppo", "0.9.1") is flat
    assert as_verl_reads(flat, "verl.experimental.one_step_off_policy.main_ppo", "0.8.0") is flat
    assert as_verl_reads(flat, "recipe.dapo.main_dapo", "0.7.0") is flat  # before the reward loop
