"""A compose that reuses the process's composition of the base config gives exactly what Hydra's whole compose
gives: the same config (as written and resolved) for the launches verl-deploy generates on every release and for
a script's own overrides, the same first error line for an override Hydra refuses, and a whole compose wherever
an override changes the defaults list. An edited file of the config tree is read again."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import OmegaConf

from test_compose_releases import launch_parts
from verl_deploy.pipeline import prepare
from verl_deploy.verlconfig import compose_cache, index
from verl_deploy.verlconfig.locate import ConfigSource, locate

RELEASES = ["0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"]
A = "actor_rollout_ref."


def _whole(monkeypatch, *args):
    """index.compose with every compose done whole (no base kept)."""
    with monkeypatch.context() as patch:
        patch.setattr(compose_cache, "_compose_base", lambda name, document: None)
        patch.setattr(compose_cache, "_bases", {})
        return index.compose(*args)


def _both(monkeypatch, *args):
    reused = index.compose(*args)
    reused_again = index.compose(*args)  # the second one surely from the kept base
    whole = _whole(monkeypatch, *args)
    return reused, reused_again, whole


def _same(a, b):
    assert OmegaConf.to_container(a, resolve=False) == OmegaConf.to_container(b, resolve=False)
    assert OmegaConf.to_container(a, resolve=True) == OmegaConf.to_container(b, resolve=True)
    assert OmegaConf.is_struct(a) == OmegaConf.is_struct(b)


def _launch(version, mode, framework, **flags):
    prepared = prepare(flags={"verl_version": version, "mode": mode, "framework": framework, **flags}, environ={})
    assert prepared.ok, [f.line() for f in prepared.findings if f.level == "error"]
    return launch_parts(prepared.plan)


@pytest.mark.parametrize("version", RELEASES)
def test_the_generated_launches_compose_as_hydra_composes_them_whole(version, monkeypatch):
    for mode, framework in (("dapo", "megatron"), ("dapo", "fsdp")):
        source, name, base, entry, overrides = _launch(version, mode, framework)
        reused, again, whole = _both(monkeypatch, source, name, base, entry, overrides)
        _same(reused, whole)
        _same(again, whole)
        assert OmegaConf.select(reused, A + "actor.optim.weight_decay") == 0.1


def test_a_scripts_own_adds_force_adds_and_deletions_compose_as_hydra_composes_them(monkeypatch):
    source, name, base, entry, overrides = _launch("0.9.1", "dapo", "fsdp")
    extra = ["+trainer.brand_new=1", "++trainer.total_epochs=7", "++trainer.another_new=[1,2]",
             "~trainer.val_before_train", "data.max_prompt_length=${data.max_response_length}",
             "'trainer.logger=[\"console\"]'".strip("'")]
    reused, again, whole = _both(monkeypatch, source, name, base, entry, [*overrides, *extra])
    _same(reused, whole)
    _same(again, whole)
    assert reused.trainer.brand_new == 1 and reused.trainer.total_epochs == 7 and "val_before_train" not in reused.trainer
    assert reused.data.max_prompt_length == reused.data.max_response_length


@pytest.mark.parametrize("override,message", [
    ("trainer.no_such_key=1", "Could not override 'trainer.no_such_key'"),
    ("+trainer.total_epochs=3", "Could not append to config. An item is already at 'trainer.total_epochs'"),
    ("~trainer.no_such_key", "Could not delete from config. 'trainer.no_such_key' does not exist"),
    ("trainer.total_epochs=1,2", "Ambiguous value for argument 'trainer.total_epochs=1,2'"),
    ("trainer.total_epochs=[1", "no viable alternative at input '[1'"),
])
def test_an_override_hydra_refuses_gives_hydras_own_error(override, message, monkeypatch):
    source, name, base, entry, overrides = _launch("0.8.0", "dapo", "megatron")
    index.compose(source, name, base, entry, overrides)  # the base is kept
    errors = []
    for compose in (index.compose, lambda *a: _whole(monkeypatch, *a)):
        with pytest.raises(Exception) as caught:
            compose(source, name, base, entry, [*overrides, override])
        errors.append((type(caught.value), str(caught.value).strip().splitlines()[0]))
    assert errors[0] == errors[1]
    assert message in errors[0][1]


def test_an_override_that_picks_a_config_group_option_is_composed_whole(monkeypatch):
    source = locate("0.9.1")
    whole_calls = []
    real_whole = compose_cache._compose_whole
    monkeypatch.setattr(compose_cache, "_compose_whole", lambda *a: whole_calls.append(a) or real_whole(*a))
    picked = index.compose(source, "x", "ppo_trainer", {}, ["actor@actor_rollout_ref.actor=megatron_actor"])
    assert len(whole_calls) == 1  # the defaults list changes: not from the kept base
    default = index.compose(source, "x", "ppo_trainer", {}, [])
    assert len(whole_calls) == 1
    assert picked.actor_rollout_ref.actor.strategy == "megatron" and default.actor_rollout_ref.actor.strategy == "fsdp"


def test_an_edited_config_file_is_read_again(tmp_path):
    real = locate("0.9.1")
    root = tmp_path / "verl-copy"
    shutil.copytree(real.root / "verl", root / "verl")
    source = ConfigSource(real.version, root, "a copy")
    before = index.compose(source, "x", "ppo_trainer", {}, ["trainer.n_gpus_per_node=4"])
    trainer_yaml = source.base_dir / "ppo_trainer.yaml"
    text = trainer_yaml.read_text()
    assert "total_epochs: 30" in text
    trainer_yaml.write_text(text.replace("total_epochs: 30", "total_epochs: 31"))
    after = index.compose(source, "x", "ppo_trainer", {}, ["trainer.n_gpus_per_node=4"])
    assert (before.trainer.total_epochs, after.trainer.total_epochs) == (30, 31)
    assert after.trainer.n_gpus_per_node == 4
