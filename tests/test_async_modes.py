"""--algorithm grpo, DAPO from verl's core, and the V1 trainer's async modes, against real verl.

Each new mode x framework x device is composed with Hydra against the release's real config tree,
run through verl 0.9.1's own validation on CPU (the program `plan --verify` sends), and the V1
trainer's own asserts (verl/trainer/ppo/v1/trainer_separate_async.py, taken out of the installed file
with `ast`) are run on the config the launch makes; a release without the mode is refused in one line.
"""

from __future__ import annotations

import itertools
import json
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import realverl
from conftest import run_cli
from test_verify import python_with, run_dir_with, site_or_skip
from verl_deploy.pipeline import prepare
from verl_deploy.verify import findings_for, verify_plan
from verl_deploy.verlconfig import index
from verl_deploy.verlconfig.locate import locate

A = "actor_rollout_ref."
RELEASES = ["0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"]
FLAVOURS = [("megatron", "npu"), ("megatron", "gpu"), ("fsdp", "npu"), ("fsdp", "gpu")]
# mode name in the tests -> flags
NEW_MODES = {
    "grpo": {"algorithm": "grpo"},
    "dapo-core": {"dapo_source": "core"},
    "colocate-async": {"mode": "colocate-async"},
    "separate-async": {"mode": "separate-async", "mini_batch_size": 8},
    "separate-async-grpo": {"mode": "separate-async", "algorithm": "grpo", "mini_batch_size": 8},
    "one-step-off-grpo": {"mode": "one-step-off", "algorithm": "grpo"},
    "fully-async": {"mode": "fully-async", "mini_batch_size": 8},
    "fully-async-grpo": {"mode": "fully-async", "algorithm": "grpo", "mini_batch_size": 8},
}
FULLY_ASYNC_SINCE = "0.7.1"
V1_ONLY = {"dapo-core", "colocate-async", "separate-async", "separate-async-grpo"}


def flags_for(version: str, name: str, framework: str, device: str) -> dict:
    flags = {"verl_version": version, "framework": framework, "device": device, **NEW_MODES[name]}
    if flags.get("mode") in ("separate-async", "one-step-off", "fully-async") and framework == "megatron":
        flags.update(train_tp=2, train_pp=1)  # 4 trainer devices
    return flags


def composed(plan):
    source = locate(plan.spec.verl_version)
    base = plan.profile.base_configs[plan.spec.framework]
    entry, _ = index.entry_yaml(source, plan.entry_module, plan.config_name, base,
                                plan.profile.recipe_overlays[(plan.mechanism, plan.spec.framework)])
    return index.compose(source, plan.config_name, base, entry, plan.argv()[3:])


CASES = [(v, n, f, d) for v, n, (f, d) in itertools.product(RELEASES, NEW_MODES, FLAVOURS)
         if (n not in V1_ONLY or v.startswith("0.9")) and (not n.startswith("fully") or v >= FULLY_ASYNC_SINCE)]


@pytest.mark.parametrize("version,name,framework,device", CASES, ids=["-".join(c) for c in CASES])
def test_each_new_mode_composes_against_the_releases_real_config(version, name, framework, device):
    prepared = prepare(flags=flags_for(version, name, framework, device), environ={})
    assert prepared.ok, [f.line() for f in prepared.findings if f.level == "error"]
    cfg = composed(prepared.plan)
    get = lambda key: OmegaConf.select(cfg, key)  # noqa: E731
    sent = " ".join(prepared.plan.argv())
    if "grpo" in name:  # verl's GRPO example scripts
        assert get(A + "actor.use_kl_loss") is True and get(A + "actor.kl_loss_coef") == 0.001
        assert get(A + "actor.kl_loss_type") == "low_var_kl"
        assert get(A + "actor.clip_ratio_low") == get(A + "actor.clip_ratio_high") == 0.2
        assert get(A + "actor.loss_agg_mode") == "token-mean" and get(A + "actor.optim.weight_decay") == 0.01
        assert "overlong_buffer" not in sent and "filter_groups" not in sent
        manager = get("reward.reward_manager.name") if version >= "0.7.1" else get("reward_model.reward_manager")
        assert manager == "naive"
    else:  # DAPO
        assert get(A + "actor.clip_ratio_high") == 0.28
        # fully-async has no group filtering of its own (its DAPO scripts leave it out): not sent there
        assert ("filter_groups" in sent) is (name != "fully-async")
        assert get("reward.reward_manager.name") == "dapo"
        assert get("reward.reward_kwargs.overlong_buffer_cfg.enable") is True
        assert get("reward.reward_kwargs.max_resp_len") == prepared.spec.max_response_length
        assert "max_num_gen_batches" not in sent  # neither V1 nor fully-async has the recipe's cap
        if name != "fully-async":
            assert "data.gen_batch_size" not in sent  # V1 sets it to 1 itself
    if name in V1_ONLY:
        assert prepared.plan.entry_module == "verl.trainer.main_ppo" and get("trainer.use_v1") is True
        mode = {"dapo-core": "sync", "colocate-async": "colocate_async"}.get(name, "separate_async")
        assert get("trainer.v1.trainer_mode") == mode
    if name.startswith("separate-async"):
        assert get("data.train_batch_size") == get("trainer.v1.separate_async.parameter_sync_step") * get(
            A + "actor.ppo_mini_batch_size")
        assert get(A + "rollout.n_gpus_per_node") == 4 and get("trainer.n_gpus_per_node") == 4
        assert get(A + "rollout.nnodes") == 1 and get(A + "rollout.checkpoint_engine.backend") == "nccl"
    if name.startswith("fully-async"):  # what its rollouter asserts, and what it syncs on
        assert prepared.plan.entry_module == "verl.experimental.fully_async_policy.fully_async_main"
        assert get("data.train_batch_size") == 0 and get("data.gen_batch_size") == 1
        assert get(A + "hybrid_engine") is False and get("rollout.n_gpus_per_node") == 4
        assert get("async_training.trigger_parameter_sync_step") * get(A + "actor.ppo_mini_batch_size") == 32
        assert get("rollout.total_rollout_steps") == 100 * 32 and get("async_training.partial_rollout") is True


VERIFIED = [(n, f, d) for n in ("grpo", "dapo-core", "colocate-async", "separate-async", "separate-async-grpo",
                                "fully-async")
            for f, d in (("megatron", "npu"), ("fsdp", "gpu"))]


@pytest.mark.parametrize("name,framework,device", VERIFIED, ids=["-".join(c) for c in VERIFIED])
def test_verl_0_9_1_accepts_each_new_mode(tmp_path, name, framework, device):
    """The program `plan --verify` runs: Hydra composes main_ppo's config, validate_config and the config
    dataclasses of the real verl 0.9.1 accept it, and the entry imports."""
    site = site_or_skip("0.9.1")
    root = run_dir_with(tmp_path, site, None)  # main_ppo is in the wheel: no recipe checkout
    flags = {**flags_for("0.9.1", name, framework, device), "run_dir": str(root)}
    plan = prepare(flags=flags, environ={}).plan
    result = verify_plan(plan, python=str(python_with(tmp_path, site)))
    assert result.status == "passed", result.as_dict()
    steps = {s["step"] for s in result.steps}
    assert {"compose", "validate_config", "dataclass:actor_rollout_ref.actor", "import_entry"} <= steps
    assert [f.level for f in findings_for(result, plan, required=True)] == ["info"]


@pytest.mark.parametrize("mode,version,first", [("separate-async", "0.8.0", "0.9.0"),
                                                ("colocate-async", "0.7.0", "0.9.0"),
                                                ("fully-async", "0.7.0", "0.7.1")])
def test_a_release_without_the_mode_refuses_it_in_one_line(mode, version, first):
    result = run_cli("plan", "--mode", mode, "--verl-version", version)
    assert result.returncode == 1
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error")]
    assert len(errors) == 1 and f"first in verl {first}" in errors[0] and mode in errors[0], result.stdout
    assert "Traceback" not in result.stderr


def test_dapo_core_is_refused_before_0_9_and_plan_compares_core_with_the_recipe():
    refused = run_cli("plan", "--dapo-source", "core", "--verl-version", "0.8.0")
    assert refused.returncode == 1 and "first in verl 0.9.0" in refused.stdout + refused.stderr
    shown = run_cli("plan", "--verl-version", "0.9.1", "--dapo-source", "core")
    assert shown.returncode == 0, shown.stdout[-2000:]
    assert "core = verl.trainer.main_ppo" in shown.stdout and "recipe = recipe.dapo.main_dapo" in shown.stdout
    assert "V1 trainer in sync mode" in shown.stdout


def test_plan_says_what_grpo_changes_and_one_step_off_names_its_successor_on_0_9():
    grpo = run_cli("plan", "--algorithm", "grpo", "--verl-version", "0.8.0")
    assert grpo.returncode == 0 and "GRPO differs from DAPO" in grpo.stdout
    assert "RayPPOTrainer" in grpo.stdout and "verl.trainer.main_ppo --config-name=ppo_megatron_trainer" in grpo.stdout
    off = run_cli("plan", "--mode", "one-step-off", "--verl-version", "0.9.1", "--framework", "fsdp", "--device", "gpu")
    assert off.returncode == 0 and "separate_async mode (--mode separate-async)" in off.stdout


# verl 0.9.1's PPOTrainerSeparateAsync.__init__, run from the installed file up to super().__init__
PROBE = textwrap.dedent(r'''
    import ast, json, sys, types
    from omegaconf import OmegaConf
    import verl, os
    path = os.path.join(os.path.dirname(verl.__file__), "trainer/ppo/v1/trainer_separate_async.py")
    tree = ast.parse(open(path).read(), path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PPOTrainerSeparateAsync")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    from omegaconf import DictConfig
    ns = {"need_reward_model": lambda config: False, "DictConfig": DictConfig}
    exec(compile(ast.Module([fn], []), path, "exec"), ns)
    out = {}
    for name, text in json.load(open(sys.argv[1])).items():
        try:
            ns["__init__"](types.SimpleNamespace(), OmegaConf.create(text))
            out[name] = "passed"
        except AssertionError as exc:
            out[name] = "AssertionError: " + str(exc)
        except RuntimeError as exc:  # zero-argument super() outside the class: past every assert
            out[name] = "passed" if "super" in str(exc) else "RuntimeError: " + str(exc)
    print("PROBE " + json.dumps(out))
''')


def test_separate_async_asserts_agree_with_verls_own_code(tmp_path):
    if realverl.verl_site("0.9.1") is None:
        pytest.skip(f"real verl 0.9.1 cannot be installed here: {realverl.why_not('0.9.1')}")
    base = flags_for("0.9.1", "separate-async", "fsdp", "gpu")
    cases = {
        "launch": ({}, None),
        "sync-step": ({"parameter_sync_step": 3}, "parameter_sync_step"),
        "naive": ({"overrides": [A + "rollout.checkpoint_engine.backend=naive"]}, "overrides"),
    }
    configs, expected = {}, {}
    for name, (extra, field) in cases.items():
        prepared = prepare(flags={**base, **extra}, environ={})
        errors = [f for f in prepared.findings if f.level == "error"]
        assert [f.field for f in errors][:1] == ([field] if field else []), [f.line() for f in errors]
        configs[name] = OmegaConf.to_container(composed(prepared.plan), resolve=False)
        expected[name] = field is None
    (tmp_path / "configs.json").write_text(json.dumps(configs, default=str))
    (tmp_path / "probe.py").write_text(PROBE)
    import subprocess

    done = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(tmp_path / "configs.json")],
                          capture_output=True, text=True, env=realverl.env_with_verl("0.9.1"), timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line, done.stderr[-2000:]
    results = json.loads(line[len("PROBE "):])
    for name, ok in expected.items():
        assert (results[name] == "passed") is ok, (name, results[name])
    assert "parameter_sync_step * ppo_mini_batch_size" in results["sync-step"]
    assert "backend for separate async" in results["naive"]


def test_features_and_help_list_the_modes_each_release_supports():
    data = json.loads(run_cli("features", "--json").stdout)
    table = {row["mode"]: row["releases"] for row in data["modes"]}
    assert table["separate-async"]["0.8.0"] == "-" and table["separate-async"]["0.9.1"] == "main_ppo V1 separate_async"
    assert table["fully-async"]["0.7.0"] == "-" and "(source checkout)" in table["fully-async"]["0.7.1"]
    assert table["fully-async"]["0.8.0"] == "experimental.fully_async_policy.fully_async_main"
    assert table["dapo --algorithm grpo"]["0.6.0"] == "main_ppo (RayPPOTrainer)"
    # DAPO from verl's core is the default on 0.9.x (the recipe stays available), the recipe below it
    assert table["dapo"]["0.9.0"] == "main_ppo V1 sync; recipe: recipe.dapo.main_dapo"
    assert table["dapo"]["0.8.0"] == "recipe.dapo.main_dapo"
    help_text = run_cli("plan", "--help", env={"COLUMNS": "300"}).stdout
    assert "colocate-async" in help_text and "--algorithm" in help_text and "--dapo-source" in help_text


@pytest.mark.parametrize("version, source, entry", [
    ("0.9.0", None, "verl.trainer.main_ppo"), ("0.9.1", None, "verl.trainer.main_ppo"),
    ("0.9.1", "recipe", "recipe.dapo.main_dapo"), ("0.9.1", "core", "verl.trainer.main_ppo"),
    ("0.8.0", None, "recipe.dapo.main_dapo"), ("0.7.1", None, "recipe.dapo.main_dapo"),
])
def test_dapo_runs_from_verls_core_by_default_on_09_and_the_recipe_stays_available(version, source, entry):
    args = ["plan", "--json", "--verl-version", version] + (["--dapo-source", source] if source else [])
    data = json.loads(run_cli(*args).stdout)
    assert data["entry"]["module"] == entry, data["entry"]
    overrides = data["overrides"]
    if entry == "verl.trainer.main_ppo":  # the same DAPO settings: dynamic sampling, dapo reward, clip-higher
        assert "trainer.use_v1=True" in overrides and "algorithm.filter_groups.enable=True" in overrides
        assert "reward.reward_manager.name=dapo" in overrides
        assert "+reward.reward_kwargs.overlong_buffer_cfg.enable=True" in overrides
        assert "actor_rollout_ref.actor.clip_ratio_high=0.28" in overrides
        assert "actor_rollout_ref.actor.loss_agg_mode=token-mean" in overrides
    side = [f for f in data["findings"] if f["field"] == "dapo_source"]
    assert bool(side) == version.startswith("0.9"), side  # core and recipe side by side where both exist
