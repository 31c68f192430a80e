"""Sources: priority flag > env > file > default, provenance, and clear errors for bad input."""

import pytest

from verl_deploy.findings import UserError
from verl_deploy.sources import resolve


def test_defaults_are_the_seeds_defaults():
    spec = resolve(environ={})
    assert (spec.train_tp, spec.train_pp, spec.train_steps, spec.batch_size, spec.lr) == (4, 2, 100, 32, 1e-6)
    assert spec.n_resp_per_prompt == 8 and spec.max_response_length == 8192
    assert spec.devices == list(range(8)) and spec.verl_version == "0.7.0"
    assert spec.project_name == "verl_hlm" and spec.model_path.endswith("Qwen3-8B")
    assert spec.sources["train_steps"] == "default"


def test_priority_flag_over_env_over_file(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("train_steps: 7\nbatch_size: 64\nlr: 2.0e-6\nframework: fsdp\n")
    spec = resolve(flags={"train_steps": 9}, environ={"TRAIN_STEPS": "8", "FRAMEWORK": "megatron"},
                   config_file=config)
    assert spec.train_steps == 9 and spec.sources["train_steps"] == "flag --train-steps"
    assert spec.framework == "megatron" and spec.sources["framework"] == "env FRAMEWORK"
    assert spec.batch_size == 64 and spec.sources["batch_size"] == f"file {config}"
    assert spec.lr == 2e-6


def test_seed_000_environment_variables():
    spec = resolve(environ={"VAL_FILE": "/d/aime.parquet", "TRAINER_GPUS": "2", "ROLLOUT_GPUS": "6",
                            "USER_FEATURES": "prefix_cache", "ENABLE_OFFLOAD": "True", "MAX_OOM_RETRIES": "3",
                            "CONTAINER": "jins", "SWANLAB_HOST": "http://h:8000"})
    assert spec.test_file == "/d/aime.parquet" and spec.trainer_gpus == 2 and spec.rollout_gpus == 6
    assert spec.features == ["prefix_cache,offload"] and spec.max_oom_retries == 3
    assert spec.container == "jins" and spec.swanlab_on


def test_detected_values_sit_between_file_and_default(tmp_path):
    spec = resolve(environ={}, detected={"devices": "0,1,2,3", "master_addr": "10.0.0.5"})
    assert spec.devices == [0, 1, 2, 3] and spec.sources["devices"] == "detected"
    config = tmp_path / "c.yaml"
    config.write_text("devices: 0-7\n")
    assert resolve(environ={}, detected={"devices": "0,1"}, config_file=config).devices == list(range(8))


@pytest.mark.parametrize("flags,field", [
    ({"train_steps": 0}, "train_steps"),
    ({"lr": -1.0}, "lr"),
    ({"batch_size": -4}, "batch_size"),
    ({"devices": "0,a,2"}, "devices"),
    ({"mode": "async"}, "mode"),
    ({"framework": "deepspeed"}, "framework"),
    ({"verl_version": "latest"}, "verl_version"),
    ({"model_path": "/a\nb"}, "model_path"),
])
def test_bad_values_name_the_field_and_the_flag(flags, field):
    with pytest.raises(UserError) as info:
        resolve(flags=flags, environ={})
    finding = info.value.findings[0]
    assert finding.field == field and finding.level == "error"
    assert "--" in finding.fix


def test_bad_env_value_names_the_variable():
    with pytest.raises(UserError) as info:
        resolve(environ={"TRAIN_STEPS": "many"})
    assert "TRAIN_STEPS" in info.value.findings[0].fix


def test_missing_config_file():
    with pytest.raises(UserError) as info:
        resolve(environ={}, config_file="/nonexistent/verl-deploy.yaml")
    assert "does not exist" in info.value.findings[0].message


def test_invalid_yaml_reports_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("train_steps: 4\nbatch_size: [1, 2\n")
    with pytest.raises(UserError) as info:
        resolve(environ={}, config_file=config)
    assert "line" in info.value.findings[0].message


def test_unknown_config_key_suggests_the_real_one(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text("train_step: 4\nbatchsize: 8\n")
    with pytest.raises(UserError) as info:
        resolve(environ={}, config_file=config)
    fixes = " ".join(f.fix for f in info.value.findings)
    assert len(info.value.findings) == 2  # every problem at once
    assert "train_steps" in fixes and "batch_size" in fixes


def test_secret_is_never_echoed_in_findings():
    with pytest.raises(UserError) as info:
        resolve(environ={"SWANLAB_API_KEY": "sk-123456"}, flags={"train_steps": -1})
    assert "sk-123456" not in str(info.value)


def test_one_step_off_default_layout_fits_four_trainer_devices():
    spec = resolve(environ={}, flags={"mode": "one-step-off"})
    assert spec.train_pp == 1 and spec.sources["train_pp"] == "derived"
    assert resolve(environ={}, flags={"mode": "one-step-off", "train_pp": 2}).train_pp == 2
