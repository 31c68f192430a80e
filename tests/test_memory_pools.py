"""Per-pool memory (issue 25) and the typical vs worst step (issue 26, item 1), through the real pipeline.

The split modes (one-step-off, separate-async, fully-async) give the rollout engine devices of its own: each pool
is sized on its own devices with its own phases, and a finding names the pool that does not fit. With fixed
micro-batches the typical step (responses at the expected mean length) decides whether a run fits; the worst step
(every sequence at its maximum) is reported apart with the response length where it starts to run out of memory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from verl_deploy.memory import terms
from verl_deploy.memory.model import load_shape
from verl_deploy.memory.setup import setup_from_plan
from verl_deploy.pipeline import prepare_spec
from verl_deploy.sources import resolve

FIXTURES = Path(__file__).parent / "fixtures" / "memory"
A = "actor_rollout_ref."


def planned(tmp_path: Path, name: str, **flags):
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / f"{name}.config.json", folder / "config.json")
    spec = resolve(flags={"model_path": str(folder), **flags}, environ={}, detected={})
    prepared = prepare_spec(spec, check_verl=False)
    assert prepared.plan is not None, [f.message for f in prepared.findings]
    shape, _ = load_shape(spec.model_path)
    return setup_from_plan(prepared.plan), shape, prepared


# Qwen3-8B on FSDP without offload: the trainer's own state is 16 B/param over its devices
NO_OFFLOAD = dict(framework="fsdp", device="gpu", device_memory_gb=80, verl_version="0.9.1", gen_tp=2,
                  allow_tp_mismatch=True, features="remove_padding,dynamic_batch,gradient_checkpointing,flash_attn",
                  no_default_features=True, gpu_memory_utilization=0.7)


@pytest.mark.parametrize("mode", ["one-step-off", "separate-async", "fully-async"])
def test_each_pool_is_sized_on_its_own_devices(tmp_path, mode):
    """Colocated on 4 devices, 0.7 of the device for the engine on top of 16 B/param of resident training state does
    not fit; split 4 + 4, the trainer pool holds no engine and the rollout pool no training state, and both fit."""
    setup, shape, colocated = planned(tmp_path / "c", "Qwen3-8B", mode="dapo", devices=4, **NO_OFFLOAD)
    assert not colocated.memory.fits and "rollout" in colocated.memory.over()
    setup, shape, split = planned(tmp_path / "s", "Qwen3-8B", mode=mode, devices=8, trainer_gpus=4, rollout_gpus=4,
                                  **NO_OFFLOAD)
    estimate = split.memory
    assert not setup.colocated and setup.world == 4 and setup.rollout_devices_per_node == 4
    pools = estimate.pools()
    assert set(pools) == {"trainer", "rollout"} and pools["trainer"]["fits"] and pools["rollout"]["fits"]
    assert pools["rollout"]["phases"] == ["rollout"] and "actor_update" in pools["trainer"]["phases"]
    rollout = estimate.phases["rollout"]
    assert not {"actor_params", "optimizer", "gradients"} & set(rollout)  # no training state on the engine's devices
    assert rollout["engine_budget"].bytes == pytest.approx(0.7 * estimate.device.usable_gb * terms.GIB)
    assert not any(name.startswith("rollout_engine") for name in estimate.phases["actor_update"])
    # the trainer's state is split over the trainer pool's 4 devices, not over all 8
    assert estimate.phases["actor_update"]["optimizer"].bytes == pytest.approx(shape.params() * 8 / 4)
    assert estimate.fits


def test_a_rollout_pool_that_does_not_fit_is_named_and_fixed_with_the_engines_knobs(tmp_path):
    """The rollout pool runs out (a budget that leaves no KV room for one sequence); offload or recompute of the
    trainer cannot help it, so what would fit is the engine's knob, and the finding names the rollout pool."""
    setup, shape, prepared = planned(tmp_path, "Qwen3-8B", mode="separate-async", devices=8, trainer_gpus=4,
                                     rollout_gpus=4, **{**NO_OFFLOAD, "gen_tp": 1, "gpu_memory_utilization": 0.99})
    estimate = prepared.memory
    assert not estimate.fits and estimate.over() == ["rollout"] and estimate.pools()["trainer"]["fits"]
    assert not any(n in ("offload", "gradient_checkpointing") for n in estimate.needs)
    assert estimate.needs and estimate.needs[0].startswith("gpu_memory_utilization=")
    message = next(f.message for f in prepared.findings if f.field == "memory" and "will not fit" in f.message)
    assert "the rollout pool will not fit" in message and "(4 devices per node)" in message


def test_a_trainer_pool_that_does_not_fit_is_named(tmp_path):
    setup, shape, prepared = planned(tmp_path, "Qwen3-8B", mode="one-step-off", devices=2, trainer_gpus=1,
                                     rollout_gpus=1, **{**NO_OFFLOAD, "gen_tp": 1, "device_memory_gb": 80})
    estimate = prepared.memory
    assert not estimate.fits and estimate.pools()["rollout"]["fits"] and not estimate.pools()["trainer"]["fits"]
    message = next(f.message for f in prepared.findings if f.field == "memory" and "will not fit" in f.message)
    assert "the trainer pool will not fit" in message and "in the trainer pool (1 devices per node)" in message
    assert "offload" in estimate.needs  # the trainer's ladder applies to the trainer pool


FIXED = dict(framework="fsdp", device="npu", verl_version="0.9.1", devices=8, max_prompt_length=2048,
             max_response_length=16384, no_default_features=True, mode="dapo",
             features="remove_padding,offload,gradient_checkpointing,flash_attn",
             overrides=[f"{A}actor.ppo_micro_batch_size_per_gpu=2", f"{A}rollout.log_prob_micro_batch_size_per_gpu=2"])


def test_fixed_micro_batches_fit_at_the_typical_step_and_warn_where_the_worst_step_runs_out(tmp_path):
    """Without dynamic batching a micro-batch holds micro x (prompt + response) real tokens (remove-padding): at the
    typical lengths it fits, at the maximum it does not. plan says it fits, and warns with the response length
    where it starts to OOM and what prevents it (dynamic_batch first)."""
    setup, shape, prepared = planned(tmp_path, "Qwen3-8B", **FIXED)
    estimate = prepared.memory
    lengths = estimate.lengths
    assert not setup.dynamic_bsz and not setup.padded
    assert estimate.worst_over() and estimate.fits and set(estimate.tolerated) == set(estimate.worst_over())
    assert lengths.typical_fits and not lengths.worst_fits and lengths.typical_response_len == 8192
    assert lengths.typical_response_len < lengths.oom_response_len <= 16384
    warned = next(f for f in prepared.findings if f.field == "memory" and "the worst step does not" in f.message)
    assert f"about {lengths.oom_response_len} tokens" in warned.message and warned.fix.startswith("dynamic_batch")
    assert estimate.to_dict()["worst_over"] and estimate.to_dict()["fits"] is True


def test_a_step_peaks_at_its_largest_micro_batch_the_one_holding_its_longest_response(tmp_path):
    """A step's peak is its largest micro-batch's. With fixed micro-batches of one sequence that is the step's longest
    response, which reaches the maximum in most steps (verl's response_length/clip_ratio): the typical step of
    micro-batch 1 is no smaller than its worst one but for the prompts; micro-batch 2 holds it beside a typical one."""
    from dataclasses import replace

    from verl_deploy.memory import terms

    setup, _, prepared = planned(tmp_path, "Qwen3-8B", **FIXED)
    lengths = prepared.memory.lengths
    prompt, response = lengths.typical_prompt_len, lengths.typical_response_len
    typical = replace(setup, prompt_len=prompt, response_len=response, longest_response_len=setup.response_len)
    tokens, why = terms.tokens_per_device(typical, log_prob=False)
    assert tokens == (prompt + response) + (prompt + setup.response_len)  # micro-batch 2: one typical, the longest
    assert "the step's longest response" in why
    every_typical = replace(typical, longest_response_len=None)
    assert terms.tokens_per_device(every_typical, log_prob=False)[0] == 2 * (prompt + response)
    one = replace(typical, micro_batch=1)
    assert terms.tokens_per_device(one, log_prob=False)[0] == prompt + setup.response_len
    assert lengths.typical_peak_gb > build_gb(prepared, every_typical)  # the verdict no longer averages it away


def build_gb(prepared, setup) -> float:
    from verl_deploy.memory.estimate import build
    from verl_deploy.memory.model import load_shape

    shape, _ = load_shape(prepared.plan.spec.model_path)
    return build(shape, setup, prepared.memory.device, None).peak_gb


def test_the_expected_response_length_sizes_the_typical_step(tmp_path):
    """expected_response_length (DAPO's response_length/mean) replaces the half-the-maximum assumption: past the
    boundary the typical step no longer fits, and then the run does not fit."""
    _, _, short = planned(tmp_path / "a", "Qwen3-8B", **FIXED, expected_response_length=1000)
    assert short.memory.lengths.typical_response_len == 1000 and short.memory.fits
    assert "expected_response_length" in short.memory.lengths.assumed
    boundary = short.memory.lengths.oom_response_len
    _, _, long = planned(tmp_path / "b", "Qwen3-8B", **FIXED, expected_response_length=boundary + 64)
    assert not long.memory.lengths.typical_fits and not long.memory.fits and not long.memory.tolerated


def test_without_remove_padding_every_step_is_the_worst(tmp_path):
    """verl's FSDP actor pads every sequence to the maximum without remove-padding: the typical step is the worst."""
    flags = {**FIXED, "features": "offload,gradient_checkpointing,flash_attn"}
    setup, _, prepared = planned(tmp_path, "Qwen3-8B", **flags)
    assert setup.padded and not prepared.memory.fits and not prepared.memory.tolerated
    assert prepared.memory.lengths.typical_peak_gb == prepared.memory.lengths.worst_peak_gb


def test_explain_memory_names_each_phases_pool(tmp_path):
    """plan --explain-memory on a split mode: every phase says its pool, the JSON has the pools and the lengths."""
    import json
    import subprocess
    import sys

    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    shutil.copy(FIXTURES / "Qwen3-8B.config.json", folder / "config.json")
    args = ["plan", "--explain-memory", "--model-path", str(folder), "--mode", "separate-async", "--framework", "fsdp",
            "--devices", "8", "--trainer-gpus", "4", "--rollout-gpus", "4", "--verl-version", "0.9.1"]
    text = subprocess.run([sys.executable, "-m", "verl_deploy", *args], capture_output=True, text=True, timeout=120)
    assert "rollout [rollout pool]:" in text.stdout and "actor_update [trainer pool]:" in text.stdout, text.stderr
    doc = json.loads(subprocess.run([sys.executable, "-m", "verl_deploy", *args, "--json"], capture_output=True,
                                    text=True, timeout=120).stdout)
    estimate = doc["memory_terms"]["estimate"]
    assert set(estimate["pools"]) == {"trainer", "rollout"} and estimate["lengths"]["max_response_len"] == 8192
    assert {p["phase"]: p["pool"] for p in estimate["phases"]}["weight_sync"] == "trainer"
