"""The command line as a user runs it: exit codes, one-line errors, files, secrets."""

import json
import os
import subprocess

import pytest

from conftest import has_shellcheck, load_plan, run_cli, run_scripts, recorded_argv


def test_help_teaches_with_examples():
    result = run_cli("generate", "--help")
    assert result.returncode == 0
    assert "--mask" in result.stdout and "Examples" in result.stdout and "--npu-devices" in result.stdout


def test_plan_on_the_built_in_example():
    result = run_cli("plan")
    assert result.returncode == 0, result.stderr
    assert "recipe.dapo.main_dapo" in result.stdout and "ready" in result.stdout
    assert "use_flash_attn=True" not in result.stdout  # the overrides are plan --all's
    assert "use_flash_attn=True" in run_cli("plan", "--all").stdout


def test_plan_json_has_sources_overrides_and_command():
    result = run_cli("plan", "--json", "--train-steps", "4", env={"MODEL_PATH": "/m/Qwen3-8B"})
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["sources"]["train_steps"] == "flag --train-steps"
    assert data["sources"]["model_path"] == "env MODEL_PATH"
    assert data["command"][:3] == ["python3", "-m", "recipe.dapo.main_dapo"]
    assert "trainer.total_training_steps=4" in data["overrides"]
    assert data["mask"] == "1100000"


def test_generate_writes_scripts_that_pass_bash_and_shellcheck(tmp_path):
    out = tmp_path / "scripts"
    result = run_cli("generate", "--output-dir", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["plan.json", "run_training.sh", "start_verl.sh"]
    for script in ("start_verl.sh", "run_training.sh"):
        assert subprocess.run(["bash", "-n", str(out / script)]).returncode == 0
        assert os.access(out / script, os.X_OK)
    if has_shellcheck():
        check = subprocess.run(["shellcheck", str(out / "start_verl.sh"), str(out / "run_training.sh")],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout
    run = (out / "run_training.sh").read_text()
    assert "TRAIN_STEPS=100" in run and "TRAIN_TP=4" in run  # hyper-parameters as variables at the top
    start = (out / "start_verl.sh").read_text()
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in start and '{"NPU": 8}' in start


def test_same_spec_gives_byte_identical_scripts(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert run_cli("generate", "--output-dir", str(out), "--mask", "1011000").returncode == 0
    for name in ("start_verl.sh", "run_training.sh"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_existing_scripts_need_force(tmp_path):
    out = tmp_path / "s"
    assert run_cli("generate", "--output-dir", str(out)).returncode == 0
    before = (out / "run_training.sh").read_text()
    result = run_cli("generate", "--output-dir", str(out), "--train-steps", "5")
    assert result.returncode == 1 and "--force" in result.stderr and "Traceback" not in result.stderr
    assert (out / "run_training.sh").read_text() == before
    assert run_cli("generate", "--output-dir", str(out), "--train-steps", "5", "--force").returncode == 0
    assert "TRAIN_STEPS=5" in (out / "run_training.sh").read_text()


@pytest.mark.parametrize("args,needle", [
    (["--mask", "10100"], "mask"),
    (["--features", "turbo"], "unknown feature"),
    (["--devices", "0-5"], "do not divide"),
    (["--framework", "fsdp", "--features", "recompute"], "does not apply"),
    (["--train-steps", "-3"], "train_steps"),
    (["--override", "trainer.save_freqq=5"], "did you mean trainer.save_freq"),
    (["--override", "+trainer.save_freq=5"], "without '+'"),
    (["--override", "actor_rollout_ref.actor.foo=1"], "unknown verl config key"),
    (["--override", "trainer.logger=a,b"], "sweep"),
    (["--verl-version", "0.5.0"], "not supported"),
    (["--config", "/nope.yaml"], "does not exist"),
    (["--swanlab", "maybe"], "yes or no"),
])
def test_each_mistake_is_one_clear_line_and_nothing_is_written(tmp_path, args, needle):
    out = tmp_path / "never"
    result = run_cli("generate", "--output-dir", str(out), *args)
    assert result.returncode == 1
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists()


@pytest.mark.parametrize("args,needle", [
    (["generate", "--nnodes", "two"], "--nnodes"),
    (["generate", "--trian-steps", "5"], "No such option: --trian-steps"),
    (["diagnose"], "Missing argument 'LOGFILE'"),
    (["genrate"], "No such command 'genrate'"),
])
def test_the_parsers_refusals_are_one_line_too(tmp_path, args, needle):
    """What the argument parser refuses reads like every other refusal: one `error:` line with the fix."""
    result = run_cli(*args, "--output-dir", str(tmp_path / "never")) if args[0] == "generate" else run_cli(*args)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and needle in line and " — fix: see `verl-deploy" in line and "-h`" in line
    assert not (tmp_path / "never").exists()


def test_all_findings_are_reported_at_once():
    result = run_cli("plan", "--devices", "0-5", "--mask", "0000001", "--train-pp", "1", "--train-tp", "4")
    assert result.returncode == 1
    assert "do not divide" in result.stdout and "vpp needs pipeline parallel" in result.stdout


def test_user_override_is_checked_and_applied(tmp_path, stubs):
    out = tmp_path / "o"
    result = run_cli("generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]),
                     "-o", "actor_rollout_ref.actor.clip_ratio_c=5", "-o",
                     "+actor_rollout_ref.model.override_config.rope_theta=1000")
    assert result.returncode == 0, result.stderr
    assert run_scripts(out, stubs).returncode == 0
    argv = recorded_argv(stubs)
    # a key verl-deploy sets to a constant (verl's DAPO scripts' 10.0) is the user's to change
    assert "actor_rollout_ref.actor.clip_ratio_c=5" in argv and "actor_rollout_ref.actor.clip_ratio_c=10.0" not in argv
    assert "+actor_rollout_ref.model.override_config.rope_theta=1000" in argv


def test_swanlab_secret_never_reaches_scripts_plan_argv_or_output(tmp_path, stubs):
    key = "sk-TOPSECRET-9876"
    out = tmp_path / "sw"
    result = run_cli("generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]),
                     env={"SWANLAB_API_KEY": key, "SWANLAB_HOST": "http://127.0.0.1:8000"})
    assert result.returncode == 0, result.stderr
    assert key not in result.stdout + result.stderr
    for name in ("start_verl.sh", "run_training.sh", "plan.json"):
        assert key not in (out / name).read_text()
    secret = out / "swanlab.env"
    assert secret.stat().st_mode & 0o777 == 0o600
    assert key in secret.read_text()
    assert load_plan(out)["spec"]["swanlab_api_key"] == "****9876"
    assert run_scripts(out, stubs).returncode == 0
    assert key not in "\0".join(recorded_argv(stubs))
    training_env = (stubs["log"] / "python3.env").read_text()
    assert f"SWANLAB_API_KEY={key}" in training_env  # reaches verl via env only
    # the SwanLab log dir defaults under the run directory (where the run writes), not a fixed /verl/swanlog
    for line in ("SWANLAB_MODE=cloud", "SWANLAB_WORKSPACE=TrainingMaster", f"SWANLAB_LOG_DIR={stubs['verl_root']}/swanlog",
                 "SWANLAB_API_HOST=http://127.0.0.1:8000/api", "SWANLAB_WEB_HOST=http://127.0.0.1:8000"):
        assert line in training_env.splitlines(), line
    assert "SWANLAB_PROJECT=" not in training_env  # swanlab 0.10 cannot parse it: importing swanlab would fail
    assert "trainer.logger=[console,swanlab]" in recorded_argv(stubs)


def test_api_key_from_stdin(tmp_path):
    out = tmp_path / "stdin"
    result = run_cli("generate", "--output-dir", str(out), "--swanlab-host", "http://h:8000",
                     "--swanlab-api-key", "-", input="sk-from-stdin-4321\n")
    assert result.returncode == 0, result.stderr
    assert "sk-from-stdin-4321" in (out / "swanlab.env").read_text()


def test_swanlab_off_means_console_only_and_no_secret_file(tmp_path):
    out = tmp_path / "off"
    result = run_cli("generate", "--output-dir", str(out), "--swanlab", "no",
                     env={"SWANLAB_API_KEY": "sk-x", "SWANLAB_HOST": "http://h:8000"})
    assert result.returncode == 0, result.stderr
    assert not (out / "swanlab.env").exists()
    assert "trainer.logger=[console]" in load_plan(out)["overrides"]


def _listening(tmp_path):
    """Something on a free port, standing for a Ray cluster this run did not start."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    config = tmp_path / "port.yaml"
    config.write_text(f"ray_port: {server.getsockname()[1]}\n")
    return server, config


@pytest.mark.parametrize("reuse", [True, False])
def test_start_script_reuses_a_running_ray_only_when_asked_and_never_stops_it(tmp_path, stubs, reuse):
    out = tmp_path / "ray"
    server, config = _listening(tmp_path)
    with server:
        assert run_cli("generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]), "--config", str(config),
                       "--device", "gpu", "--devices", "0,1,2,3", "--train-pp", "1").returncode == 0
        result = run_scripts(out, stubs, {"STUB_RAY_UP": "1", "STUB_EXIT": "3",
                                          "VERL_DEPLOY_REUSE_RAY": "1" if reuse else "0"})
    assert result.returncode == 3
    calls = (stubs["log"] / "ray.calls").read_text().splitlines()
    assert not any(c.startswith("stop") for c in calls)  # never a bare `ray stop`
    if reuse:
        assert not any(c.startswith("start") for c in calls) and "reusing the Ray cluster" in result.stdout
    else:  # a foreign cluster on the port: our own head on a free port (0: Ray picks one)
        start = next(c for c in calls if c.startswith("start --head"))
        assert "--port=0" in start and "--temp-dir=/tmp/vdr-" in start
        assert "taken by something this run did not start" in result.stdout
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in (stubs["log"] / "python3.env").read_text()


def test_start_script_starts_its_own_ray_and_never_runs_a_bare_ray_stop(tmp_path, stubs):
    out = tmp_path / "ray2"
    assert run_cli("generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]),
                   "--socket-ifname", "eth0").returncode == 0
    assert run_scripts(out, stubs, {"VERL_DEPLOY_RAY_TEMP_DIR": str(tmp_path / "raytmp")}).returncode == 0
    calls = (stubs["log"] / "ray.calls").read_text().splitlines()
    start = next(c for c in calls if c.startswith("start --head"))
    assert '--resources={"NPU": 8}' in start and f"--temp-dir={tmp_path / 'raytmp'}" in start
    assert not any(c.startswith("stop") for c in calls)
    env = (stubs["log"] / "python3.env").read_text()
    assert "HCCL_SOCKET_IFNAME=eth0" in env and "GLOO_SOCKET_IFNAME=eth0" in env


def test_missing_recipe_is_reported_by_the_script(tmp_path, stubs):
    out = tmp_path / "norecipe"
    empty = tmp_path / "empty-verl"
    empty.mkdir()
    assert run_cli("generate", "--output-dir", str(out), "--run-dir", str(empty)).returncode == 0
    result = run_scripts(out, stubs)
    assert result.returncode == 2 and "recipe/dapo/main_dapo.py is missing" in result.stderr
    assert "git clone --branch v0.7.0" in result.stderr  # 0.7.0's DAPO is in its own source tree


def test_verl_dir_reads_version_and_recipe_config(tmp_path):
    from verl_deploy.verlconfig.locate import locate

    wheel_root = locate("0.7.0").root
    checkout = tmp_path / "verl"
    import shutil

    shutil.copytree(wheel_root / "verl", checkout / "verl")
    (checkout / "recipe/dapo/config").mkdir(parents=True)
    # a checkout's own recipe yaml is used instead of the profile's declaration
    (checkout / "recipe/dapo/config/dapo_megatron_trainer.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_megatron_trainer\n  - _self_\n"
        "data:\n  gen_batch_size: ${data.train_batch_size}\nreward_model:\n  reward_manager: dapo\n"
        "  overlong_buffer:\n    enable: False\n    len: 0\n    penalty_factor: 0.0\n    log: False\n"
        "algorithm:\n  filter_groups:\n    _target_: verl.trainer.config.FilterGroupsConfig\n    enable: False\n"
        "    metric: null\n    max_num_gen_batches: 0\n")
    result = run_cli("plan", "--json", "--verl-dir", str(checkout))
    data = json.loads(result.stdout)
    assert data["ok"], data["findings"]
    assert "recipe/dapo/config/dapo_megatron_trainer.yaml" in data["verl"]["checked_against"]


def test_features_command_lists_and_decodes():
    listing = run_cli("features", "--json")
    names = [f["name"] for f in json.loads(listing.stdout)["features"]]
    assert names[:7] == ["remove_padding", "dynamic_batch", "offload", "prefix_cache", "recompute",
                         "swap_optimizer", "vpp"]
    decoded = json.loads(run_cli("features", "--mask", "1010000", "--json").stdout)
    assert [b["on"] for b in decoded["bits"]] == [True, False, True, False, False, False, False]
    bad = run_cli("features", "--mask", "12")
    assert bad.returncode == 1 and "7-bit" in bad.stderr


def test_print_commands_for_multi_node(tmp_path):
    out = tmp_path / "multi"
    # 3 nodes x 8 NPUs at TP 4 x PP 2 is DP 3: a batch x n verl's balance split can divide by 3 (48 x 8)
    result = run_cli("generate", "--output-dir", str(out), "--nnodes", "3", "--master-addr", "10.0.0.1",
                     "--batch-size", "48", "--print-commands", "--json")
    assert result.returncode == 0, result.stderr
    commands = json.loads(result.stdout)["commands"]
    workers = commands["each of the 2 worker node(s)"]
    assert workers == [f"env VERL_DEPLOY_ROLE=worker bash {out}/start_verl.sh"]
    assert commands["the head (10.0.0.1)"][0].startswith(f"bash {out}/start_verl.sh")
    assert "WANT_NODES=3" in (out / "start_verl.sh").read_text()


def test_nodes_from_a_host_file_set_nnodes_and_the_head(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# head first\nnode-a\nuser@node-b  # second\n")
    plan = json.loads(run_cli("plan", "--nodes", f"@{hosts}", "--json").stdout)
    assert plan["spec"]["nodes"] == ["node-a", "user@node-b"] and plan["spec"]["nnodes"] == 2
    assert plan["spec"]["master_addr"] == "node-a" and plan["sources"]["nnodes"] == "derived"
    bad = run_cli("plan", "--nodes", "a,$(reboot)")
    assert bad.returncode == 1 and "is not a host name" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("override,flag", [
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=3", "--train-tp"),  # checks made for TP 4
    ("trainer.n_gpus_per_node=3", "--devices"),
    ("data.max_response_length=1024", "--max-response-length"),  # token budgets derived from 8192
    # Megatron: the feature's key (model.use_remove_padding follows it, and a script may set that one apart)
    ("actor_rollout_ref.actor.megatron.use_remove_padding=False", "--features remove_padding or -remove_padding"),
    ("~reward_model.overlong_buffer", "--overlong-buffer"),  # deleting a node takes every key under it
])
def test_an_override_may_not_take_a_key_from_a_field(tmp_path, override, flag):
    """One value, one path: checks, derived values and the estimate read the field, so the field must be
    what verl receives; the refusal names the flag to use instead."""
    out = tmp_path / "never"
    result = run_cli("generate", "--output-dir", str(out), "-o", override)
    # the refusal of the override is one line; a rule may also judge the config the override makes (n_gpus_per_node=3)
    [line] = [l for l in result.stderr.splitlines() if l.startswith("error: overrides:")]
    assert result.returncode == 1 and override in line and flag in line
    assert not out.exists()


def test_a_key_given_twice_is_shown_as_verl_gets_it():
    first, last = "actor_rollout_ref.actor.clip_ratio_c=4", "actor_rollout_ref.actor.clip_ratio_c=5"
    data = json.loads(run_cli("plan", "--json", "-o", first, "-o", last).stdout)
    assert data["ok"] and data["superseded"] == {"clip_ratio_c": last}
    assert last in data["overrides"] and first not in data["overrides"]
    assert any(f["level"] == "warning" and "given twice" in f["message"] for f in data["findings"])


def test_a_field_replaced_by_an_override_shows_what_verl_receives():
    """The table must not show token-mean when --override sends something else for the same key."""
    override = "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"
    data = json.loads(run_cli("plan", "--json", "--override", override).stdout)
    assert not data["ok"] and data["superseded"] == {"loss_agg_mode": override}  # refused, and shown as sent
    assert override in data["overrides"] and "actor_rollout_ref.actor.loss_agg_mode=token-mean" not in data["overrides"]
    [row] = [line for line in run_cli("plan", "--all", env={"COLUMNS": "250"}).stdout.splitlines()
             if line.startswith("loss_agg_mode")]
    assert "token-mean" in row and "default" in row  # without the override: the field and its source
    [row] = [line for line in run_cli("plan", "--override", override, env={"COLUMNS": "250"}).stdout.splitlines()
             if line.startswith("loss_agg_mode")]
    assert f"{override} (instead of token-mean)" in row and "flag --override" in row


@pytest.mark.parametrize("args", [["plan", "--json", "--train-steps", "x"], ["generate", "--json", "--train-tp", "x"],
                                  ["diagnose", "--json", "/nonexistent/train.log"]])
def test_json_refusals_are_json_on_stdout_too(args):
    """An agent reading --json gets the refusal as JSON whichever layer refused (parser or command)."""
    result = run_cli(*args)
    assert result.returncode == 2
    data = json.loads(result.stdout)
    [finding] = data["findings"]
    assert data["ok"] is False and finding["level"] == "error" and finding["field"] and finding["fix"]
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_one_oom_ladder_per_framework_drives_recovery_and_the_next_step():
    """features --json shows the ladder recovery climbs and the end-of-run advice names (one table, features.py)."""
    from verl_deploy.runs.next_step import _oom_step
    from verl_deploy.runs.record import Attempt, RunRecord

    ladders = json.loads(run_cli("features", "--json").stdout)["oom_ladders"]
    assert ladders == {"megatron": ["offload", "recompute"], "fsdp": ["offload", "gradient_checkpointing"]}
    for framework, ladder in ladders.items():
        record = RunRecord(id="r1", backend="local", spec={"framework": framework, "device": "gpu"}, state="failed",
                           attempts=[Attempt(n=1, features=[], reason="start", handle={}, log="", features_on=[ladder[0]])])
        assert _oom_step(record)[1] == f"verl-deploy resume r1 --features {ladder[1]}"
