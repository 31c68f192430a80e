"""`verl-deploy import` as a user runs it: the config it writes plans, `--check` says what differs, and
every refusal is one line with no file left behind."""

from __future__ import annotations

import json

from conftest import FIXTURES, run_cli

SCRIPTS = FIXTURES / "imported_scripts"
DAPO_070 = SCRIPTS / "verl-v0.7.0" / "recipe" / "dapo" / "run_dapo_qwen3_8b_base_npu.sh"
RECIPE_070 = FIXTURES / "recipes" / "verl-v0.7.0"
BASE = ["--verl-version", "0.7.0", "--recipe-dir", str(RECIPE_070), "--env", "HOME=/home/user", "--env", "PWD=/verl"]


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error")]


def test_imported_config_plans_and_says_where_each_value_came_from(tmp_path):
    out = tmp_path / "dapo.yaml"
    result = run_cli("import", str(DAPO_070), "--output", str(out), *BASE)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "model_path: /home/user/verl/models/Qwen3-8B-Base  # script line 85" in text
    assert "max_response_length: 20480  # script line 63" in text  # $((1024 * 20))
    assert "#   MODEL_PATH -> model_path" in text  # the seeds' variable the script reads
    assert "  - actor_rollout_ref.actor.ulysses_sequence_parallel_size=2  # script line 99" in text
    planned = run_cli("plan", "--config", str(out), "--json")
    assert planned.returncode == 0, [f for f in json.loads(planned.stdout)["findings"] if f["level"] == "error"]
    command = " ".join(json.loads(planned.stdout)["command"])
    assert "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2" in command
    assert "data.max_response_length=20480" in command and "recipe.dapo.main_dapo" in command


def test_check_lists_the_keys_that_still_differ(tmp_path):
    """A value verl takes and a spec field does not (vLLM's memory share above the field's 0.99 bound): the field
    keeps verl-deploy's value, says so, and --check names the key that differs and exits 1."""
    script = tmp_path / "grpo.sh"
    script.write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
                      "    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization=0.995 \\\n"
                      "    data.train_batch_size=64 trainer.n_gpus_per_node=8\n")
    result = run_cli("import", str(script), "--check", "--verl-version", "0.7.0", "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 1 and data["ok"] is False
    assert [line.split(":")[0] for line in data["differences"]] == ["actor_rollout_ref.rollout.gpu_memory_utilization"]
    assert "0.995" in data["differences"][0]
    assert any(p.startswith("gpu_memory_utilization: 0.995 is refused") for p in data["field_problems"])


def test_megatron_recompute_and_an_attention_backend_no_feature_says_import_equivalent(tmp_path):
    gptoss = SCRIPTS / "verl-v0.7.0" / "recipe" / "dapo" / "test_dapo_gptoss_20b_megatron.sh"
    result = run_cli("import", str(gptoss), "--check", *BASE, "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["ok"] is True, data["differences"]
    # uniform recompute of 1 layer, as the script says, through the spec's recompute fields
    assert data["fields"]["recompute_method"] == "uniform" and data["fields"]["recompute_num_layers"] == 1
    assert "recompute" in data["fields"]["features"]
    # Megatron's attention_backend=auto: the flash_attn feature sends flash (on) or fused (off); the script's own
    # word stays an override, with its line, and it is the only one: the reference's and the reward model's
    # transformer configs follow the actor's (an interpolation in verl's config), so they need none of their own
    backend = {o["text"].split("=")[0].lstrip("+"): o for o in data["overrides"] if "attention_backend" in o["text"]}
    actor = "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"
    assert backend == {actor: {"text": f"{actor}=auto", "from": "script line 149"}}


def test_check_of_verls_own_script_is_equivalent_and_names_the_keys_it_adds(tmp_path):
    result = run_cli("import", str(DAPO_070), "--check", *BASE)
    assert result.returncode == 0, result.stdout + result.stderr
    flat = " ".join(result.stdout.split())
    assert "equivalent: the generated launch composes to the script's verl 0.7.0 config" in flat
    # verl 0.7.0's reward loop reads reward_kwargs.overlong_buffer_cfg; the script sets only the recipe's keys
    assert "added: reward_model.reward_kwargs.overlong_buffer_cfg.len=4096, a copy of the script's " \
           "reward_model.overlong_buffer.len" in flat
    data = json.loads(run_cli("import", str(DAPO_070), "--check", *BASE, "--json").stdout)
    assert data["ok"] is True and data["differences"] == []
    assert data["fields"]["max_ckpt_to_keep"] is None  # verl's null: every checkpoint kept, as the script does
    assert {"key": "reward_model.reward_kwargs.overlong_buffer_cfg.len", "value": 4096,
            "copy_of": "reward_model.overlong_buffer.len"} in data["added_as_copies"]


def test_check_of_a_generated_script_is_equivalent(tmp_path):
    made = run_cli("generate", "--verl-version", "0.7.0", "--output-dir", str(tmp_path / "s"))
    assert made.returncode == 0, made.stderr
    result = run_cli("import", str(tmp_path / "s" / "run_training.sh"), "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "equivalent: the generated launch composes to the script's verl 0.7.0 config" in result.stdout


def test_refusals_are_one_line_and_leave_no_file(tmp_path):
    out = tmp_path / "c.yaml"
    no_launch = tmp_path / "prep.sh"
    no_launch.write_text("#!/bin/bash\nwget https://example.invalid/data.parquet\n")
    usage = tmp_path / "usage.sh"  # run without arguments, the script stops before its launch
    usage.write_text('#!/bin/bash\nif [ "$#" -lt 1 ]; then\n  exit 1\nfi\npython3 -m verl.trainer.main_ppo m=$1\n')
    ppo = tmp_path / "ppo.sh"  # verl's PPO with a critic (GAE): no verl-deploy algorithm runs it
    ppo.write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=gae \\\n"
                   "    data.train_batch_size=64 trainer.n_gpus_per_node=8\n")
    cases = [
        (["import", str(no_launch), "--output", str(out)], "no `python3 -m ENTRY"),
        (["import", str(tmp_path / "missing.sh"), "--output", str(out)], "no such file"),
        (["import", str(ppo), "--output", str(out), *BASE], "adv_estimator=gae: verl-deploy runs DAPO and GRPO"),
        (["import", str(DAPO_070)], "--output"),
        (["import", str(DAPO_070), "--output", str(out), "--env", "NOT A PAIR"], "NAME=VALUE"),
        (["import", str(DAPO_070), "--output", str(tmp_path)], "is a folder"),
        (["import", str(usage), "--output", str(out)], "exits at line 3"),
        (["import", str(DAPO_070), "--output", str(out), "--dapo-source", "recipe"], "add --to VERSION"),
    ]
    for args, words in cases:
        result = run_cli(*args)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert len(_errors(result)) == 1 and words in _errors(result)[0], result.stderr
        assert not out.exists()
    out.write_text("mine\n")
    again = run_cli("import", str(DAPO_070), "--output", str(out), *BASE)
    assert again.returncode == 1 and "--force" in _errors(again)[0] and out.read_text() == "mine\n"


def test_the_release_is_read_from_the_entry_and_keys_when_not_given():
    result = run_cli("import", str(DAPO_070), "--check", "--env", "HOME=/home/user", "--env", "PWD=/verl", "--json")
    data = json.loads(result.stdout)
    # recipe.dapo.main_dapo runs on every release; reward_model.overlong_buffer.* is only in 0.7.0 and older
    assert data["verl_version"] == "0.7.0", data["version_why"]
    assert "takes every override of the script" in data["version_why"]


def test_a_fully_async_script_imports_to_the_fully_async_mode_with_its_own_settings(tmp_path):
    script = tmp_path / "fully_async.sh"
    script.write_text("#!/bin/bash\npython3 -X faulthandler -m verl.experimental.fully_async_policy.fully_async_main \\\n"
                      "  data.train_batch_size=0 data.gen_batch_size=1 actor_rollout_ref.rollout.name=vllm \\\n"
                      "  async_training.staleness_threshold=0.5 async_training.trigger_parameter_sync_step=4 \\\n"
                      "  trainer.nnodes=1 trainer.n_gpus_per_node=4 rollout.nnodes=1 rollout.n_gpus_per_node=4 \\\n"
                      "  algorithm.adv_estimator=grpo\n")
    result = run_cli("import", str(script), "--check", "--verl-version", "0.9.1", "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["ok"] is True, data.get("differences") or data.get("findings")
    fields = data["fields"]
    assert (data["mode"], fields["algorithm"], fields["trainer_gpus"], fields["rollout_gpus"]) == \
        ("fully-async", "grpo", 4, 4)
    assert (fields["staleness_threshold"], fields["parameter_sync_step"]) == (0.5, 4)  # fields, not overrides
    assert data["field_problems"] == []  # train_batch_size=0 is fully-async's own, not a batch size refused


def test_a_plus_in_the_references_section_keeps_the_double_plus_that_makes_it_its_own(tmp_path):
    """verl 0.9's ref.megatron.override_transformer_config follows the actor's (an interpolation); verl's Ascend
    235B script writes `++ref...use_flash_attn` then `+ref...sequence_parallel`. The `++` replaces the interpolation
    with a section of its own, so the `+` has nothing to collide with; the generated launch must keep it, first,
    even though the reference already reads use_flash_attn=True through the actor's section (Hydra otherwise
    refuses: "An item is already at ...sequence_parallel")."""
    transformer = "megatron.override_transformer_config"
    script = tmp_path / "ref_own.sh"
    script.write_text(
        "#!/bin/bash\npython3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer.yaml \\\n"
        "  algorithm.adv_estimator=grpo data.train_batch_size=64 trainer.n_gpus_per_node=8 trainer.device=npu \\\n"
        f"  actor_rollout_ref.rollout.name=vllm +actor_rollout_ref.actor.{transformer}.use_flash_attn=True \\\n"
        f"  +actor_rollout_ref.actor.{transformer}.sequence_parallel=True \\\n"
        f"  ++actor_rollout_ref.ref.{transformer}.use_flash_attn=True \\\n"
        f"  +actor_rollout_ref.ref.{transformer}.sequence_parallel=True\n")
    result = run_cli("import", str(script), "--check", "--verl-version", "0.9.1", "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["ok"] is True, result.stdout + result.stderr
    texts = [o["text"] for o in data["overrides"]]
    own = f"++actor_rollout_ref.ref.{transformer}.use_flash_attn=True"
    plus = f"+actor_rollout_ref.ref.{transformer}.sequence_parallel=True"
    assert own in texts and plus in texts and texts.index(own) < texts.index(plus)
    out = tmp_path / "c.yaml"
    assert run_cli("import", str(script), "--output", str(out), "--verl-version", "0.9.1").returncode == 0
    planned = json.loads(run_cli("plan", "--config", str(out), "--json").stdout)
    command = planned["command"]
    assert command.index(own) < command.index(plus)


def test_the_dapo_reward_manager_without_overlong_settings_imports_with_the_buffer_off(tmp_path):
    """verl's dapo reward manager applies the overlong penalty only when reward.reward_kwargs.overlong_buffer_cfg
    is set and enabled: a script that names the manager and no buffer runs without it, so the config says off."""
    script = tmp_path / "dapo_rm.sh"
    script.write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
                      "  reward.reward_manager.name=dapo actor_rollout_ref.rollout.name=vllm \\\n"
                      "  data.train_batch_size=64 trainer.n_gpus_per_node=8\n")
    result = run_cli("import", str(script), "--check", "--verl-version", "0.9.1", "--json")
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["ok"] is True, data.get("differences")
    assert (data["mode"], data["fields"]["algorithm"] if "algorithm" in data["fields"] else "dapo",
            data["fields"]["dapo_source"], data["fields"]["overlong_buffer"]) == ("dapo", "dapo", "core", False)
    assert "no reward.reward_kwargs.overlong_buffer_cfg.enable" in data["provenance"]["overlong_buffer"]
    # with the buffer set, it is read as the script sets it
    on = tmp_path / "dapo_on.sh"
    on.write_text(script.read_text().replace("reward.reward_manager.name=dapo",
                                             "reward.reward_manager.name=dapo +reward.reward_kwargs.max_resp_len=512 "
                                             "+reward.reward_kwargs.overlong_buffer_cfg.enable=True "
                                             "+reward.reward_kwargs.overlong_buffer_cfg.len=128 "
                                             "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0 "
                                             "+reward.reward_kwargs.overlong_buffer_cfg.log=False"))
    data = json.loads(run_cli("import", str(on), "--check", "--verl-version", "0.9.1", "--json").stdout)
    assert data["ok"] is True and data["fields"]["overlong_buffer"] is True and \
        data["fields"]["overlong_buffer_len"] == 128, data.get("differences")


def test_a_rollout_pool_on_more_nodes_than_the_trainer_is_refused_in_one_line(tmp_path):
    """verl's fully-async 30B script trains on 4 nodes and rolls out on 12; a spec has one node count (--nnodes
    sends trainer.nnodes and rollout.nnodes), so import says what the spec lacks, writes nothing, and the script
    with both on one count imports equivalent."""
    text = ("#!/bin/bash\nNNODES_ROLLOUT=${NNODES_ROLLOUT:-3}\n"
            "python3 -m verl.experimental.fully_async_policy.fully_async_main \\\n"
            "  data.train_batch_size=0 data.gen_batch_size=1 actor_rollout_ref.rollout.name=vllm \\\n"
            "  trainer.nnodes=1 trainer.n_gpus_per_node=4 rollout.nnodes=${NNODES_ROLLOUT} \\\n"
            "  rollout.n_gpus_per_node=4 algorithm.adv_estimator=grpo\n")
    script = tmp_path / "fully_async.sh"
    script.write_text(text)
    out = tmp_path / "c.yaml"
    refused = run_cli("import", str(script), "--output", str(out), "--verl-version", "0.9.1")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr and not out.exists()
    assert len(_errors(refused)) == 1, refused.stderr
    line = _errors(refused)[0]
    assert "rollout.nnodes=3 nodes (script line 5) and the trainer on 1" in line and \
        "no separate rollout-pool node count" in line and "give the script's rollout.nnodes the trainer's 1" in line
    fixed = run_cli("import", str(script), "--check", "--verl-version", "0.9.1", "--env", "NNODES_ROLLOUT=1")
    assert fixed.returncode == 0 and "equivalent" in fixed.stdout, fixed.stdout + fixed.stderr
