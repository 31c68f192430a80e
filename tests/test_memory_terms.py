"""Each memory term against a hand computation, for a dense (Qwen3-8B) and an MoE (Qwen3-30B-A3B)
model, on FSDP and Megatron. The setups come from the real pipeline (flags -> spec -> compiled
plan -> the overrides verl would get), so a key the estimate misreads fails here too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verl_deploy.memory import estimate_plan, terms
from verl_deploy.memory.model import load_shape
from verl_deploy.memory.setup import setup_from_plan
from verl_deploy.pipeline import prepare_spec
from verl_deploy.sources import resolve

FIXTURES = Path(__file__).parent / "fixtures" / "memory"
A = "actor_rollout_ref."
# Hand counts from config.json (see each test): embeddings + layers x (attention + 2 norms + MLP) + final norm
QWEN3_8B = 151936 * 4096 * 2 + 36 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 2 * 4096 + 3 * 4096 * 12288) + 4096
MOE_DENSE = 151936 * 2048 * 2 + 48 * (2048 * 4096 * 2 + 2 * 2048 * 512 + 2 * 2048 + 2048 * 128) + 2048
MOE_EXPERTS = 48 * 128 * 3 * 2048 * 768


def model(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / f"{name}.config.json", folder / "config.json")
    return str(folder)


def setup_and_shape(tmp_path, name, **flags):
    spec = resolve(flags={"model_path": model(tmp_path, name), **flags}, environ={}, detected={})
    prepared = prepare_spec(spec, check_verl=False)
    shape, _ = load_shape(spec.model_path)
    return setup_from_plan(prepared.plan), shape, prepared


def test_parameter_counts_match_the_published_sizes(tmp_path):
    dense, _ = load_shape(model(tmp_path, "Qwen3-8B"))
    moe, _ = load_shape(model(tmp_path, "Qwen3-30B-A3B"))
    assert dense.params() == QWEN3_8B == 8_190_726_144  # "8.2B"
    assert moe.dense_params() == MOE_DENSE and moe.expert_params() == MOE_EXPERTS
    assert round(moe.params() / 1e9, 1) == 30.5 and 3.3e9 < moe.active_params() < 3.4e9  # "30B-A3B"


def test_fsdp_dense_terms(tmp_path):
    s, m, prepared = setup_and_shape(tmp_path, "Qwen3-8B", framework="fsdp", device="gpu", devices="0-7", gen_tp=2,
                                     allow_tp_mismatch=True, max_prompt_length=1024, max_response_length=3072,
                              batch_size=64, n_resp_per_prompt=8,
                              overrides=[f"{A}actor.use_kl_loss=True", f"{A}actor.ppo_max_token_len_per_gpu=8192"])
    assert (s.fsdp_shards, s.ref_loaded, s.dynamic_bsz, s.max_token_len) == (8, True, True, 8192)
    assert terms.actor_params(m, s).bytes == QWEN3_8B * 4 / 8  # fp32 params sharded over 8
    assert terms.gradients(m, s).bytes == QWEN3_8B * 4 / 8
    assert terms.optimizer_states(m, s).bytes == QWEN3_8B * 8 / 8  # Adam m, v
    assert terms.ref_params(m, s).bytes == QWEN3_8B * 2 / 8  # bf16 reference
    assert terms.kv_per_token(m, s).bytes == 36 * 8 * 128 * 2 * 2 / 2  # layers x KV heads x head dim x 2 B x K,V / TP
    assert terms.rollout_weights(m, s).bytes == QWEN3_8B * 2 / 2
    tokens, _ = terms.tokens_per_device(s, log_prob=False)
    assert tokens == 8192
    per_layer = 2 * (5 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 12288)
    assert terms.activations(m, s, tokens).bytes == 8192 * (36 * 2 * 4096 + per_layer)  # gradient checkpointing on
    assert terms.logits(m, s, tokens, training=True, entropy=False).bytes == 8192 * 151936 * 4
    assert terms.logits(m, s, tokens, training=False, entropy=True).bytes == 8192 * 151936 * (2 + 6)
    phases = prepared.memory.phases
    assert phases["ref_log_prob"]["ref_params"].bytes == QWEN3_8B * 2 / 8 and "ref_params" in phases["actor_update"]
    layer = (QWEN3_8B - 151936 * 4096 * 2) / 36  # FSDP gathers two layers and the lm_head in bf16
    assert terms.fsdp_unsharded(m, s, training=True).bytes == pytest.approx((2 * layer + 151936 * 4096) * 2 + layer * 2)


def test_fsdp_without_checkpointing_and_with_entropy_chunking(tmp_path):
    s, m, _ = setup_and_shape(tmp_path, "Qwen3-8B", framework="fsdp", device="npu", devices="0-7", gen_tp=2,
                              allow_tp_mismatch=True, max_prompt_length=1024, max_response_length=1024,
                              features="-gradient_checkpointing",
                              overrides=[f"{A}actor.entropy_from_logits_with_chunking=True",
                                         f"{A}actor.ulysses_sequence_parallel_size=2"])
    assert (s.gradient_checkpointing, s.entropy_chunking, s.sp, s.ref_loaded) == (False, True, 2, False)
    per_layer = 2 * (5 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 12288)
    assert terms.activations(m, s, 2048).bytes == 2048 * 36 * per_layer
    assert terms.logits(m, s, 4096, training=False, entropy=True).bytes == 4096 * 151936 * 2 + 2048 * 151936 * 6
    assert terms.ref_params(m, s).bytes == 0  # use_kl_loss off: verl builds no reference model


def test_megatron_dense_terms_and_recompute(tmp_path):
    s, m, _ = setup_and_shape(tmp_path, "Qwen3-8B", framework="megatron", devices="0-7", train_tp=4, train_pp=2,
                              max_prompt_length=2048, max_response_length=8192)
    assert (s.tp, s.pp, s.dp, s.distributed_optimizer) == (4, 2, 1, True)
    assert terms.actor_params(m, s).bytes == QWEN3_8B * 2 / 8
    assert terms.gradients(m, s).bytes == QWEN3_8B * 4 / 8
    assert terms.optimizer_states(m, s).bytes == QWEN3_8B * 12 / 8  # DP 1: nothing to shard over
    # what one token keeps per layer and rank: 2 norms x (input + norm out) 8h, flash-attn q, k, v + out 4q + 4kv,
    # fc1 (gate, up) 4f + SwiGLU out 2f; all sequence-parallel over TP 4
    per_layer = (8 * 4096 + 4 * 4096 + 4 * 1024 + 6 * 12288) // 4
    assert terms.megatron_layer_bytes(m, s) == per_layer == 31744
    # no recompute: 18 layers per stage, 2 micro-batches in flight (PP 2)
    assert terms.activations(m, s, 10240).bytes == 10240 * 18 * per_layer * 2
    r, _, _ = setup_and_shape(tmp_path / "r", "Qwen3-8B", framework="megatron", devices="0-7", train_tp=4, train_pp=2,
                              features="recompute")  # the feature: full, block, 8 layers
    assert (r.recompute, r.recompute_method, r.recompute_layers) == ("full", "block", 8)
    stored = 10240 * (8 * 2 * 4096 / 4 + 10 * per_layer)  # block: 8 layers keep their input shard, 10 everything
    assert terms.activations(m, r, 10240).bytes == stored * 2 + 10240 * per_layer
    u = r.with_(recompute_method="uniform", recompute_layers=1)  # uniform, 1 layer per chunk: inputs only
    assert terms.activations(m, u, 10240).bytes == 10240 * 18 * 2 * 4096 / 4 * 2 + 10240 * per_layer
    assert terms.logits(m, s, 10240, training=True, entropy=False).bytes == 10240 * 151936 / 4 * 12


def test_megatron_moe_terms_with_expert_parallel(tmp_path):
    s, m, _ = setup_and_shape(tmp_path, "Qwen3-30B-A3B", framework="megatron", devices="0-15", train_tp=4,
                              train_pp=1, gen_tp=4, max_prompt_length=2048, max_response_length=8192,
                              overrides=[f"{A}actor.megatron.expert_model_parallel_size=4"])
    assert (s.ep, s.etp, s.dp) == (4, 4, 4)
    rank = MOE_DENSE / 4 + MOE_EXPERTS / (4 * 4)
    assert terms.actor_params(m, s).bytes == rank * 2
    # distributed optimizer: dense over DP x CP = 16 / (TP 4 x PP 1) = 4, experts over the expert-DP group
    # 16 / (EP 4 x ETP 4 x PP 1) = 1 (megatron-core's expert_data_parallel_group)
    assert terms.optimizer_states(m, s).bytes == pytest.approx((MOE_DENSE / 4 / 4 + MOE_EXPERTS / 16 / 1) * 12)
    assert terms.kv_per_token(m, s).bytes == 48 * 4 * 128 * 2 * 2 / 4
    moe_layer = 2 * (5 * 2048 + 2 * 4096 + 2 * 512 + 4 * 8 * 768 + 2 * 8 * 2048)  # top-8 experts + token permutation
    assert terms.layer_activation_bytes(m) == moe_layer  # the HF model FSDP trains
    # Megatron: each of the 8 copies of a token keeps its permuted input (fc1's input, 2h; not its expert output: the
    # experts apply the routing probs, experts.py:628-745, and unpermute needs no tokens), all-gathered over ETP 4
    # after the all-to-all (token_dispatcher.py:696), fc1 + SwiGLU at moe_intermediate (6 x 768 over ETP x ETP);
    # the router's fp32 logits and probs (8 x 128); the rest as a dense layer; all / TP 4
    routed = 8 * (4 * 2 * 2048 + 6 * 768)
    assert terms.megatron_layer_bytes(m, s) == (4 * 2048 + 4 * 4096 + 4 * 512 + 4 * 2048 + routed + 8 * 128) // 4


def test_fsdp_moe_terms_and_rollout_expert_parallel(tmp_path):
    s, m, _ = setup_and_shape(tmp_path, "Qwen3-30B-A3B", framework="fsdp", devices="0-15", nnodes=2, gen_tp=2,
                              allow_tp_mismatch=True,
                              overrides=[f"{A}rollout.expert_parallel_size=8", f"{A}actor.fsdp_config.fsdp_size=16"])
    assert (s.world, s.fsdp_shards, s.rollout_ep) == (32, 16, 8)
    assert terms.actor_params(m, s).bytes == (MOE_DENSE + MOE_EXPERTS) * 4 / 16
    assert terms.rollout_weights(m, s).bytes == MOE_DENSE * 2 / 2 + MOE_EXPERTS * 2 / 8


def test_offload_moves_the_rollout_peak_but_not_the_update(tmp_path):
    base = dict(framework="fsdp", device="npu", devices="0-7", gen_tp=2, allow_tp_mismatch=True)
    _, _, plain = setup_and_shape(tmp_path / "a", "Qwen3-8B", **base)
    _, _, off = setup_and_shape(tmp_path / "b", "Qwen3-8B", features="offload", **base)
    p, o = plain.memory, off.memory
    resident = (QWEN3_8B * 4 / 8 + QWEN3_8B * 8 / 8) / terms.GIB  # fp32 params + Adam stay on the device
    assert p.phase_gb("rollout") - o.phase_gb("rollout") == pytest.approx(resident)
    assert p.phase_gb("actor_update") == pytest.approx(o.phase_gb("actor_update"))  # verl loads them back
    assert o.host_gb_per_node > p.host_gb_per_node


def test_a_plan_that_cannot_fit_names_what_would(tmp_path):
    _, _, prepared = setup_and_shape(tmp_path, "Qwen3-8B", framework="megatron", devices="0-7", train_tp=4,
                                     train_pp=2, device_memory_gb=32)
    memory = prepared.memory
    assert not memory.fits and "rollout" in memory.over()
    assert memory.needs and memory.needs[0] == "offload"
    warning = [f for f in prepared.findings if f.field == "memory"]
    assert warning and "will not fit" in warning[0].message and "offload" in warning[0].fix


def test_free_cache_engine_off_keeps_the_engine_share_during_training(tmp_path):
    base = dict(framework="fsdp", device="gpu", devices="0-7", gen_tp=2, allow_tp_mismatch=True)
    _, _, asleep = setup_and_shape(tmp_path / "a", "Qwen3-8B", **base)
    _, _, awake = setup_and_shape(tmp_path / "b", "Qwen3-8B", **base,
                                  overrides=[f"{A}rollout.free_cache_engine=False"])
    share = asleep.spec.gpu_memory_utilization * asleep.memory.device.usable_gb  # GPU + vLLM default: 0.8
    overhead = terms.engine_overhead(setup_from_plan(asleep.plan)).gb
    for phase in ("log_prob", "actor_update"):
        assert awake.memory.phase_gb(phase) - asleep.memory.phase_gb(phase) == pytest.approx(share - overhead)
    assert "rollout_weights" not in awake.memory.phases["weight_sync"]  # inside the share, not twice


def test_a_calibration_lesson_requires_everything_that_was_on_plus_the_fix(tmp_path):
    from verl_deploy.memory import calibration

    _, _, prepared = setup_and_shape(tmp_path, "Qwen3-8B", framework="megatron", devices="0-7", train_tp=4,
                                     train_pp=2)
    log = tmp_path / "calibration.jsonl"
    layout = prepared.memory.layout
    identity = load_shape(prepared.spec.model_path)[0].identity
    calibration.append(calibration.Entry(identity, layout, 64.0, "actor_update", ("offload",), "recompute"), log)
    estimate, _ = estimate_plan(prepared.plan, calibration_file=log)
    assert not estimate.fits and estimate.needs[:2] == ["offload", "recompute"]
    assert "OOM in actor_update with offload" in estimate.observed["actor_update"]
    elsewhere, _ = estimate_plan(prepared.plan, calibration_file=tmp_path / "missing.jsonl")
    assert elsewhere.fits  # no log, no lesson


@pytest.mark.parametrize("content", ["{not json", '{"hidden_size": "big"}', "[1, 2]", '{"hidden_size": 0}'])
def test_a_damaged_config_json_falls_back_on_the_name_or_says_why(tmp_path, content):
    known = tmp_path / "Qwen3-8B-Instruct"
    unknown = tmp_path / "my-model"
    for folder in (known, unknown):
        folder.mkdir()
        (folder / "config.json").write_text(content)
    shape, how = load_shape(str(known))
    assert shape is not None and shape.params() == QWEN3_8B and "could not be used" in how
    spec = resolve(flags={"model_path": str(unknown)}, environ={}, detected={})
    prepared = prepare_spec(spec, check_verl=False)
    assert prepared.memory is None and "could not be used" in prepared.memory_note
    note = [f for f in prepared.findings if f.field == "memory"]
    assert note and note[0].level == "info"


def test_host_memory_per_node_counts_what_offload_moves_there(tmp_path):
    base = dict(framework="megatron", devices="0-7", train_tp=4, train_pp=2, features="offload")
    _, _, roomy = setup_and_shape(tmp_path / "a", "Qwen3-8B", host_memory_gb=1024, **base)
    _, _, tight = setup_and_shape(tmp_path / "b", "Qwen3-8B", host_memory_gb=64, **base)
    s = setup_from_plan(tight.plan)
    shard = QWEN3_8B / 8  # parameters on one TP4 x PP2 rank
    per_device = 4 * terms.GIB + shard * 2 + shard * 12 + shard * 4 + QWEN3_8B * 2 / 4  # base, params, Adam,
    assert tight.memory.host_gb_per_node == pytest.approx(8 * per_device / terms.GIB)  # grads, asleep weights (NPU)
    assert roomy.memory.host_fits is True and tight.memory.host_fits is False
    assert any(f.field == "memory" and "host memory" in f.message for f in tight.findings)
    assert s.param_offload and s.grad_offload and s.optimizer_offload


def test_one_step_off_keeps_the_engine_off_the_trainer_devices(tmp_path):
    _, _, prepared = setup_and_shape(tmp_path, "Qwen3-8B", mode="one-step-off", framework="fsdp", device="gpu",
                                     trainer_gpus=4, rollout_gpus=4, gen_tp=2, allow_tp_mismatch=True)
    estimate = prepared.memory
    phases = estimate.phases
    # the rollout pool holds the engine and the bucket of weights it receives, never the trainer's state
    assert set(phases["rollout"]) == {"engine_budget", "engine_overhead", "device_context", "sync_bucket"}
    assert estimate.pool("rollout") == "rollout" and estimate.pool("actor_update") == "trainer"
    # the trainer pool sends its weights a bucket at a time and never holds the engine
    assert "sync_bucket" in phases["weight_sync"] and estimate.pool("weight_sync") == "trainer"
    assert not any(name.startswith(("rollout_engine", "rollout_weights")) for p in phases if estimate.pool(p) == "trainer"
                   for name in phases[p])
    assert estimate.pools()["trainer"]["devices_per_node"] == 4 and estimate.pools()["rollout"]["devices_per_node"] == 4
    shape, _ = load_shape(prepared.spec.model_path)
    assert terms.actor_params(shape, setup_from_plan(prepared.plan)).bytes == QWEN3_8B * 4 / 4  # 4 trainer devices


def test_knob_changes_alone_are_offered_beside_the_features(tmp_path):
    # FSDP on 8 x 64 GiB NPUs with gpu_memory_utilization 0.9 and nothing offloaded: the rollout share plus
    # the resident fp32 params and Adam do not fit; offload fixes it, and so does a lower utilization
    _, _, prepared = setup_and_shape(tmp_path, "Qwen3-8B", framework="fsdp", devices="0-7", gen_tp=2,
                                     allow_tp_mismatch=True, gpu_memory_utilization=0.9)
    memory = prepared.memory
    assert memory.over() == ["rollout"] and memory.needs == ["offload"]
    assert len(memory.alternatives) == 1 and memory.alternatives[0].startswith("gpu_memory_utilization=")
    lowered = float(memory.alternatives[0].split("=")[1])
    assert 0.3 <= lowered < 0.9
    _, _, retry = setup_and_shape(tmp_path / "b", "Qwen3-8B", framework="fsdp", devices="0-7", gen_tp=2,
                                  allow_tp_mismatch=True, gpu_memory_utilization=lowered)
    assert retry.memory.fits


def test_any_valid_spec_gets_a_finite_estimate_and_more_memory_never_hurts(tmp_path):
    """Property: for layouts, features, lengths and devices a user can give, the estimate is finite,
    non-negative, and a device with more memory never turns `fits` from true to false."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    folders = {name: model(tmp_path, name) for name in ("Qwen3-8B", "Qwen3-30B-A3B")}

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(name=st.sampled_from(sorted(folders)), framework=st.sampled_from(["megatron", "fsdp"]),
           device=st.sampled_from(["npu", "gpu"]), layout=st.sampled_from([(1, 1), (2, 1), (4, 2), (8, 1), (2, 4)]),
           mode=st.sampled_from(["dapo", "one-step-off"]), features=st.sets(st.sampled_from(
               ["offload", "recompute", "gradient_checkpointing", "dynamic_batch", "remove_padding"])),
           prompt=st.integers(16, 32768), response=st.integers(16, 65536), gmu=st.floats(0.1, 0.95),
           memory_gb=st.floats(8, 200))
    def check(name, framework, device, layout, mode, features, prompt, response, gmu, memory_gb):
        usable = [f for f in features if not (f == "recompute" and framework == "fsdp")
                  and not (f == "gradient_checkpointing" and framework == "megatron")]
        flags = {"model_path": folders[name], "framework": framework, "device": device, "mode": mode,
                 "train_tp": layout[0], "train_pp": layout[1], "max_prompt_length": prompt,
                 "max_response_length": response, "gpu_memory_utilization": gmu, "device_memory_gb": memory_gb,
                 "features": ",".join(usable) or None, "no_default_features": True}
        if mode == "one-step-off":
            flags.update(trainer_gpus=8, rollout_gpus=8, devices="0-15")
        small = prepare_spec(resolve(flags=flags, environ={}, detected={}), check_verl=False).memory
        big = prepare_spec(resolve(flags={**flags, "device_memory_gb": memory_gb * 2}, environ={}, detected={}),
                           check_verl=False).memory
        for estimate in (small, big):
            assert estimate is not None
            for phase in estimate.phases:
                gb = estimate.phase_gb(phase)
                assert gb == gb and 0 <= gb < 1e7
            assert estimate.host_gb_per_node > 0
        assert not (small.fits and not big.fits)

    check()


@pytest.mark.parametrize("name", ["Qwen3-8B", "Qwen3-30B-A3B", "Qwen2.5-7B", "Qwen3-32B"])
def test_parameter_count_matches_the_real_model_definition(name):
    """The count against Hugging Face's own model classes, built on the meta device (no weights)."""
    torch = pytest.importorskip("torch", reason="needs torch (CPU) to build the model on the meta device")
    transformers = pytest.importorskip("transformers", reason="needs transformers for the model definitions "
                                                              "(in the test extras: install '.[test]')")
    from verl_deploy.memory.model import shape_from_config

    data = json.loads((FIXTURES / f"{name}.config.json").read_text())
    config = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                                  if k not in ("architectures", "transformers_version")})
    with torch.device("meta"):
        real = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    # ours leaves out the per-head q/k norms (Qwen3) and the q/k/v biases (Qwen2): < 0.01 %
    assert shape_from_config(data).params() == pytest.approx(real, rel=1e-4)


def test_typical_and_worst_case_and_the_response_length_where_it_stops_fitting(tmp_path):
    """Fixed micro-batches (2 sequences): the worst step has every response at the maximum, the typical one a typical
    response beside the step's longest; the estimate also says where (by response length) the run starts to run out
    of memory, and that boundary is exact to the token."""
    from dataclasses import replace

    from verl_deploy.memory.device_memory import device_memory
    from verl_deploy.memory.estimate import build

    setup, shape, prepared = setup_and_shape(tmp_path, "Qwen3-8B", max_response_length=12288,
                                             features=["-dynamic_batch"],
                                             overrides=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"])
    lengths = prepared.memory.lengths
    assert lengths is not None and not lengths.budget_bound and setup.micro_batch == 2
    assert lengths.worst_fits is False and lengths.typical_fits is True
    assert lengths.typical_peak_gb < lengths.worst_peak_gb
    boundary = lengths.oom_response_len
    assert lengths.typical_response_len < boundary <= 12288
    device = device_memory(prepared.spec.device, prepared.spec.device_memory_gb, "spec", prepared.spec.device_name)
    prompt = lengths.typical_prompt_len  # the boundary is found with the prompts at their typical length
    assert prompt == setup.prompt_len // 2
    assert build(shape, replace(setup, prompt_len=prompt, response_len=boundary - 1), device, None).fits
    assert not build(shape, replace(setup, prompt_len=prompt, response_len=boundary), device, None).fits
    dynamic = setup_and_shape(tmp_path / "dyn", "Qwen3-8B", max_response_length=20480)[2].memory.lengths
    assert dynamic.budget_bound and dynamic.typical_peak_gb == dynamic.worst_peak_gb


def test_megatron_moe_optimizer_shards_experts_over_expert_data_parallel(tmp_path):
    """megatron-core's distributed optimizer: dense params over DP x CP (world / (TP x PP)), expert params over the
    expert-data-parallel group (world / (EP x ETP x PP)); with EP 8 on 8 devices each expert shard has no DP peer."""
    from dataclasses import replace

    from verl_deploy.memory import terms

    setup, shape, _ = setup_and_shape(tmp_path, "Qwen3-30B-A3B", framework="megatron", devices="0-7", train_tp=4,
                                      train_pp=1, allow_tp_mismatch=True)
    moe = replace(setup, ep=8, etp=1, cp=1, distributed_optimizer=True, optimizer_offload_fraction=0.0)
    dense_dp, expert_dp = moe.world // (moe.tp * moe.pp), moe.world // (moe.ep * moe.etp * moe.pp)
    assert (dense_dp, expert_dp) == (2, 1)
    expected = (shape.dense_params() / 4 / dense_dp + shape.expert_params() / 8 / expert_dp) * 12
    assert terms.optimizer_states(shape, moe).bytes == pytest.approx(expected)
    # context parallel is inside the dense optimizer's group: CP 2 does not halve the shards again
    with_cp = replace(moe, cp=2)
    assert terms.optimizer_states(shape, with_cp).bytes == pytest.approx(expected)
    assert "expert-DP 1" in terms.optimizer_states(shape, moe).formula


def test_the_update_counts_the_larger_of_the_logits_and_the_rebuilt_layer_not_both(tmp_path):
    """The backward uses the logits and their gradient, then frees them, then rebuilds the last checkpointed
    layer: the update's peak is the saved activations plus the larger of the two (H39: ~6 GiB too many)."""
    s, m, prepared = setup_and_shape(tmp_path, "Qwen3-8B", framework="fsdp", device="gpu", devices="0-7", gen_tp=2,
                                     allow_tp_mismatch=True, max_prompt_length=1024, max_response_length=3072,
                                     batch_size=64, n_resp_per_prompt=8,
                                     overrides=[f"{A}actor.ppo_max_token_len_per_gpu=8192"])
    update = prepared.memory.phases["actor_update"]
    tokens = 8192
    rebuilt = tokens * 2 * (5 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 12288)  # one layer, gradient checkpointing on
    logits_bytes = tokens * 151936 * 4  # bf16 logits + their gradient: the larger here
    assert terms.recompute_working(m, s, tokens) == rebuilt
    assert update["activations"].bytes == tokens * 36 * 2 * 4096 + rebuilt
    assert update["logits"].bytes == logits_bytes - rebuilt
    assert update["activations"].bytes + update["logits"].bytes == tokens * 36 * 2 * 4096 + max(rebuilt, logits_bytes)
    assert "freed before the backward rebuilds" in update["logits"].formula
    # nothing rebuilt (Megatron without recompute): the logits count whole
    mc, _m, prepared = setup_and_shape(tmp_path / "mc", "Qwen3-8B", framework="megatron", device="gpu",
                                       devices="0-7", max_prompt_length=1024, max_response_length=3072,
                                       batch_size=64, n_resp_per_prompt=8)
    assert mc.recompute is None and terms.recompute_working(m, mc, tokens) == 0
    mt = terms.tokens_per_device(mc, log_prob=False)[0]
    assert prepared.memory.phases["actor_update"]["logits"].bytes == \
        terms.logits(m, mc, mt, training=True, entropy=mc.entropy_in_update).bytes


def test_autograd_frees_the_logits_before_it_reruns_a_checkpointed_layer():
    """The order the term above rests on, with real torch: a checkpointed layer, an lm_head and a log-prob; the
    layer runs again only after the head's backward has used (and released) the logits' gradient."""
    torch = pytest.importorskip("torch", reason="the order is torch's; install the test extra")
    from torch.utils.checkpoint import checkpoint

    events: list[str] = []
    layer, head = torch.nn.Linear(8, 8), torch.nn.Linear(8, 50)

    def block(x):
        events.append("layer runs")
        return torch.relu(layer(x))

    head.register_full_backward_hook(lambda *_: events.append("lm_head backward done"))  # wraps the next forward
    hidden = checkpoint(block, torch.randn(4, 8, requires_grad=True), use_reentrant=False)
    logits = head(hidden)
    logits.register_hook(lambda grad: events.append("logits' gradient made"))
    torch.log_softmax(logits, -1)[:, 0].sum().backward()
    assert events == ["layer runs", "logits' gradient made", "lm_head backward done", "layer runs"]


def test_fsdp1_keeps_the_untied_input_embeddings_gathered_fsdp2_does_not(tmp_path):
    """verl's FSDP1 wraps decoder layers only, so embeddings and lm_head are the root unit, which torch's FSDP1 never
    frees after the forward; FSDP2 (what verl-deploy sends) wraps them apart. A tied model has one matrix either way."""
    flags = dict(framework="fsdp", device="gpu", devices="0-7")
    fsdp2, m, _ = setup_and_shape(tmp_path / "2", "Qwen3-8B", **flags)
    fsdp1, _m, prepared = setup_and_shape(tmp_path / "1", "Qwen3-8B", **flags,
                                          overrides=[f"{A}actor.strategy=fsdp"])
    assert (fsdp2.fsdp_strategy, fsdp1.fsdp_strategy, m.tied_embeddings) == ("fsdp2", "fsdp", False)
    matrix = 151936 * 4096 * 2  # vocab x hidden x 2 B (bf16)
    def extra(shape, training):
        return terms.fsdp_unsharded(shape, fsdp1, training=training).bytes - \
            terms.fsdp_unsharded(shape, fsdp2, training=training).bytes
    assert extra(m, training=False) == matrix  # the input embeddings, gathered with the lm_head
    assert extra(m, training=True) == 2 * matrix  # and the lm_head's gradient, held to the end of the backward
    assert "FSDP1 root unit" in prepared.memory.phases["actor_update"]["unsharded"].formula
    from dataclasses import replace
    tied = replace(m, tied_embeddings=True)  # one matrix: nothing more gathered, its gradient still held
    assert extra(tied, training=False) == 0 and extra(tied, training=True) == matrix


def test_an_fsdp1_root_gradient_waits_for_the_embeddings_gradient():
    """What the term above rests on, with real torch: embeddings and lm_head as views of one flat parameter (FSDP1's
    unit). The lm_head's gradient is made right after the logits' and can be summed into the flat parameter's only
    once the embeddings' arrives, after the checkpointed layer has run again: it is held through the rerun."""
    torch = pytest.importorskip("torch", reason="the order is torch's; install the test extra")
    from torch.utils.checkpoint import checkpoint

    flat = torch.nn.Parameter(torch.randn(2 * 50 * 8))
    events: list[str] = []
    layer = torch.nn.Linear(8, 8)
    embed_w, head_w = (view.view(50, 8) for view in flat.split(400))
    flat.register_hook(lambda grad: events.append("flat gradient summed"))

    def block(x):
        events.append("layer runs")
        return torch.relu(layer(x))

    hidden = checkpoint(block, torch.nn.functional.embedding(torch.tensor([1, 2, 3]), embed_w), use_reentrant=False)
    logits = hidden @ head_w.t()
    logits.register_hook(lambda grad: events.append("logits' gradient made (the lm_head's follows)"))
    torch.log_softmax(logits, -1)[:, 0].sum().backward()
    assert events == ["layer runs", "logits' gradient made (the lm_head's follows)", "layer runs",
                      "flat gradient summed"]
