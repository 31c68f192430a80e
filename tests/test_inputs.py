"""Hostile and mistaken input (issue 12): bounded, one line with the fix, nothing run or written.

Most cases drive the real CLI in-process (typer's CliRunner) for speed; the ones about
processes (concurrent `generate`, a full disk) run real subprocesses and a real tmpfs.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from verl_deploy import names
from verl_deploy.cli import app
from verl_deploy.pipeline import prepare
from verl_deploy.runs.record import Attempt, RunRecord
from verl_deploy.spec import DEFAULT_IMAGE
from verl_deploy.verlconfig import index

from conftest import VERL_BIN
from test_compose_releases import launch_parts

RUNNER = CliRunner()


def cli(*args: str, env: dict | None = None, input: str | None = None):
    return RUNNER.invoke(app, list(args), env={"COLUMNS": "200", **(env or {})}, input=input)


def errors_of(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def assert_refused(result, *words: str) -> str:
    """Exit 1, no traceback, and the refusal is one `error: field: message — fix: ...` line."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = errors_of(result)
    assert lines and all(" — fix: " in line for line in lines), result.output
    joined = "\n".join(lines)
    for word in words:
        assert word in joined, joined
    return joined


# -- 2: bounded device lists -----------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0-99999999", "0-64", "64", "0," * 70 + "1"])
def test_device_lists_are_bounded_before_they_are_expanded(value):
    started = time.monotonic()
    assert_refused(cli("plan", "--devices", value), "devices", "64")
    assert time.monotonic() - started < 10


def test_a_config_file_device_count_is_bounded_too(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("devices: 30000000\n")
    assert_refused(cli("plan", "--config", str(config)), "devices", "at most 64")


# -- 6: Hydra's own grammar ------------------------------------------------------------------------

@pytest.mark.parametrize("override, words", [
    ("trainer.logger=[console", ["not valid Hydra syntax", "close every"]),
    ("x='abc", ["not valid Hydra syntax"]),
    ("${oc.env:HOME", ["KEY=VALUE"]),
    ("trainer..x=1", ["not valid Hydra syntax"]),
    ("x=[a,,b]", ["not valid Hydra syntax"]),
    ("nonsense", ["is not KEY=VALUE", "~KEY"]),
    ("trainer.logger=a,b", ["sweep", "key=[a,b]"]),
    ("a@pkg=1", ["package"]),
])
def test_hydra_syntax_errors_are_one_line_with_the_fix(override, words):
    text = assert_refused(cli("plan", "--override", override), *words)
    assert len(errors_of(cli("plan", "--override", override))) == 1, text


def test_delete_and_force_add_reach_verl_as_written_and_compose_with_its_real_config():
    prepared = prepare(flags={"overrides": ["~trainer.balance_batch", "++actor_rollout_ref.actor.clip_ratio_c=7",
                                            "+actor_rollout_ref.model.override_config.rope_theta=1000"]}, environ={})
    assert prepared.ok, [f.line() for f in prepared.findings if f.level == "error"]
    argv = prepared.plan.argv()
    assert "~trainer.balance_batch" in argv and "++actor_rollout_ref.actor.clip_ratio_c=7" in argv
    assert not any(a.startswith("actor_rollout_ref.actor.clip_ratio_c=") for a in argv)  # ++ replaces the plan's own
    cfg = index.compose(*launch_parts(prepared.plan))
    assert "balance_batch" not in cfg.trainer
    assert OmegaConf.select(cfg, "actor_rollout_ref.actor.clip_ratio_c") == 7
    assert OmegaConf.select(cfg, "actor_rollout_ref.model.override_config.rope_theta") == 1000


@pytest.mark.parametrize("value", ["abc", "true", "1.5", "nan"])
def test_a_value_verl_reads_as_a_number_must_be_one(value):
    """The token-budget rule reads what --override sends; a word there is the user's mistake, not a crash."""
    key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    assert_refused(cli("plan", "-o", f"{key}={value}"), key, "not a whole number")
    assert cli("plan", "-o", f"{key}=20480").exit_code == 0


def test_deleting_a_key_verl_does_not_have_names_the_nearest():
    assert_refused(cli("plan", "-o", "~trainer.balance_batchh"), "cannot delete", "trainer.balance_batch")


# -- 6: config-file types and sizes ------------------------------------------------------------------

@pytest.mark.parametrize("body, words", [
    ("overrides: [1, 2]", ["overrides", "KEY=VALUE"]),
    ("overrides: [{a: 1}]", ["overrides", "dict"]),
    ("features: 12", ["features", "list"]),
    ("nodes: 5", ["nodes"]),
    ("nodes: [1, 2]", ["nodes"]),
    ("devices: {a: 1}", ["devices"]),
    ("model_path: [a]", ["model_path"]),
    (f"model_path: /{'x' * 300}", ["model_path", "255"]),
    (f"model_path: {'/x' * 10000}", ["model_path"]),
])
def test_config_file_values_of_the_wrong_type_or_size_are_findings(tmp_path, body, words):
    config = tmp_path / "c.yaml"
    config.write_text(body + "\n")
    assert_refused(cli("plan", "--config", str(config)), *words)


@pytest.mark.parametrize("args", [["--model-path", "/x" * 10000], ["--verl-dir", "/" + "y" * 300],
                                  ["--config", "/" + "y" * 300], ["--config", ""]])
def test_overlong_paths_are_one_line_not_oserror(args):
    assert_refused(cli("plan", *args))


# -- 7: names by their real grammars, and never an option --------------------------------------------

@pytest.mark.parametrize("good", [DEFAULT_IMAGE, "verlai/verl:vllm011.latest", "localhost:5000/a/b:tag", "ubuntu",
                                  "registry.example.com:443/team/img@sha256:" + "a" * 64, "[::1]:5000/x"])
def test_real_image_references_are_accepted(good):
    assert names.image_reference(good) == good


@pytest.mark.parametrize("bad", ["--privileged", "UPPER/x", "a:b:c", "x y", "img\n", "a//b", ""])
def test_invalid_image_references_are_refused(bad):
    with pytest.raises(names.NameProblem):
        names.image_reference(bad)


def test_names_follow_their_tools_grammars():
    assert names.container_name("verl-npu_2.a") and names.container_name("0123abcd")
    for bad in ("--rm", "a", "a b", "a/b", "-x", "x\ny"):
        with pytest.raises(names.NameProblem):
            names.container_name(bad)
    for good in ("node-1.cluster", "10.0.0.1", "::1", "fe80::1", "[::1]", "localhost"):
        assert names.host_name(good)
    for bad in ("-Eout.log", "not an ip;rm -rf", "a..b", "999.1.1.1", "-" * 3, "a_b", "x" * 64):
        with pytest.raises(names.NameProblem):
            names.host_name(bad)
    assert names.ssh_destination("root@node-1") and names.ssh_destination("node-1")
    with pytest.raises(names.NameProblem):
        names.ssh_destination("-oProxyCommand=x@node")
    for good in ("eth0", "enp189s0f0", "^docker,lo", "=eth0", "bond0.100"):
        assert names.interface_names(good)
    for bad in ("eth0\n", "a" * 16, "a/b", "eth:0", "-eth0", ".."):
        with pytest.raises(names.NameProblem):
            names.interface_names(bad)


def recording_docker(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/docker.calls\nexit 1\n")
    (bin_dir / "docker").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("args, words", [
    (["--image=--privileged", "--container=--rm"], ["image", "container", "option"]),
    (["--image", "quay.io/ascend/verl:v1", "--container", "bad name"], ["container"]),
    (["--image", "img\nx", "--container", "ok-name"], ["image"]),
])
def test_container_create_refuses_injected_names_before_docker_runs(tmp_path, args, words):
    env = recording_docker(tmp_path)
    result = subprocess.run([*VERL_BIN, "container", "create", *args, "--yes"], capture_output=True, text=True,
                            env={**os.environ, **env, "COLUMNS": "200"}, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(w in result.stderr for w in words), result.stderr
    assert not (tmp_path / "docker.calls").exists()  # docker was never called


def test_docker_gets_the_image_after_double_dash_and_the_name_attached():
    from verl_deploy.backends.container_setup import run_argv
    from verl_deploy.sources import resolve

    spec = resolve(flags={"container": "verl-npu"}, environ={})
    argv = run_argv(spec, spec.container, spec.image, devices=[])  # the device arguments: test_docker_real.py
    assert "--name=verl-npu" in argv and argv[-4:] == ["--", spec.image, "sleep", "infinity"]


@pytest.mark.parametrize("args, field", [
    (["--nodes", "-Eout.log,h2"], "nodes"), (["--run-dir", "-"], "run_dir"), (["--ckpts-dir", "-x"], "ckpts_dir"),
    (["--master-addr", "not an ip;rm -rf"], "master_addr"), (["--socket-ifname", "eth0\tx"], "socket_ifname"),
    (["--swanlab-workspace", "team\nx"], "swanlab_workspace"), (["--container", "c\n"], "container"),
    (["--image", "img\t"], "image"), (["--nodes", "h1\n,h2"], "nodes"), (["--swanlab-host", "ftp://x"], "swanlab_host"),
])
def test_names_with_a_leading_dash_or_control_characters_are_refused(args, field):
    assert_refused(cli("plan", *args), field)


@pytest.mark.parametrize("args, field, char", [
    (["--experiment-name", "run\u202egnp.exe"], "experiment_name", "U+202E"),  # right-to-left override
    (["--model-path", "/models/Qwen3\u2066-8B"], "model_path", "U+2066"),  # left-to-right isolate
    (["--project-name", "team\u0085x"], "project_name", "U+0085"),  # C1 next-line
    (["--container", "verl\u200f"], "container", "U+200F"),  # right-to-left mark
])
def test_names_that_would_display_as_another_name_are_refused(args, field, char):
    """A text-direction or C1 control character makes plan, the scripts and the logs show another name than the one
    used; it is refused naming the code point, and names in any script (CJK, accents) still pass."""
    assert_refused(cli("plan", *args), field, char, "retype")
    assert cli("plan", "--experiment-name", "模型-实验-é").exit_code == 0


# -- 11: values that were silently accepted -----------------------------------------------------------

@pytest.mark.parametrize("args, env, field", [
    (["--mask", ""], {}, "mask"),
    (["--features", "offload,-offload"], {}, "features"),
    ([], {"ENABLE_OFFLOAD": "maybe"}, "ENABLE_OFFLOAD"),
    (["--swanlab-api-key", ""], {}, "swanlab_api_key"),
    ([], {"SWANLAB_API_KEY": "a b"}, "swanlab_api_key"),
    (["--nnodes", "2"], {}, "master_addr"),
    # an explicit loopback head is allowed with a warning: several Ray nodes on one host (the tests' own bed)
    (["--project-name", "a\nb"], {}, "project_name"),
    (["--nodes", ""], {}, "nodes"),
    (["--features", ""], {}, "features"),
    (["--features", ",,"], {}, "features"),
])
def test_values_that_used_to_pass_silently_are_refused(args, env, field):
    assert_refused(cli("plan", *args, env=env), field)


def test_output_dir_empty_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_refused(cli("generate", "--output-dir", ""), "output_dir")
    assert list(tmp_path.iterdir()) == []


def test_diagnose_refuses_a_negative_idle_exit(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("")
    result = cli("diagnose", str(log), "--follow", "--idle-exit", "-1")
    assert result.exit_code == 2 and "--idle-exit" in result.output and "fix:" in result.output


def make_run(run_id: str, attempts: int = 1, exit_code: int | None = 137, failure: dict | None = None) -> RunRecord:
    from verl_deploy.runs.record import runs_dir

    record = RunRecord(id=run_id, backend="local", spec={"model_path": "/m", "device": "npu"}, state="failed",
                       attempts=[Attempt(n=i + 1, features=[], reason="launch", exit_code=exit_code,
                                         log=str(runs_dir() / run_id / f"attempt-{i + 1}" / "train.log"))
                                 for i in range(attempts)],
                       failure=failure)
    record.directory.mkdir(parents=True, exist_ok=True)
    record.save()
    return record


def test_an_ambiguous_run_prefix_lists_the_matches():
    make_run("20990101-000000-aaaa")
    make_run("20990101-000000-aaab")
    assert_refused(cli("status", "20990101-000000-aaa"), "matches 2 runs", "20990101-000000-aaaa", "more of the run id")


def test_logs_attempt_out_of_range_says_why():
    make_run("20990102-000000-bbbb", attempts=2)
    assert_refused(cli("logs", "20990102-000000-bbbb", "--attempt", "0"), "--attempt", "count from 1")
    assert_refused(cli("logs", "20990102-000000-bbbb", "--attempt", "99"), "attempts 1-2, not 99", "--attempt 2")


def test_a_killed_trainer_shows_the_signal_not_none():
    make_run("20990103-000000-cccc", exit_code=137, failure={"class": None, "cause": None})
    result = cli("status", "20990103-000000-cccc")
    assert "failure: killed by SIGKILL" in result.output and "failure: None" not in result.output, result.output


# -- 12: generate writes the set atomically, under a lock --------------------------------------------

def generate_proc(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*VERL_BIN, "generate", "--output-dir", str(out), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})


def test_two_generates_into_one_directory_take_turns_and_the_second_refuses(tmp_path):
    out = tmp_path / "scripts"
    held = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # both must wait here, then race for the same directory
    try:
        first, second = generate_proc(out, "--train-steps", "4"), generate_proc(out, "--train-steps", "5")
        time.sleep(6)  # both have prepared their plans and are waiting for the lock
        assert first.poll() is None and second.poll() is None
    finally:
        os.close(held)
    results = [(p.wait(timeout=120), p.communicate()) for p in (first, second)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    refused = next(err for code, (_, err) in results if code == 1)
    assert "already has" in refused and "--force" in refused
    steps = json.loads((out / "plan.json").read_text())["spec"]["train_steps"]
    winner = next(i for i, (code, _) in enumerate(results) if code == 0)
    assert steps == (4, 5)[winner]  # the files are the winner's, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]  # no staging directory left


@pytest.fixture()
def tiny_fs(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_leaves_the_old_set_whole(tiny_fs):
    out = tiny_fs / "scripts"
    first = subprocess.run([*VERL_BIN, "generate", "--output-dir", str(out), "--train-steps", "4"],
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    filler = tiny_fs / "filler"
    with open(filler, "wb", buffering=0) as handle:  # fill the file system to the last block
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    # two pages free: room for the new start_verl.sh and run_training.sh one by one, not for plan.json
    os.truncate(filler, filler.stat().st_size - 8192)
    again = subprocess.run([*VERL_BIN, "generate", "--output-dir", str(out), "--train-steps", "5", "--force"],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert again.returncode == 1 and "No space left on device" in again.stderr and "nothing was changed" in again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tiny_fs.iterdir()) == ["filler", "scripts"]  # no staging directory left


# -- 14: secrets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["ab", "abcd", "abcdefghijk"])
def test_a_short_key_is_never_shown_even_in_part(tmp_path, key):
    out = tmp_path / "s"
    env = {"SWANLAB_API_KEY": key}
    result = cli("generate", "--output-dir", str(out), "--swanlab", "yes", "--swanlab-host", "http://10.0.0.1:8000",
                 env=env)
    assert result.exit_code == 0, result.output
    shown = cli("plan", "--swanlab", "yes", "--swanlab-host", "http://10.0.0.1:8000", env=env).output
    document = (out / "plan.json").read_text()
    assert document.count('"****"') == 1 and f"****{key[-2:]}" not in shown + document
    assert stat.S_IMODE((out / "plan.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "swanlab.env").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "start_verl.sh").stat().st_mode) == 0o755


# -- issue 22, 5: secrets and inputs that passed silently (real CLI processes, real files) ------------------

def _refused_line(result, *words: str) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    joined = "\n".join(lines)
    assert lines and all(" — fix: " in line for line in lines), result.stdout + result.stderr
    for word in words:
        assert word in joined, joined
    return joined


def test_an_api_key_in_the_config_file_is_refused_and_never_used(tmp_path):
    from conftest import run_cli

    key = "sk-" + "7" * 30
    config = tmp_path / "run.yaml"
    config.write_text(f"train_steps: 5\nswanlab_api_key: {key}\n")
    out = tmp_path / "out"
    result = run_cli("generate", "--config", str(config), "--output-dir", str(out), "--swanlab", "yes")
    line = _refused_line(result, "swanlab_api_key", "swanlab login", "SWANLAB_API_KEY")
    assert key not in result.stdout + result.stderr and key not in line
    assert not out.exists()


def test_a_key_set_twice_in_the_config_file_names_both_lines(tmp_path):
    from conftest import run_cli

    config = tmp_path / "run.yaml"
    config.write_text("train_steps: 5\nbatch_size: 8\n# later\ntrain_steps: 7\n")
    _refused_line(run_cli("plan", "--config", str(config)), "'train_steps' is set twice, at line 1 and at line 4")


def test_a_node_named_twice_is_refused():
    from conftest import run_cli

    _refused_line(run_cli("plan", "--nodes", "h1,h2,h1"), "nodes", "h1 named twice")


@pytest.mark.parametrize("override, name", [
    ("+trainer.x=${oc.env:SWANLAB_API_KEY}", "SWANLAB_API_KEY"),
    ("+trainer.note=run-${oc.env:HF_TOKEN,none}", "HF_TOKEN"),
    ("++trainer.y=${oc.env:'DB_PASSWORD'}", "DB_PASSWORD"),
])
def test_an_override_interpolating_a_secret_is_refused_before_anything_is_written(tmp_path, override, name):
    from conftest import run_cli

    out = tmp_path / "out"
    result = run_cli("generate", "-o", override, "--output-dir", str(out), env={name: "s3cr3t-value-123"})
    _refused_line(result, "overrides", name, "training log")
    assert "s3cr3t-value-123" not in result.stdout + result.stderr and not out.exists()


def test_a_non_secret_interpolation_still_passes():
    from conftest import run_cli

    result = run_cli("plan", "-o", "+trainer.note=${oc.env:HOME}")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("override, words", [
    ("actor_rollout_ref.rollout.val_kwargs.top_p=7", ["top_p must be in (0, 1]"]),
    ("actor_rollout_ref.rollout.val_kwargs.top_p=abc", ["declares actor_rollout_ref.rollout.val_kwargs.top_p as float",
                                                        "'abc' is text"]),
    ("actor_rollout_ref.rollout.top_k=-3", ["top_k must be -1 or 0"]),
    ("actor_rollout_ref.rollout.val_kwargs.temperature=-0.5", ["temperature must be non-negative"]),
    ("actor_rollout_ref.rollout.val_kwargs.top_p=0", ["top_p must be in (0, 1]"]),
    ("actor_rollout_ref.rollout.val_kwargs.n=1.5", ["declares actor_rollout_ref.rollout.val_kwargs.n as int",
                                                    "a whole number"]),
    ("trainer.log_val_generations=yes", ["declares trainer.log_val_generations as", "is text"]),
    ("actor_rollout_ref.rollout.val_kwargs.do_sample=1", ["as bool", "give actor_rollout_ref.rollout.val_kwargs.do_sample "
                                                          "true or false"]),
])
def test_override_values_are_checked_against_the_type_verl_declares(override, words):
    from conftest import run_cli

    _refused_line(run_cli("plan", "-o", override), "override", *words)


def test_override_values_of_the_right_type_and_range_pass():
    from conftest import run_cli

    result = run_cli("plan", "-o", "actor_rollout_ref.rollout.val_kwargs.top_p=0.95", "-o",
                     "actor_rollout_ref.rollout.val_kwargs.top_k=0", "-o", "trainer.total_epochs=3",
                     "-o", "actor_rollout_ref.rollout.top_k=-1", "-o", "trainer.total_epochs=${oc.env:EPOCHS,3}")
    assert result.returncode == 0, result.stdout + result.stderr
