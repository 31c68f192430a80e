"""The feature registry and policy: masks, names, defaults, rules."""

import pytest

from verl_deploy import features


def states(**kw):
    kw.setdefault("framework", "megatron")
    kw.setdefault("device", "npu")
    result, findings = features.resolve(**kw)
    return {s.name: (s.on, s.why) for s in result}, findings


def test_defaults_turn_performance_features_on_and_memory_off():
    got, findings = states()
    assert not findings
    assert got["remove_padding"] == (True, "default")
    assert got["dynamic_batch"] == (True, "default")
    assert got["flash_attn"] == (True, "default")
    assert got["offload"] == (False, "default")
    assert got["recompute"] == (False, "default")
    # gradient checkpointing is an FSDP feature: not applicable on Megatron
    assert got["gradient_checkpointing"] == (False, "n/a")


def test_fsdp_defaults_include_gradient_checkpointing():
    got, _ = states(framework="fsdp")
    assert got["gradient_checkpointing"] == (True, "default")
    assert got["recompute"] == (False, "n/a")


def test_mask_is_an_explicit_choice_for_all_seven_bits():
    got, findings = states(mask="1010000")
    assert not findings
    assert got["remove_padding"] == (True, "mask")
    assert got["dynamic_batch"] == (False, "mask")  # a 0 means off, even for a default-on feature
    assert got["offload"] == (True, "mask")
    assert got["vpp"] == (False, "mask")
    assert got["flash_attn"] == (True, "default")  # not in the mask: the default applies


def test_mask_round_trips():
    result, _ = features.resolve(framework="megatron", device="npu", mask="1101101")
    assert features.mask_of(result) == "1101101"


@pytest.mark.parametrize("mask", ["101", "10100002", "abcdefg", "", "1 10000"])
def test_invalid_mask_is_a_finding(mask):
    _, findings = states(mask=mask or " ")
    assert findings and findings[0].field == "mask" and findings[0].level == "error"


def test_no_default_features_starts_all_off():
    got, _ = states(no_default_features=True)
    assert not any(on for on, _ in got.values())


def test_user_features_by_name_alias_and_negation():
    got, findings = states(user_features=["Offload,-flash_attn", "PfxCache"])
    assert not findings
    assert got["offload"] == (True, "user")
    assert got["flash_attn"] == (False, "user")
    assert got["prefix_cache"] == (True, "user")


def test_unknown_feature_names_the_choices():
    _, findings = states(user_features=["offlaod"])
    assert findings[0].level == "error" and "offlaod" in findings[0].message
    assert "offload" in findings[0].fix


def test_oom_adds_memory_features_but_never_removes_user_choices():
    got, _ = states(user_features=["prefix_cache"], oom_features=["offload", "recompute"])
    assert got["offload"] == (True, "oom")
    assert got["recompute"] == (True, "oom")
    assert got["prefix_cache"] == (True, "user")


def test_swap_optimizer_forces_optimizer_offload_off_with_a_warning():
    result, findings = features.resolve(framework="megatron", device="npu", user_features=["offload", "swap_optimizer"])
    knobs = features.knob_values(result)
    assert knobs["optimizer_offload"] is False
    assert knobs["param_offload"] is True
    assert any(f.level == "warning" and "swap_optimizer" in f.message for f in findings)


@pytest.mark.parametrize("kw,needle", [
    ({"framework": "fsdp", "user_features": ["recompute"]}, "framework fsdp"),
    ({"framework": "fsdp", "user_features": ["vpp"]}, "framework fsdp"),
    ({"device": "gpu", "user_features": ["swap_optimizer"]}, "device gpu"),
    ({"framework": "fsdp", "mask": "0000100"}, "framework fsdp"),
])
def test_feature_on_the_wrong_framework_or_device_is_an_error(kw, needle):
    _, findings = states(**kw)
    assert any(f.level == "error" and needle in f.message for f in findings)


def test_describe_mask_names_each_bit():
    rows = features.describe_mask("0000001")
    assert [r["label"] for r in rows] == ["RmvPad", "DynBSZ", "Offload", "PfxCache", "Recompute", "SwapOpt", "VPP"]
    assert [r["on"] for r in rows] == [False] * 6 + [True]


def test_the_readmes_feature_table_lists_every_feature_of_the_registry():
    """The README's Features table is what a user reads to choose `--features`: each registry feature has a row
    (named as `--features` takes it), and no row names a feature the registry lacks."""
    from pathlib import Path

    from verl_deploy.features import REGISTRY

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme.split("| feature | mask bit | kind | default |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:] if line.startswith("|")]
    assert sorted(rows) == sorted(f.name for f in REGISTRY)
