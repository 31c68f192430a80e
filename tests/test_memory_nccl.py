"""NCCL's communicator buffers in the memory estimate: the figures read from NCCL's allocations (v2.21.5, what torch
2.5/2.6 pin, sets everything up at init; from v2.22 an algorithm's buffers come with its first use), which GPUs get
NVLS buffers, which communicators a worker holds, and `check` finding the NCCL the training will load.

Issue 26's C019 (Qwen2.5-32B, Megatron TP 8 on 8 x H20, torch 2.6) ran out of memory where the estimate with 256 MiB
per communicator and two communicators said it fits: it holds four 8-GPU communicators at ~1.9 GiB each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import HW, run_cli
from test_memory_sources import planned
from verl_deploy.memory import nccl, terms
from verl_deploy.preflight.run import _nccl_version

# NCCL's allocations for one communicator on an NVSwitch node of 8 GPUs (24 channels, 8 more p2p-only ones), MiB:
SMALL = 32 * 3 * 2 + 2  # three 2 MiB-rounded allocations per channel (channel.cc:41-55) + the device communicator
PAIR = 10 + 2  # a connection: the receiver's LL + LL128 + SIMPLE rounded to 2 MiB (p2p.cc:419), the sender's 2 MiB


def test_nccl_2_21_sets_up_ring_tree_and_nvls_at_init_about_1_9_gib_per_8_gpu_communicator():
    ring, tree = 24 * PAIR, 24 * PAIR  # the tree, a chain inside the node, adds a pair on all but its ends
    nvls = 24 * 2 * (1 + 2) * 8  # every channel, both directions, 1 MiB buffer + 2 MiB header, 8 head GPUs
    mib, how = nccl.communicator_mib((2, 21, 5), 8, nvls=True)
    assert mib == SMALL + 24 * 2 + ring + tree + nvls == 1970
    assert "all set up at init" in how and f"NVLS {nvls}" in how
    assert nccl.communicator_mib((2, 21, 5), 8, nvls=False)[0] == SMALL + ring + tree  # A100: no multicast
    assert nccl.communicator_mib((2, 21, 5), 2, nvls=True)[0] == SMALL + ring  # 2 GPUs: no NVLS, ring = tree


def test_from_nccl_2_22_buffers_come_with_first_use_and_nvls_is_16_channels_without_headers():
    lazy = nccl.communicator_mib((2, 26, 2), 8, nvls=True)
    assert lazy[0] == SMALL + 2 + 24 * 2 + 2 + 24 * PAIR + 16 * 2 * 1 * 8 == 790
    assert nccl.communicator_mib(None, 8, nvls=True)[0] == lazy[0]  # the default: every planned release's image is lazy
    assert nccl.communicator_mib((2, 27, 3), 2, nvls=True)[0] == SMALL + 2 + 24 * PAIR == 484
    assert "first use" in lazy[1]


@pytest.mark.parametrize("name, capable", [
    ("NVIDIA H20", True), ("NVIDIA H100 80GB HBM3", True), ("NVIDIA H800", True), ("NVIDIA H200", True),
    ("NVIDIA B200", True), ("NVIDIA GH200 480GB", True), (None, True),
    ("NVIDIA A100-SXM4-80GB", False), ("NVIDIA H100 PCIe", False), ("NVIDIA H100 NVL", False), ("NVIDIA L20", False),
    ("NVIDIA GeForce RTX 4090", False), ("Tesla V100-SXM2-32GB", False),
])
def test_nvls_buffers_only_where_nvswitch_multicast_exists(name, capable):
    assert nccl.nvls_capable(name) is capable


def test_the_nccl_a_torch_wheel_pins_and_what_check_reports():
    assert nccl.nccl_for_torch("2.6.0+cu124") == (2, 21, 5) and nccl.nccl_for_torch("2.5.1") == (2, 21, 5)
    assert nccl.nccl_for_torch("2.7.1") == (2, 26, 2)
    assert nccl.nccl_for_torch("2.13.0+cpu")[:2] >= nccl.LAZY_FROM  # newer than the table: newer NCCL
    assert nccl.nccl_for_torch("1.13.1") is None and nccl.nccl_for_torch("present") is None
    assert _nccl_version({"nccl": "2.21.5", "torch": "2.8.0"}) == "2.21.5"  # the wheel beats torch's pin
    assert _nccl_version({"nccl": "present", "torch": "2.6.0"}) == "2.21.5"
    assert _nccl_version({"torch": None}) is None
    assert _nccl_version({"torch": "2.6.0a0+ecf3bae40a.nv25.01"}) is None  # NGC's torch brings its own NCCL
    assert nccl.parse_version("2.26.2.post1") == (2, 26, 2)


def test_a_megatron_worker_holds_its_parallel_groups_the_world_and_two_for_the_engines_tp(tmp_path):
    """TP 2 x PP 2 on 8 GPUs (DP 2): TP, DP, PP and the world on the trainer side (the distributed optimizer's
    grad-norm all-reduce runs over the world), vLLM's TP group twice (its PyNccl communicator and the torch group
    its logits all-gather uses)."""
    s, _, _ = planned(tmp_path, "Qwen3-8B", framework="megatron", device="gpu", devices="0-7", train_tp=2, train_pp=2,
                   gen_tp=2, verl_version="0.9.1")
    assert terms.communicator_groups(s) == [
        ("TP", 2, 2), ("DP", 2, 2), ("PP", 2, 2), ("world", 8, 8),
        ("rollout TP (engine's own)", 2, 2), ("rollout TP (torch group)", 2, 2)]
    two, eight = nccl.communicator_mib(None, 2, True)[0], nccl.communicator_mib(None, 8, True)[0]
    assert terms.comm_buffers(s).bytes == (5 * two + eight) * 2 ** 20
    f, _, _ = planned(tmp_path / "f", "Qwen3-8B", framework="fsdp", device="gpu", devices="0-7", gen_tp=2,
                   allow_tp_mismatch=True, overrides=["actor_rollout_ref.actor.fsdp_config.fsdp_size=4"])
    assert [g for g, _, _ in terms.communicator_groups(f, rollout_side=False)] == ["FSDP", "FSDP replicate", "world"]
    cp, _, _ = planned(tmp_path / "cp", "Qwen3-8B", framework="megatron", device="gpu", devices="0-7", train_tp=2,
                       train_pp=1, train_cp=2, gen_tp=2, verl_version="0.9.1")
    assert ("DP x CP", 4, 4) in terms.communicator_groups(cp)  # gradients reduce over DP x CP: 4 ranks, tp apart
    split = s.with_(mode="one-step-off", rollout_devices_per_node=4, devices_per_node=4)
    assert ("weight sync", 8, 8) in terms.communicator_groups(split)  # both pools' devices on the node


def test_issue_c019_the_nccl_of_torch_2_6_on_an_nvswitch_host_is_what_puts_the_update_over(tmp_path):
    """C019's layout: the same plan fits with a lazily connecting NCCL and not with torch 2.6's, on H20s; on A100s
    (no NVLS) the old NCCL costs far less. The formula names the release and the fix."""
    flags = dict(framework="megatron", device="gpu", devices="0-7", train_tp=8, train_pp=1, gen_tp=8, verl_version="0.9.1",
                 device_memory_gb=96, max_prompt_length=2048, max_response_length=6144, features="offload",
                 overrides=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                            "actor_rollout_ref.actor.use_kl_loss=True"])
    _, _, new = planned(tmp_path / "a", "Qwen3-32B", device_name="NVIDIA H20", **flags)
    s, _, old = planned(tmp_path / "b", "Qwen3-32B", device_name="NVIDIA H20", nccl_version="2.21.5", **flags)
    _, _, a100 = planned(tmp_path / "c", "Qwen3-32B", device_name="NVIDIA A100-SXM4-80GB", nccl_version="2.21.5", **flags)
    assert len(terms.communicators(s)) == 4  # TP, world, the engine's two
    assert new.memory.fits and not old.memory.fits and a100.memory.fits
    step = old.memory.phases["actor_update"]["trainer_comm_buffers"].bytes
    assert step - new.memory.phases["actor_update"]["trainer_comm_buffers"].bytes == 2 * (1970 - 790) * 2 ** 20
    assert old.memory.peak_gb - new.memory.peak_gb == pytest.approx(4 * (1970 - 790) / 1024, abs=0.01)
    assert old.memory.peak_gb - a100.memory.peak_gb == pytest.approx(4 * 1200 / 1024, abs=0.01)
    formula = old.memory.phases["actor_update"]["trainer_comm_buffers"].formula
    assert "NCCL 2.21.5" in formula and "NVLS 1152" in formula


def test_check_finds_the_nccl_wheel_and_plan_sizes_the_communicators_with_it(npu_host, tmp_path):
    """A GPU host whose Python has nvidia-nccl-cu12 2.21.5: check saves it, plan's estimate uses it and says so."""
    site = tmp_path / "nccl-site" / "nvidia_nccl_cu12-2.21.5.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: 2.21.5\n")
    env = {**npu_host["env"], "FAKE_NPU_SMI": "/nonexistent", "FAKE_NPU_SMI_RC": "127",
           "FAKE_NVIDIA_SMI": str(HW / "nvidia-smi-8xh100-570-idle.txt"),
           "PYTHONPATH": f"{site.parent}:{npu_host['env']['PYTHONPATH']}"}
    result = run_cli("check", "--json", "--search-root", str(npu_host["root"]), "--device", "gpu", env=env)
    assert json.loads(result.stdout)["detected"]["nccl_version"] == "2.21.5", result.stderr
    plan = json.loads(run_cli("plan", "--json", "--device", "gpu", env=env).stdout)
    assert plan["spec"]["nccl_version"] == "2.21.5" and plan["sources"]["nccl_version"] == "detected"
    formula = plan["memory"]["phases"]["actor_update"]["terms"]["trainer_comm_buffers"]["formula"]
    assert "NCCL 2.21.5 (all set up at init)" in formula
    # a container that is not running yet: this host's Python is not the training's, nothing is recorded
    later = run_cli("check", "--json", "--search-root", str(npu_host["root"]), "--device", "gpu", "--container",
                    "not-made-yet", env={**env, "VERL_DEPLOY_STATE_DIR": str(tmp_path / "other-state")})
    assert "nccl_version" not in json.loads(later.stdout)["detected"]


def test_the_benchmark_plans_a_case_with_the_nccl_its_named_stack_pins():
    """benchmarks/memory.py reads a case's versions column: an image tag's th2.6.0, torch / vLLM releases (vLLM 0.7
    pins torch 2.5.1, 0.8 torch 2.6.0), a verl commit whose install script pins torch, or NCCL itself."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "memory.py"
    spec = importlib.util.spec_from_file_location("memory_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("memory_benchmark", bench)
    spec.loader.exec_module(bench)
    stack = bench._stack
    assert stack({"versions": "verl@4f80e46 (hiyouga/verl:ngc-th2.6.0-cu126-vllm0.8.3 / th2.5.1-vllm0.7.4)"}) == {
        "nccl_version": "2.21.5"}
    assert stack({"versions": "verl@9f4161e, CUDA 12.6"}) == {"nccl_version": "2.21.5"}
    assert stack({"versions": "torch==2.7.1, vllm==0.10.0"}) == {"nccl_version": "2.26.2"}
    assert stack({"versions": "NCCL 2.23.4"}) == {"nccl_version": "2.23.4"}
    assert stack({"versions": "?"}) == {} and stack({"versions": "th2.6.0 / th2.8.0"}) == {}  # none, or disagreeing
