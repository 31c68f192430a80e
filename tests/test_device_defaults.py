"""A default chosen for one device kind is not carried to another: each says why it is what it is."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli


def plan(*args: str) -> dict:
    return json.loads(run_cli("plan", "--json", *args).stdout)


@pytest.mark.parametrize("args, value, why, not_why", [
    (["--device", "gpu", "--framework", "fsdp", "--device-name", "H100"], 0.8, "GPU + vLLM", "vllm-ascend"),
    (["--device", "gpu", "--framework", "fsdp", "--rollout-engine", "sglang"], 0.6, "GPU + SGLang", "vllm-ascend"),
    ([], 0.6, "vllm-ascend", "GPU"),
])
def test_rollout_memory_share_is_chosen_per_device_kind_and_engine(args, value, why, not_why):
    data = plan(*args)
    sent = [o for o in data["overrides"] if "rollout.gpu_memory_utilization=" in str(o)]
    assert sent and str(value) in str(sent[0]), sent
    source = data["sources"]["gpu_memory_utilization"]
    assert source.startswith("default (") and why in source and not_why not in source
    differs = " ".join(f["message"] for f in data["findings"] if f["field"] == "mode")
    assert ("vllm-ascend" in differs) == (not_why == "GPU")  # the NPU reason is given only on NPU


def test_a_given_share_wins_and_says_where_it_came_from():
    data = plan("--device", "gpu", "--framework", "fsdp", "--gpu-memory-utilization", "0.7")
    assert data["spec"]["gpu_memory_utilization"] == 0.7
    assert data["sources"]["gpu_memory_utilization"] == "flag --gpu-memory-utilization"
