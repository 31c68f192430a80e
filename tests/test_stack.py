"""check compares the Ascend stack it finds with the one the verl release documents (fake probe output)."""

from __future__ import annotations

from verl_deploy.preflight.stack import STACKS, judge_stack, matches


def rows(area):
    return {row.check: row for row in area.rows}


def test_the_seeds_image_stack_matches_verl_0_7_0():
    # what `python3 -c` / ascend_toolkit_install.info print in quay.io/ascend/verl:verl-8.3.rc1-...-v0.7.0
    versions = {"torch": "2.7.1+cpu", "torch_npu": "2.7.1", "vllm": "0.11.0+empty", "vllm_ascend": "0.11.0rc1",
                "megatron": "0.12.1"}
    area = judge_stack("0.7.0", versions, "8.3.RC1")
    assert area.status == "ok" and not area.findings()
    assert area.data["source"].endswith("docs/ascend_tutorial/ascend_quick_start.rst")


def test_verl_0_9_1_in_the_0_7_0_image_is_told_which_stack_and_image():
    versions = {"torch": "2.7.1+cpu", "torch_npu": "2.7.1", "vllm": "0.11.0", "vllm_ascend": "0.11.0rc1"}
    area = judge_stack("0.9.1", versions, "8.3.RC1")
    found = {f.field: f for f in area.findings()}
    assert set(found) == {"CANN", "torch", "torch_npu", "vllm", "vllm-ascend"}
    assert all(f.level == "warning" for f in found.values())
    assert "2.7.1+cpu installed, verl 0.9.1 documents 2.10.0" in found["torch"].message
    assert "install_guidance.rst" in found["torch"].fix  # 0.9's docs name no image: build from its guidance
    area = judge_stack("0.8.0", versions, "8.3.RC1")
    assert "quay.io/ascend/verl:v0.8.0-cann9.0.0-torch2.9.0post2" in area.findings()[0].fix


def test_unreadable_versions_are_said_not_guessed():
    area = judge_stack("0.7.1", {"torch": "present"}, None)
    assert not area.findings() and "version not readable" in rows(area)["CANN"].value
    assert judge_stack("0.5.0", {}, None).rows[0].status == "info"


def test_version_matching_is_by_release():
    assert matches("2.9.0.post2", "2.9.0.post2") and matches("2.9.0", "2.9.0.post2")
    assert matches("8.3.rc1", "8.3.RC1") and not matches("8.2.RC1", "8.3.RC1")
    assert not matches("0.13.0", "0.11.0rc1") and set(STACKS) >= {"0.6.0", "0.7.0", "0.8.0", "0.9.1"}
