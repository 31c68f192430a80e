"""Every supported release composes: 7 releases x {dapo, one-step-off} x {megatron, fsdp} x {npu, gpu}.

The generated argv is composed with Hydra against that release's real config (its wheel, cached) and
the recipe yaml of that release; the keys this issue added are checked where they must and must not be.
"""

import itertools

import pytest
from omegaconf import OmegaConf

from verl_deploy.pipeline import prepare
from verl_deploy.verlconfig import index
from verl_deploy.verlconfig.locate import locate

RELEASES = ["0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"]
CASES = list(itertools.product(RELEASES, ["dapo", "one-step-off"], ["megatron", "fsdp"], ["npu", "gpu"]))
A = "actor_rollout_ref."


def launch_parts(plan) -> tuple:
    """index.compose's arguments for this plan's launch: (release source, config name, base config, the entry's
    own document, the overrides)."""
    source = locate(plan.spec.verl_version)
    base = plan.profile.base_configs[plan.spec.framework]
    entry, _ = index.entry_yaml(source, plan.entry_module, plan.config_name, base,
                                plan.profile.recipe_overlays[(plan.spec.mode, plan.spec.framework)])
    return source, plan.config_name, base, entry, plan.argv()[3:]


@pytest.mark.parametrize("version,mode,framework,device", CASES, ids=["-".join(c) for c in CASES])
def test_release_composes(version, mode, framework, device):
    flags = {"verl_version": version, "mode": mode, "framework": framework, "device": device}
    if mode == "one-step-off" and framework == "megatron":
        flags.update(train_tp=2, train_pp=1)
    prepared = prepare(flags=flags, environ={})
    assert prepared.ok, [f.line() for f in prepared.findings if f.level == "error"]
    plan = prepared.plan
    cfg = index.compose(*launch_parts(plan))

    assert OmegaConf.select(cfg, A + "actor.optim.weight_decay") == 0.1  # as every verl DAPO script
    compile_on = OmegaConf.select(cfg, A + "actor.use_torch_compile")
    assert compile_on is (device != "npu")  # verl's NPU scripts turn it off; GPU keeps verl's default
    sent = " ".join(plan.argv())
    # 0.7.0's vLLM server replaces max_model_len with the model's max_position_embeddings: not sent there
    assert ("rollout.max_model_len=" in sent) is (version != "0.7.0")
    if version.startswith("0.6") and framework == "megatron":
        assert "actor.megatron.use_remove_padding" not in sent  # absent from 0.6's config
        assert OmegaConf.select(cfg, A + "model.use_remove_padding") is True

    if version.startswith("0.6") and mode == "dapo":
        # 0.6's main_dapo hands reward_model.overlong_buffer to the reward manager; reward_kwargs are never read
        assert "reward_kwargs" not in sent and OmegaConf.select(cfg, "reward_model.overlong_buffer.enable") is True
