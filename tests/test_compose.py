"""The command a generated script runs composes with Hydra against verl's real config files.

For each mode x framework x device x feature set x verl version: generate the scripts, run
start_verl.sh with stub python3/ray on PATH, take the argv python3 received, and compose it
with Hydra against the real config of that version (from its wheel). Recipe keys come from
the profile, as the wheel has no recipe.
"""

import itertools

import pytest
from omegaconf import OmegaConf

from verl_deploy.pipeline import prepare
from verl_deploy.render import plan_document, write_outputs
from verl_deploy.verlconfig import index
from verl_deploy.verlconfig.locate import locate

from conftest import recorded_argv, run_scripts

FEATURE_SETS = {
    "default": {},
    "memory": {"features": "offload,recompute"},
    "everything": {"mask": "1111111"},
    "all-off": {"no_default_features": True},
}
CASES = [
    (version, mode, framework, device, fs)
    for version, mode, framework, device, fs in itertools.product(
        ["0.7.0", "0.9.1"], ["dapo", "one-step-off"], ["megatron", "fsdp"], ["npu", "gpu"], FEATURE_SETS)
    # megatron-only / npu-only features have their own error tests
    if not (fs in ("memory", "everything") and framework == "fsdp")
    and not (fs == "everything" and device == "gpu")
]


def select(cfg, key):
    return OmegaConf.select(cfg, key, throw_on_resolution_failure=False)


@pytest.mark.parametrize("version,mode,framework,device,feature_set", CASES,
                         ids=["-".join(c) for c in CASES])
def test_generated_command_composes(tmp_path, stubs, version, mode, framework, device, feature_set):
    flags = {"verl_version": version, "mode": mode, "framework": framework, "device": device,
             "run_dir": str(stubs["verl_root"]), **FEATURE_SETS[feature_set]}
    if mode == "one-step-off" and framework == "megatron":
        flags.update(train_tp=2, train_pp=2 if feature_set == "everything" else 1)
    prepared = prepare(flags=flags, environ={})
    assert prepared.ok, [f.line() for f in prepared.findings if f.level == "error"]
    out = tmp_path / "out"
    written = write_outputs(prepared.plan, out, plan_document(prepared.plan, prepared.findings, None), force=False)
    assert not hasattr(written, "level"), written
    result = run_scripts(out, stubs)
    assert result.returncode == 0, result.stderr

    argv = recorded_argv(stubs)
    plan = prepared.plan
    assert argv[:3] == ["-m", plan.entry_module, f"--config-name={plan.config_name}"]
    assert (stubs["log"] / "python3.cwd").read_text().strip() == str(stubs["verl_root"])

    source = locate(version)
    entry, _ = index.entry_yaml(source, plan.entry_module, plan.config_name,
                                plan.profile.base_configs[framework], plan.profile.recipe_overlays[(mode, framework)])
    cfg = index.compose(source, plan.config_name, plan.profile.base_configs[framework], entry, argv[3:])

    assert select(cfg, "trainer.total_training_steps") == 100
    assert select(cfg, "actor_rollout_ref.model.path") == prepared.spec.model_path
    assert list(select(cfg, "trainer.logger")) == ["console"]
    on = {s.name for s in plan.features if s.on}
    a = "actor_rollout_ref."
    assert select(cfg, a + "actor.use_dynamic_bsz") is ("dynamic_batch" in on)
    assert select(cfg, a + "model.use_remove_padding") is ("remove_padding" in on)
    assert select(cfg, a + "rollout.enable_prefix_caching") is ("prefix_cache" in on)
    if framework == "megatron":
        megatron = a + "actor.megatron."
        assert select(cfg, megatron + "param_offload") is ("offload" in on)
        expect_opt = "offload" in on and "swap_optimizer" not in on
        assert select(cfg, megatron + "optimizer_offload") is expect_opt
        assert select(cfg, megatron + "override_transformer_config.recompute_granularity") == (
            "full" if "recompute" in on else None)
        assert select(cfg, megatron + "virtual_pipeline_model_parallel_size") == (2 if "vpp" in on else None)
        if device == "npu":
            assert select(cfg, megatron + "override_transformer_config.use_flash_attn") is ("flash_attn" in on)
        if version.startswith("0.9"):
            assert not any("grad_offload" in arg for arg in argv)  # gone in 0.9.1
    else:
        assert select(cfg, a + "actor.strategy") == "fsdp2"
        assert select(cfg, a + "model.override_config.attn_implementation") == (
            "flash_attention_2" if "flash_attn" in on else "sdpa")
    if mode == "one-step-off":
        assert select(cfg, a + "hybrid_engine") is False
        assert select(cfg, "rollout.n_gpus_per_node") == 4 and select(cfg, "trainer.n_gpus_per_node") == 4
    else:
        assert select(cfg, "algorithm.filter_groups.enable") is True
        assert select(cfg, "trainer.n_gpus_per_node") == 8
    reward_key = "reward_model.reward_manager" if version == "0.7.0" else "reward.reward_manager.name"
    assert select(cfg, reward_key) == "dapo"
    if version != "0.7.0":
        assert select(cfg, "reward.reward_kwargs.max_resp_len") == 8192  # mandatory from 0.7.1


@pytest.mark.parametrize("version", ["0.7.1", "0.8.0"])
def test_middle_versions_compose(tmp_path, version):
    for mode in ("dapo", "one-step-off"):
        prepared = prepare(flags={"verl_version": version, "mode": mode}, environ={})
        assert prepared.ok, [f.line() for f in prepared.findings if f.level == "error"]
        plan = prepared.plan
        source = locate(version)
        entry, _ = index.entry_yaml(source, plan.entry_module, plan.config_name, "ppo_megatron_trainer",
                                    plan.profile.recipe_overlays[(mode, "megatron")])
        index.compose(source, plan.config_name, "ppo_megatron_trainer", entry, plan.argv()[3:])


def test_grad_offload_user_override_fails_on_0_9_1():
    prepared = prepare(flags={"verl_version": "0.9.1", "overrides": ["actor_rollout_ref.actor.megatron.grad_offload=True"]},
                       environ={})
    assert not prepared.ok
    finding = next(f for f in prepared.findings if f.level == "error")
    assert "grad_offload" in finding.message
