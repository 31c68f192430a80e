"""The partial offload features verl's own scripts use (the actor's parameters only, its optimizer only, the
reference only) and verl's nulls (count the steps from the epochs, keep every checkpoint), through `plan`."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

A = "actor_rollout_ref."


def _plan(tmp_path, *args: str, text: str = "") -> dict:
    config = tmp_path / "run.yaml"
    config.write_text("mode: dapo\nframework: megatron\ndevice: gpu\nverl_version: 0.9.1\n" + text)
    result = run_cli("plan", "--config", str(config), "--json", *args)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    return json.loads(result.stdout)


def _sent(data: dict, *keys: str) -> dict[str, str]:
    pairs = dict(item.split("=", 1) for item in data["command"] if "=" in item and not item.startswith("-"))
    return {key: pairs.get(key, "") for key in keys}


# verl 0.9 has no actor.megatron.grad_offload (param_offload releases the gradients too)
OFFLOAD_KEYS = (A + "actor.megatron.param_offload", A + "actor.megatron.optimizer_offload",
                A + "ref.megatron.param_offload")


@pytest.mark.parametrize("feature,offloaded", [
    ("param_offload", {A + "actor.megatron.param_offload"}),
    ("optimizer_offload", {A + "actor.megatron.optimizer_offload"}),
    ("ref_offload", {A + "ref.megatron.param_offload"}),
    ("offload", set(OFFLOAD_KEYS)),
])
def test_each_offload_feature_offloads_exactly_its_part(tmp_path, feature, offloaded):
    data = _plan(tmp_path, "--features", feature)
    assert not [item for item in data["command"] if "grad_offload" in item]
    sent = _sent(data, *OFFLOAD_KEYS)
    assert {key for key, value in sent.items() if value == "True"} == offloaded, sent
    assert all(sent[key] == "False" for key in set(OFFLOAD_KEYS) - offloaded), sent


def test_an_offload_feature_that_is_on_wins_over_offload_off(tmp_path):
    sent = _sent(_plan(tmp_path, "--features", "-offload,ref_offload"), *OFFLOAD_KEYS)
    assert sent[A + "ref.megatron.param_offload"] == "True" and sent[A + "actor.megatron.param_offload"] == "False"


def test_the_memory_estimate_follows_the_parameters_offloaded(tmp_path):
    kept = _plan(tmp_path)["memory"]
    offloaded = _plan(tmp_path, "--features", "param_offload")["memory"]
    # rollout and log-prob phases hold the actor's parameters on the device only when they are not offloaded
    lower = [name for name in kept["phases"] if offloaded["phases"][name]["gb"] < kept["phases"][name]["gb"] - 0.5]
    assert "rollout" in lower, {n: (kept["phases"][n]["gb"], offloaded["phases"][n]["gb"]) for n in kept["phases"]}
    assert offloaded["host_gb_per_node"] > kept["host_gb_per_node"]  # the parameters are on the host now


def test_verls_nulls_are_sent_as_null_and_shown(tmp_path):
    data = _plan(tmp_path, text="train_steps: null\nmax_ckpt_to_keep: null\n")
    sent = _sent(data, "trainer.total_training_steps", "trainer.max_actor_ckpt_to_keep")
    assert sent == {"trainer.total_training_steps": "null", "trainer.max_actor_ckpt_to_keep": "null"}
    assert data["spec"]["train_steps"] is None and data["spec"]["max_ckpt_to_keep"] is None
    assert data["sources"]["train_steps"].startswith("file ")  # the file's null, not a default
    defaults = _sent(_plan(tmp_path), "trainer.total_training_steps", "trainer.max_actor_ckpt_to_keep")
    assert defaults == {"trainer.total_training_steps": "100", "trainer.max_actor_ckpt_to_keep": "2"}


def test_gradient_offload_alone_on_a_release_that_has_it(tmp_path):
    """verl 0.7's Megatron actor offloads gradients on their own (the 7B DAPO script offloads them and the
    reference, and keeps the actor's parameters)."""
    grads = A + "actor.megatron.grad_offload"
    data = _plan(tmp_path, "--verl-version", "0.7.0", "--features", "grad_offload,ref_offload")
    sent = _sent(data, grads, *OFFLOAD_KEYS)
    assert sent == {grads: "True", A + "actor.megatron.param_offload": "False",
                    A + "actor.megatron.optimizer_offload": "False", A + "ref.megatron.param_offload": "True"}


def test_an_override_a_feature_cannot_say_is_kept_with_a_warning(tmp_path):
    """Megatron's attention_backend=auto: flash_attn sends flash or fused, so the override is the only way."""
    key = A + "actor.megatron.override_transformer_config.attention_backend"
    data = _plan(tmp_path, "--override", f"{key}=auto")
    assert _sent(data, key) == {key: "auto"}
    said = [f for f in data["findings"] if f["field"] == "overrides"]
    assert [f["level"] for f in said] == ["warning"] and "it sends flash or fused" in said[0]["message"], said
    config = tmp_path / "run.yaml"
    refused = run_cli("plan", "--config", str(config), "--override", f"{key}=flash")  # the feature says that one
    assert refused.returncode != 0 and "use --features flash_attn or -flash_attn" in refused.stdout + refused.stderr


def test_gradient_offload_on_a_release_without_the_key_is_said_not_shown_as_working(tmp_path):
    """verl 0.9 has no actor.megatron.grad_offload (its param_offload releases the gradients): the feature sends
    nothing there, so plan warns and names the feature that does offload, instead of listing it as on and silent."""
    data = _plan(tmp_path, "--verl-version", "0.9.1", "--features", "grad_offload")
    said = [f for f in data["findings"] if f["field"] == "features" and "no effect" in f["message"]]
    assert said and "--features param_offload" in said[0]["fix"], data["findings"]
    assert not any("grad_offload" in o for o in data["overrides"])
    quiet = _plan(tmp_path, "--verl-version", "0.7.0", "--features", "grad_offload")
    assert not [f for f in quiet["findings"] if "no effect" in f["message"]]
