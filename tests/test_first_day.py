"""A new user's first day (issue 13): what they tried, through the real CLI, and what they must see.

A pipe where a terminal does not matter (run_cli), a pseudo-terminal (pexpect) where it does.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import VERL_BIN, load_plan, recorded_argv, run_cli, run_scripts
from test_init import HYPER_PARAMETERS, Terminal, accept, basics, start

UNRELATED_SWANLAB_ENV = {  # a shell set up for other SwanLab work, not for this run
    "SWANLAB_API_KEY": "SomeOtherKey0123456789", "SWANLAB_PROJECT": "someone-elses", "SWANLAB_MODE": "online",
    "SWANLAB_API_HOST": "http://10.1.2.3:8000/api", "SWANLAB_LOG_DIR": "/tmp/elsewhere", "SWANLAB_WORKSPACE": "team",
}


# -- item 4: a saved key does not turn SwanLab on; README's first command still works ------------------------

def readme_first_command(cwd: Path, env: dict) -> None:
    """`verl-deploy plan && verl-deploy generate --output-dir ./verl_scripts`, as the README's first line."""
    plan = run_cli("plan", env=env, cwd=cwd)
    assert plan.returncode == 0, plan.stdout[-1500:] + plan.stderr
    generated = run_cli("generate", "--output-dir", "./verl_scripts", env=env, cwd=cwd)
    assert generated.returncode == 0, generated.stderr
    document = load_plan(cwd / "verl_scripts")
    assert document["derived"]["swanlab_on"] is False and "trainer.logger=[console]" in document["overrides"]
    assert not (cwd / "verl_scripts" / "swanlab.env").exists()


def test_readme_first_command_after_init_saved_a_key_and_with_unrelated_swanlab_env(npu_host, tmp_path):
    secret = "sk-wizard-kept-2468"
    config = npu_host["tmp"] / "run.yaml"
    term = start(npu_host, config)
    basics(term)
    term.answer("Log to SwanLab", "y")
    term.answer("SwanLab host", "http://10.0.0.1:8000\r")
    term.answer("SwanLab API key", secret + "\r")
    for question in ("SwanLab mode", "Workspace", "Log directory", "Project name", "Features"):
        term.answer(question)
    accept(term)
    assert term.finish() == 0, term.raw[-2000:]
    assert (Path(npu_host["env"]["VERL_DEPLOY_CONFIG_DIR"]) / "swanlab_api_key").read_text().strip() == secret

    env = {**npu_host["env"], "PATH": os.environ["PATH"]}
    first = tmp_path / "readme"
    first.mkdir()
    readme_first_command(first, env)
    second = tmp_path / "readme-unrelated-env"
    second.mkdir()
    readme_first_command(second, {**env, **UNRELATED_SWANLAB_ENV})
    # and SwanLab is on when the user says so: with the init's config, which has the host
    on = json.loads(run_cli("plan", "--config", str(config), "--json", env=env).stdout)
    assert on["derived"]["swanlab_on"] is True and on["sources"]["swanlab_api_key"] == "secret file"


# -- item 3: every feature x framework x device x version: keys or a one-line error ---------------------------

VERSIONS = ("0.7.0", "0.7.1", "0.8.0", "0.9.1")


def test_every_feature_on_every_framework_device_version_and_mode_compiles_or_is_one_finding():
    """In-process over the whole matrix (640 cases); the CLI cases below show the same through the real CLI."""
    from verl_deploy import features as registry
    from verl_deploy.findings import UserError
    from verl_deploy.pipeline import prepare

    problems = []
    for feature, framework, device, version, mode, sign in itertools.product(
            registry.REGISTRY, ("megatron", "fsdp"), ("npu", "gpu"), VERSIONS, ("dapo", "one-step-off"), ("", "-")):
        flags = {"framework": framework, "device": device, "verl_version": version, "mode": mode,
                 "features": sign + feature.name, "train_pp": 2 if feature.name == "vpp" else 1,
                 "train_tp": 2}
        case = f"{sign}{feature.name} {framework}/{device} verl {version} {mode}"
        try:
            prepared = prepare(flags=flags, environ={}, check_verl=False)
        except UserError as exc:
            problems.append(f"{case}: unresolvable: {exc.findings}")
            continue
        errors = [f for f in prepared.findings if f.level == "error"]
        applies = feature.applies_to(framework, device)
        if sign == "" and not applies:
            assert any(f.field == "features" and feature.name in f.message for f in errors), case
            assert all("\n" not in f.line() for f in errors), case
            continue
        if errors:
            problems.append(f"{case}: {[f.line() for f in errors]}")
            continue
        state = {s.name: s for s in prepared.plan.features}[feature.name]
        assert state.on is (sign == "" and applies), case
    assert not problems, "\n".join(problems[:20])


@pytest.mark.parametrize("args", [
    ("--features", "gradient_checkpointing"),
    ("--features", "swap_optimizer", "--device", "gpu"),
    ("--features", "recompute,vpp", "--framework", "fsdp", "--verl-version", "0.9.1"),
])
def test_a_feature_that_does_not_apply_is_one_line_through_the_cli(args):
    result = run_cli("plan", *args)
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error: features:")]
    assert errors and all("does not apply" in line and "fix:" in line for line in errors), result.stdout + result.stderr


def test_turning_off_a_feature_that_does_not_apply_is_fine():
    result = run_cli("plan", "--json", "--features=-gradient_checkpointing")
    assert result.returncode == 0, result.stdout[-1000:] + result.stderr
    state = {f["name"]: f for f in json.loads(result.stdout)["features"]}["gradient_checkpointing"]
    assert state == {"name": "gradient_checkpointing", "on": False, "why": "n/a"}


def test_offload_from_user_features_and_enable_offload_is_listed_once():
    result = run_cli("plan", "--json", env={"USER_FEATURES": "offload", "ENABLE_OFFLOAD": "1"})
    data = json.loads(result.stdout)
    assert data["spec"]["features"] == ["offload"]
    text = run_cli("plan", env={"USER_FEATURES": "offload", "ENABLE_OFFLOAD": "1"}).stdout
    assert "offload,offload" not in text


# -- item 7: detected values survive an explicit value ----------------------------------------------------------

def test_an_explicit_value_does_not_wipe_what_check_detected(npu_host):
    state = Path(npu_host["env"]["VERL_DEPLOY_STATE_DIR"]) / "detected.json"
    first = run_cli("check", "--search-root", str(npu_host["root"]), env=npu_host["env"])
    assert state.exists(), first.stdout + first.stderr
    detected = json.loads(state.read_text())["values"]
    assert detected.get("devices") and detected.get("model_path")
    run_cli("check", "--search-root", str(npu_host["root"]), "--socket-ifname", "lo", "--model-path", "/elsewhere",
            env=npu_host["env"])
    after = json.loads(state.read_text())["values"]
    assert after == detected  # the explicit values were not probed: what was found before stays
    plan = json.loads(run_cli("plan", "--json", env=npu_host["env"]).stdout)
    assert plan["spec"]["model_path"] == detected["model_path"] and plan["sources"]["model_path"] == "detected"
    if detected.get("socket_ifname"):
        assert plan["environment"]["HCCL_SOCKET_IFNAME"] == detected["socket_ifname"]


# -- item 10: run_training.sh derives its dependent values from the variables at its top ------------------------

def test_editing_max_response_length_in_run_training_keeps_derived_values_consistent(tmp_path, stubs):
    out = tmp_path / "scripts"
    made = run_cli("generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]))
    assert made.returncode == 0, made.stderr
    script = out / "run_training.sh"
    text = script.read_text()
    assert "MAX_RESPONSE_LENGTH=8192\n" in text
    script.write_text(text.replace("MAX_RESPONSE_LENGTH=8192\n", "MAX_RESPONSE_LENGTH=4096\n", 1))
    assert run_scripts(out, stubs).returncode == 0
    argv = recorded_argv(stubs)
    values = dict(item.lstrip("+").split("=", 1) for item in argv if "=" in item and not item.startswith("--"))
    r = "actor_rollout_ref.rollout."
    assert values["data.max_response_length"] == "4096"
    assert values[r + "max_num_batched_tokens"] == str(2048 + 4096)
    assert r + "max_model_len" not in values  # verl 0.7.0's vLLM server ignores it, so it is not sent
    assert values["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == str(2048 + 4096)
    assert values["reward_model.reward_kwargs.max_resp_len"] == "4096"
    assert values["reward_model.overlong_buffer.len"] == str(4096 // 4)
    # unedited, the script gives exactly what plan.json says
    script.write_text(text)
    assert run_scripts(out, stubs).returncode == 0
    def unquoted(items: list[str]) -> list[str]:  # hq quotes every string for Hydra; the values are the same
        return [item.split("=", 1)[0] + "=" + item.split("=", 1)[1].strip("'") for item in items]

    assert unquoted(recorded_argv(stubs)[3:]) == unquoted(load_plan(out)["overrides"])


def test_an_explicit_overlong_buffer_len_stays_literal(tmp_path):
    out = tmp_path / "explicit"
    made = run_cli("generate", "--output-dir", str(out), "--override", "data.truncation=left",
                   "--config", str(_config(tmp_path, {"overlong_buffer_len": 512, "mini_batch_size": 16})))
    assert made.returncode == 0, made.stderr
    text = (out / "run_training.sh").read_text()
    assert "OVERLONG_BUFFER_LEN=512\n" in text and "MINI_BATCH_SIZE=16\n" in text


def _config(tmp_path: Path, values: dict) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


# -- item 2: init --config FILE keeps every field, its comments and its spelling ------------------------------

def full_config(host) -> str:
    root = host["root"]
    return f"""# my run: keep this comment
mode: dapo
framework: megatron
device: npu
verl-version: 0.9.1   # dash spelling, as load_config_file accepts
run_dir: /opt/verl
model_path: {root}/models/Qwen3-8B
train_file: {root}/data/dapo-math-17k.parquet
test_file: {root}/data/aime-2024.parquet
ckpts_dir: /ckpts/mine
prompt_key: prompt
devices: 0-7
nnodes: 1
master_addr: 127.0.0.1
ray_port: 6390
socket_ifname: lo
container: verl-npu
image: my/image:1
http_proxy: http://proxy.local:3128
https_proxy: http://proxy.local:3128
train_steps: 12
batch_size: 16
mini_batch_size: 8
gen_batch_size: 48
lr: 2.0e-06
n_resp_per_prompt: 4
max_prompt_length: 1024
max_response_length: 4096
temperature: 0.9
clip_ratio_low: 0.2
clip_ratio_high: 0.3
loss_agg_mode: seq-mean-token-mean
filter_groups: true
filter_groups_metric: acc
max_num_gen_batches: 5
overlong_buffer: true
overlong_buffer_len: 512
overlong_penalty_factor: 0.5
train_tp: 2
train_pp: 2
train_cp: 1
gen_tp: 2
allow_tp_mismatch: false
trainer_gpus: 4
rollout_gpus: 4
rollout_engine: vllm
gpu_memory_utilization: 0.7
save_freq: 5
test_freq: 5
val_before_train: true
max_ckpt_to_keep: 3
features: [offload]   # my features
no_default_features: false
max_oom_retries: 1
swanlab: false
swanlab_host: http://10.0.0.1:8000
swanlab_mode: local
swanlab_workspace: MyTeam
swanlab_log_dir: /logs/swan
project_name: myproj
experiment_name: myexp
overrides:
  - actor_rollout_ref.rollout.top_p=0.9
strict: false
"""


def test_init_keeps_every_field_comment_and_spelling_of_the_config_it_updates(npu_host):
    config = npu_host["tmp"] / "mine.yaml"
    config.write_text(full_config(npu_host))
    env = npu_host["env"]
    before = json.loads(run_cli("plan", "--config", str(config), "--json", "--ignore-detected", env=env).stdout)
    term = start(npu_host, config, "--force")
    basics(term)
    term.answer("Log to SwanLab")
    term.answer("Features")  # prefilled: "choose", with the config's features ticked
    term.answer("Features (space to toggle")
    accept(term)
    assert term.finish() == 0, term.raw[-2000:]
    text = config.read_text()
    for kept in ("# my run: keep this comment", "verl-version: 0.9.1   # dash spelling", "devices: 0-7",
                 "features: [offload]   # my features", "- actor_rollout_ref.rollout.top_p=0.9"):
        assert kept in text, kept
    after = json.loads(run_cli("plan", "--config", str(config), "--json", "--ignore-detected", env=env).stdout)
    assert after["spec"] == before["spec"]
    assert after["spec"]["verl_version"] == "0.9.1" and after["sources"]["verl_version"] == f"file {config}"
    assert {k: v for k, v in after["sources"].items() if v != f"file {config}"} == \
        {k: v for k, v in before["sources"].items() if v != f"file {config}"}


def test_init_writes_a_changed_answer_and_nothing_else(npu_host):
    config = npu_host["tmp"] / "mine.yaml"
    config.write_text(full_config(npu_host))
    term = start(npu_host, config, "--force")
    basics(term)
    term.answer("Log to SwanLab")
    term.answer("Features")
    term.answer("Features (space to toggle")
    term.answer("Training steps", "\x7f" * 10 + "30\r")
    accept(term, HYPER_PARAMETERS[1:])
    assert term.finish() == 0, term.raw[-2000:]
    new = config.read_text().splitlines()
    old = full_config(npu_host).splitlines()
    assert [line for line in new if line not in old] == ["train_steps: 30"]
    assert [line for line in old if line not in new] == ["train_steps: 12"]


# -- item 9: init's questions: framework before the checkpoint dir, FRAMEWORK from env, no TP/PP for FSDP -----

def test_init_with_framework_from_env_asks_no_framework_and_no_tp_pp_for_fsdp(npu_host):
    config = npu_host["tmp"] / "fsdp.yaml"
    term = Terminal(["init", "--search-root", str(npu_host["root"]), "--config", str(config)],
                    dict(npu_host["env"], FRAMEWORK="fsdp"))
    for question in ("Training on", "Device ids", "Model directory", "Training data", "Test data", "Mode"):
        term.answer(question)
    term.answer("Checkpoint directory")
    term.expect_on_screen("dapo-Qwen3-8B-fsdp-npu")  # the default follows the framework
    for question in ("Container for the run", "Log to SwanLab", "Features", "Training steps", "Batch size",
                     "Learning rate", "Rollout tensor parallel", "Responses per prompt", "Max prompt length",
                     "Max response length"):
        term.answer(question)
    assert term.finish() == 0, term.raw[-2000:]
    assert "? Framework" not in term.raw and "framework = fsdp (from env FRAMEWORK)" in term.raw
    assert "Tensor parallel (TP)" not in term.raw and "Pipeline parallel" not in term.raw
    data = yaml.safe_load(config.read_text())
    assert data["ckpts_dir"].endswith("/dapo-Qwen3-8B-fsdp-npu") and data["gen_tp"] == 4
    assert "framework" not in data  # it comes from the environment, as before


# -- item 6: off a terminal, nothing wraps and nothing means something by colour alone ------------------------

LONG_MODEL = "/mnt/public/models/" + "/".join(["a-rather-long-directory-name"] * 6) + "/Qwen3-8B-Instruct"


def test_plan_in_a_pipe_keeps_every_path_and_line_whole():
    result = run_cli("plan", "--all", "--model-path", LONG_MODEL, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    text = result.stdout + result.stderr
    assert "\x1b[" not in text  # no colour codes in a pipe
    lines = text.splitlines()
    assert any(line.startswith("model_path") and LONG_MODEL in line and line.rstrip().endswith("flag --model-path")
               for line in lines)
    assert any(line.startswith("warning: model_path: " + LONG_MODEL + " does not exist") and "fix:" in line
               for line in lines)
    assert any(line.startswith("overrides checked against verl 0.7.0") and "entry config" in line for line in lines)
    states = {line.split()[0]: line.split() for line in lines if line.strip().startswith(("offload ", "remove_padding "))}
    assert "off" in states["offload"] and "on" in states["remove_padding"]


def test_the_confirmation_off_a_terminal_says_on_and_off_in_words(tmp_path, npu_host):
    from test_init import recording_docker

    bin_dir, _ = recording_docker(tmp_path)
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{npu_host['env']['PATH']}", COLUMNS="80")
    result = run_cli("launch", "--skip-check", "--model-path", LONG_MODEL, env=env)  # no terminal, no --yes
    assert result.returncode == 2
    assert "\x1b[" not in result.stderr
    assert "features mask 1100000: on: remove_padding, dynamic_batch, flash_attn; off: offload, prefix_cache, " \
           "recompute, swap_optimizer, vpp, param_offload, optimizer_offload, grad_offload, ref_offload, chunked_prefill" \
           in result.stderr
    assert any(LONG_MODEL in line for line in result.stderr.splitlines())


# -- item 5: the default image is the official one of the verl release and device ------------------------------

@pytest.mark.parametrize("args, image", [
    ((), "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0"),
    (("--device", "gpu"), "verlai/verl:vllm012.latest"),
    (("--device", "gpu", "--verl-version", "0.9.1", "--framework", "fsdp"), "verlai/verl:vllm024.latest"),
    (("--verl-version", "0.9.1"), "quay.io/ascend/verl:latest-cann9.0.0-torch_npu2.9.0post2-910b-ubuntu22.04-py3.11-vllm"),
    (("--verl-version", "0.8.0", "--npu-type", "a3"),
     "quay.io/ascend/verl:v0.8.0-cann9.0.0-torch2.9.0post2-a3-ubuntu22.04-py3.11-vllm"),
    (("--verl-version", "0.7.1", "--image", "my/own:1"), "my/own:1"),
])
def test_the_default_image_follows_version_and_device(args, image):
    data = json.loads(run_cli("plan", "--json", *args).stdout)
    assert data["spec"]["image"] == image
    assert data["sources"]["image"] == ("flag --image" if "--image" in args else "derived")


def test_every_supported_release_and_device_has_an_official_image_with_its_source():
    from verl_deploy.images import TABLE, official_image

    for version, device, npu in itertools.product(("0.7.0", "0.7.1", "0.8.0", "0.8.1", "0.9.0", "0.9.1"),
                                                  ("gpu", "npu"), ("a2", "a3")):
        row = official_image(version, device, npu)
        assert row is not None, (version, device, npu)
        assert row.evidence in ("seen", "by format") and "@v0." in row.source
        registry = "verlai/verl:" if device == "gpu" else "quay.io/ascend/verl:"
        assert row.image.startswith(registry)
        if device == "npu":
            assert ("-a3-" in row.image) == (npu == "a3") and ("-910b-" in row.image) == (npu == "a2")
    assert len({(r.release, r.device) for r in TABLE}) == len(TABLE)


def test_check_on_an_a3_host_picks_the_a3_image(npu_host):
    from conftest import HW

    env = dict(npu_host["env"], FAKE_NPU_SMI=str(HW / "npu-smi-a3-16chip-idle.txt"))
    checked = json.loads(run_cli("check", "--search-root", str(npu_host["root"]), "--json", env=env).stdout)
    assert checked["detected"]["npu_type"] == "a3"
    plan = json.loads(run_cli("plan", "--json", env=env).stdout)
    assert plan["spec"]["image"] == "quay.io/ascend/verl:verl-8.3.rc1-a3-ubuntu22.04-py3.11-v0.7.0"


# -- item 8: --verl-dir without --run-dir runs from that checkout (no container) -------------------------------

def test_verl_dir_is_where_the_local_run_happens(tmp_path, stubs):
    out = tmp_path / "scripts"
    made = run_cli("generate", "--output-dir", str(out), "--verl-dir", str(stubs["verl_root"]))
    assert made.returncode == 0, made.stderr
    plan = load_plan(out)
    assert plan["entry"]["run_dir"] == str(stubs["verl_root"])
    assert plan["sources"]["run_dir"].startswith("derived from verl_dir")
    assert run_scripts(out, stubs).returncode == 0
    assert (stubs["log"] / "python3.cwd").read_text().strip() == str(stubs["verl_root"])
    shown = run_cli("plan", "--verl-dir", str(stubs["verl_root"])).stdout
    assert f"command (run from {stubs['verl_root']})" in shown and "derived from verl_dir" in shown
    # in a container the checkout on this host is not where verl runs: /verl stays
    boxed = json.loads(run_cli("plan", "--json", "--verl-dir", str(stubs["verl_root"]), "--container", "c1").stdout)
    assert boxed["entry"]["run_dir"] == "/verl"


# -- item 12: the small ones -----------------------------------------------------------------------------------

def test_version_and_documented_completion():
    from verl_deploy import __version__

    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"verl-deploy {__version__}"
    script = Path(sys.executable).parent / "verl-deploy"  # the installed command: completion is for its name
    # typer finds the shell among the command's ancestors (shellingham), as when a user types it in bash: a bash
    # that stays its parent (a second command keeps bash from exec'ing it), whoever started pytest
    shown = subprocess.run(["bash", "-c", f'"{script}" --show-completion; exit $?'], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, SHELL="/bin/bash"))
    assert shown.returncode == 0 and "complete -o default -F _verl_deploy_completion verl-deploy" in shown.stdout
    assert "--install-completion" in run_cli("--help").stdout
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "verl-deploy --install-completion" in readme and "Python >= 3.11" in readme


def test_flags_show_no_value_in_help():
    text = run_cli("generate", "--help").stdout
    for line in text.splitlines():
        if any(flag in line for flag in ("--force ", "--json ", "--strict ", "--help ")):
            assert "<bool>" not in line, line
    assert any("--output-dir" in line and "DIR" in line for line in text.splitlines())  # a value still says what


def test_diagnose_says_an_empty_or_binary_file_is_not_a_verl_log(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    for path, why in ((empty, "it is empty"), (binary, "it is a binary file")):
        result = run_cli("diagnose", str(path))
        assert result.returncode == 2, result.stdout
        assert f"{path} has no verl log lines: {why}" in result.stderr and "no failure found" not in result.stdout
        data = json.loads(run_cli("diagnose", "--json", str(path)).stdout)
        assert data["ok"] is False and why in data["findings"][0]["message"]
    assert run_cli("diagnose", "-", input="").returncode == 2


@pytest.mark.parametrize("version, newer", [("0.10.0", True), ("1.2.0", True), ("0.5.0", False)])
def test_an_unsupported_version_fix_says_the_right_direction(version, newer):
    result = run_cli("plan", "--verl-version", version)
    line = next(line for line in result.stderr.splitlines() if line.startswith("error: verl_version:"))
    assert result.returncode == 1 and "upgrade" not in line.lower()
    assert ("newer than this verl-deploy knows" in line) is newer
    assert ("update verl-deploy" in line) is newer


def test_swanlab_login_help_lists_only_its_own_flags():
    text = run_cli("swanlab", "login", "--help").stdout
    flags = {word.rstrip(",") for word in text.split() if word.startswith("--")}
    assert flags == {"--remember", "--no-remember", "--help", "--config", "--container", "--http-proxy",
                     "--https-proxy", "--swanlab-host", "--swanlab-api-key", "--install-missing"}, flags


def test_the_config_index_cache_is_bounded(tmp_path):
    from conftest import ROOT

    from verl_deploy.verlconfig.index import INDEX_CACHE_LIMIT

    shared = Path(os.environ["VERL_DEPLOY_CACHE_DIR"])
    cache = tmp_path / "cache"
    (cache / "index").mkdir(parents=True)
    if (shared / "verl").exists():
        (cache / "verl").symlink_to(shared / "verl")  # the wheels already fetched, not fetched again
    for n in range(INDEX_CACHE_LIMIT + 20):
        stale = cache / "index" / f"0.0.0-old-{n:04d}.json"
        stale.write_text("{}")
        os.utime(stale, (1_000_000 + n, 1_000_000 + n))
    result = run_cli("plan", "--json", env={"VERL_DEPLOY_CACHE_DIR": str(cache)})
    assert json.loads(result.stdout)["verl"]["checked_against"], result.stderr
    left = sorted(p.name for p in (cache / "index").glob("*.json"))
    assert len(left) == INDEX_CACHE_LIMIT
    assert any(not name.startswith("0.0.0-old-") for name in left)  # the one just built is kept
    assert "0.0.0-old-0000.json" not in left  # the least recently used went first
    assert ROOT.exists()


def test_on_a_terminal_plan_keeps_colour_and_still_says_on_and_off():
    import re

    term = Terminal(["plan", "--all"], {})
    assert term.finish() == 0, term.raw[-2000:]
    assert "\x1b[" in term.raw  # colour on a terminal
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.raw).replace("\r", "")
    rows = {line.split()[0]: line.split() for line in plain.splitlines() if line.strip()[:1].isalpha()}
    assert "on" in rows["remove_padding"] and "off" in rows["offload"]  # words, not colour alone
    short = Terminal(["plan"], {})
    assert short.finish() == 0, short.raw[-2000:]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", short.raw).replace("\r", "")
    assert "on remove_padding, dynamic_batch" in plain and "memory features off: offload, recompute" in plain


def test_ci_runs_the_readmes_test_command_exactly():
    """CI is the README's second line: what a developer runs is what CI runs, services included."""
    root = Path(__file__).resolve().parents[1]
    readme_lines = root.joinpath("README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert readme_lines[0].startswith("pip install . && verl-deploy plan")
    assert root.joinpath(".ci/run").read_text().rstrip().splitlines()[-1] == readme_lines[1]
    assert readme_lines[1].startswith("bash tests/install-services.sh && pip install '.[test]'")
    services = subprocess.run(["bash", str(root / "tests/install-services.sh")], capture_output=True, text=True,
                              timeout=1800)
    assert services.returncode == 0, services.stderr  # a service that cannot be installed is a skip, never a failure
