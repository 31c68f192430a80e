"""Checks catch what verl would only report after loading the model."""

import shutil

import pytest

from verl_deploy.checks import Facts, read_model_facts, run_checks
from verl_deploy.pipeline import prepare_spec
from verl_deploy.profiles import profile_for
from verl_deploy.sources import resolve

from conftest import FIXTURES


def errors(flags, facts=None):
    spec = resolve(flags=flags, environ={})
    return [f for f in run_checks(spec, profile_for(spec.verl_version), facts or Facts()) if f.level == "error"]


def test_the_built_in_example_has_no_errors():
    assert errors({}) == []


def test_layout_that_does_not_divide_is_refused_with_numbers():
    found = errors({"devices": "0-5", "train_tp": 4, "train_pp": 2})
    assert found[0].field == "train_tp" and "6 trainer devices" in found[0].message and "8" in found[0].message


def test_seed_rule_would_reject_but_real_rule_accepts_tp4_pp2_on_16():
    assert errors({"devices": "0-15", "train_tp": 4, "train_pp": 2}) == []


def test_rollout_tp_must_divide_rollout_devices_and_match_training_tp():
    assert any(f.field == "gen_tp" and "differs" in f.message for f in errors({"gen_tp": 2}))
    assert errors({"gen_tp": 2, "allow_tp_mismatch": True}) == []
    assert any("rollout TP 3" in f.message for f in errors({"gen_tp": 3, "allow_tp_mismatch": True}))


def test_one_step_off_groups_must_fit_the_devices():
    found = errors({"mode": "one-step-off", "trainer_gpus": 6, "rollout_gpus": 4})
    assert any(f.field == "trainer_gpus" and "10 devices" in f.message for f in found)


def test_duplicate_and_out_of_range_devices():
    assert any("repeat" in f.message for f in errors({"devices": "0,1,1,2"}))
    assert any("out of range" in f.message for f in errors({"devices": "0,1,2,20"}))


def test_batch_rules_from_verl():
    # a mini-batch above the batch: per release and trainer (a rule since the examiner's layouts: rules/batch.py
    # mini_batch_within_batch); 0.7.0's Megatron worker asserts, 0.9.1's V1 trainer pads and runs
    above = prepare_spec(resolve(flags={"mini_batch_size": 64}, environ={}), facts=Facts(), check_verl=False)
    assert any(f.field == "mini_batch_size" and f.level == "error" for f in above.findings)
    padded = prepare_spec(resolve(flags={"mini_batch_size": 64, "verl_version": "0.9.1", "framework": "fsdp"},
                                  environ={}), facts=Facts(), check_verl=False)
    assert not any(f.field == "mini_batch_size" and f.level == "error" for f in padded.findings)
    # without dynamic batch, batch x n must divide by the minimal batch (FSDP: all devices)
    # (a rule since #24: rules/layout.py validate_config_minimal_batch; it runs in plan, not in run_checks)
    spec = resolve(flags={"framework": "fsdp", "features": "-dynamic_batch", "batch_size": 3, "n_resp_per_prompt": 1,
                          "mini_batch_size": 3, "verl_version": "0.9.1"}, environ={})
    found = [f for f in prepare_spec(spec, facts=Facts(), check_verl=False).findings if f.level == "error"]
    assert any(f.field == "batch_size" and "minimal batch 8" in f.message for f in found)
    # a generation batch below the train batch runs in verl (DAPO keeps generating, #24); only a cap that cannot
    # fill one step is an error
    assert not any(f.field == "gen_batch_size" for f in errors({"gen_batch_size": 8}))
    assert any(f.field == "gen_batch_size" for f in errors({"gen_batch_size": 8, "max_num_gen_batches": 3}))


def test_overlong_buffer_must_be_shorter_than_the_response():
    assert any(f.field == "overlong_buffer_len" for f in errors({"max_response_length": 1024,
                                                                  "overlong_buffer_len": 2048}))
    # verl asserts max_resp_len >= overlong_buffer.len: the whole length runs (verl-recipe's 4k NPU script), warned
    same = {"max_response_length": 4096, "overlong_buffer_len": 4096}
    assert not any(f.field == "overlong_buffer_len" for f in errors(same))
    spec = resolve(flags=same, environ={})
    warned = [f for f in prepare_spec(spec, facts=Facts(), check_verl=False).findings if f.field == "overlong_buffer_len"]
    assert [f.level for f in warned] == ["warning"] and "every response is penalised" in warned[0].message


def test_vpp_needs_pp_2():
    assert any("PP is 1" in f.message for f in errors({"features": "vpp", "train_pp": 1, "train_tp": 8}))


def test_vpp_layers_rule_reads_the_models_config(tmp_path):
    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    shutil.copy(FIXTURES / "Qwen3-8B.config.json", model / "config.json")  # 36 layers
    facts = read_model_facts(str(model))
    assert facts.num_layers == 36
    assert errors({"features": "vpp", "train_pp": 2, "train_tp": 4}, facts) == []  # 36 / (2 x 2) = 9
    found = errors({"features": "vpp", "train_pp": 4, "train_tp": 2}, facts)  # 36 / 4 = 9, odd
    assert any("36 layers" in f.message for f in found)


def test_broken_model_config_is_an_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    facts = read_model_facts(str(tmp_path))
    assert any(f.field == "model_path" for f in errors({"model_path": str(tmp_path)}, facts))


def test_swanlab_on_without_host_is_an_error():
    assert any(f.field == "swanlab_host" for f in errors({"swanlab": True}))
    assert errors({"swanlab": True, "swanlab_mode": "local"}) == []


def test_missing_paths_warn_but_fail_under_strict():
    assert errors({}) == []
    assert {f.field for f in errors({"strict": True})} >= {"model_path", "train_file", "test_file"}


@pytest.mark.parametrize("version", ["0.5.0", "0.6.2", "1.2.0"])
def test_unsupported_version(version):
    found = errors({"verl_version": version})
    assert found[0].field == "verl_version"
    assert ("newer than this verl-deploy knows" if version.startswith("1.") else "not supported") in found[0].message
    assert "upgrade" not in found[0].fix
