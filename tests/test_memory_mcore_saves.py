"""What Megatron keeps for backward in a layer, against megatron-core's own code: the MoE token permutation
(moe_utils.permute / unpermute, run here on CPU: a top-k copy keeps no expert output once the routing probs are
applied in the experts), the modules selective recompute accepts (TransformerConfig), verl's default
recompute_modules (its generated config), and the estimate's per-module drops for them. Setups come from the real
pipeline (flags -> plan -> the overrides verl gets)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import yaml

import realverl
from test_memory_sources import planned
from test_runtime_rules import mcore_site
from verl_deploy.memory import terms
from verl_deploy.profiles.memory_keys import default_for

A = "actor_rollout_ref."
TC = f"{A}actor.megatron.override_transformer_config."
EP8 = f"{A}actor.megatron.expert_model_parallel_size=8"

PROBE = textwrap.dedent("""
    import json, torch
    from megatron.core.transformer.moe.moe_utils import permute, unpermute
    from megatron.core.transformer.transformer_config import TransformerConfig

    T, h, E, k = 64, 32, 8, 2
    tokens = torch.randn(T, h, requires_grad=True)
    scores = torch.randn(T, E)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter(1, scores.topk(k, dim=-1).indices, True)
    probs = torch.softmax(scores, -1).masked_fill(~routing_map, 0).requires_grad_()
    saved = []

    def pack(t):
        saved.append(t.numel() if t.dtype.is_floating_point else 0)
        return t

    def floats_saved(fn):
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return sum(saved)

    out = {}
    result = {}
    out["permute"] = floats_saved(lambda: result.update(p=permute(tokens, routing_map)))
    permuted, _, indices = result["p"]
    expert_output = permuted * 2
    shape = tokens.shape
    out["unpermute"] = floats_saved(lambda: unpermute(expert_output, indices, restore_shape=shape,
                                                      routing_map=routing_map))
    out["unpermute_with_probs"] = floats_saved(lambda: unpermute(expert_output, indices, restore_shape=shape,
                                                                 probs=probs, routing_map=routing_map))
    out["copy"] = k * T * h
    try:
        TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, recompute_granularity="selective",
                          recompute_modules=["no_such_module"])
        out["refusal"] = ""
    except (AssertionError, ValueError) as error:
        out["refusal"] = str(error)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def mcore() -> dict:
    site = mcore_site()
    if site is None:
        pytest.skip("megatron-core 0.13.1 cannot be installed here (no package index)")
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.realverl
def test_a_routed_copy_keeps_its_input_but_not_its_expert_output(mcore):
    """megatron-core's permute saves only indices and the all-to-all combine's unpermute (no probs: the experts
    multiply them into the activation) saves no tokens; only unpermute with probs would keep the expert output."""
    assert mcore["permute"] == 0
    assert mcore["unpermute"] == 0
    assert mcore["unpermute_with_probs"] >= mcore["copy"]


@pytest.mark.realverl
def test_the_estimate_knows_every_module_megatron_accepts(mcore):
    allowed = set(re.findall(r"'(\w+)'", mcore["refusal"].split("Allowed modules are:")[-1]))
    assert {"core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj"} <= allowed
    assert allowed <= set(terms.SELECTIVE_DROPS)


@pytest.mark.realverl
def test_verls_default_recompute_modules_is_the_estimates():
    site = realverl.verl_site("0.9.1")
    if site is None:
        pytest.skip(realverl.why_not("0.9.1"))
    config = yaml.safe_load((site / "verl" / "trainer" / "config" / "_generated_ppo_megatron_trainer.yaml").read_text())
    found = config["actor_rollout_ref"]["actor"]["megatron"]["override_transformer_config"]["recompute_modules"]
    assert found == default_for("recompute_modules") == ["core_attn"]


def moe_setup(tmp_path, *overrides: str):
    return planned(tmp_path, "Qwen3-30B-A3B", framework="megatron", device="gpu", devices="0-7", train_tp=1,
                   gen_tp=4, allow_tp_mismatch=True, overrides=[EP8, *overrides])


def selective(*modules: str) -> list[str]:
    return [f"+{TC}recompute_granularity=selective", f"{TC}recompute_modules=[{','.join(modules)}]"]


def test_moe_layer_saves_and_what_each_selective_module_drops(tmp_path):
    """Qwen3-30B-A3B (h 2048, q 4096, kv 512, top-8 of 128 experts at 768): the parts one token keeps in a layer,
    and what recompute_modules takes off (transformer_layer.py:379-447, moe_layer.py:432, experts.py:737)."""
    h, q, kv, k, mi, experts = 2048, 4096, 512, 8, 768, 128
    attention = 4 * h + (2 * q + 4 * kv) + 2 * q
    norm, routed_in, fc1, act, router = 4 * h, k * 2 * h, k * 4 * mi, k * 2 * mi, 8 * experts
    whole = attention + norm + routed_in + fc1 + act + router
    s, m, _ = moe_setup(tmp_path / "none")
    assert (s.recompute, s.recompute_modules) == (None, ("core_attn",))
    assert terms.megatron_layer_bytes(m, s) == whole
    cases = {("core_attn",): whole, ("moe",): attention + norm, ("moe_act",): whole - act,
             ("layernorm",): whole - 2 * h, ("mlp",): whole,  # every layer is MoE: mlp recomputes nothing
             ("core_attn", "moe_act", "layernorm", "mlp", "moe"): attention + 2 * h}
    for modules, kept in cases.items():
        r, _, _ = moe_setup(tmp_path / "_".join(modules), *selective(*modules))
        assert (r.recompute, r.recompute_modules) == ("selective", modules)
        assert terms.megatron_layer_bytes(m, r) == kept, modules
        rebuilt = whole - kept
        assert terms.megatron_layer_peak_dropped(m, r) == rebuilt
        act_term = terms.activations(m, r, 4096)
        assert act_term.bytes == 4096 * (48 * kept + rebuilt)
        assert "recompute_modules" in act_term.source


def test_dense_layer_selective_modules(tmp_path):
    """Qwen3-8B under TE: the norms are fused into LayerNormLinear (gpt_layer_specs.py: input_layernorm and
    pre_mlp_layernorm IdentityOp), so layernorm drops nothing; mlp keeps only the MLP's input."""
    h, q, kv, f = 4096, 4096, 1024, 12288
    attention = 4 * h + (2 * q + 4 * kv) + 2 * q
    mlp = 4 * h + 6 * f
    base = dict(framework="megatron", device="gpu", devices="0-7", train_tp=2, gen_tp=2)
    s, m, _ = planned(tmp_path / "l", "Qwen3-8B", **base, overrides=selective("core_attn", "layernorm"))
    assert terms.megatron_layer_bytes(m, s) == (attention + mlp) // 2
    s, m, _ = planned(tmp_path / "m", "Qwen3-8B", **base, overrides=selective("mlp"))
    assert terms.megatron_layer_bytes(m, s) == (attention + 2 * h) // 2
    # the no-grad forward (log-prob) holds whole layers whatever the recompute
    assert terms.forward_activations(m, s, 1000).bytes == 1000 * 2 * (attention + mlp) / 2
