"""Inputs that used to end in a traceback: each is now one line naming the problem, and a non-zero exit."""

from __future__ import annotations

import json

from conftest import run_cli


def one_line_refusal(result, *words: str) -> str:
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines and all(word in lines[0] for word in words), result.stderr[-2000:]
    return lines[0]


def test_a_5000_digit_integer_in_the_config_file_is_one_line(tmp_path):
    config = tmp_path / "verl-deploy.yaml"
    config.write_text("train_steps: " + "9" * 5000 + "\n")
    line = one_line_refusal(run_cli("plan", "--config", str(config)), "config", str(config), "4300 digits")
    assert len(line) < 400  # the number itself is not echoed


def test_a_state_or_cache_dir_that_is_a_regular_file_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    for command in (["runs"], ["status"], ["logs"], ["plan"], ["generate", "--output-dir", str(tmp_path / "out")]):
        result = run_cli(*command, env={"VERL_DEPLOY_STATE_DIR": str(blocker), "HOME": str(tmp_path)})
        line = one_line_refusal(result, str(blocker), "not a directory", "VERL_DEPLOY_STATE_DIR")
        assert "no runs yet" not in result.stdout + line, command
    json_out = run_cli("runs", "--json", env={"VERL_DEPLOY_STATE_DIR": str(blocker)})
    assert json.loads(json_out.stdout)["ok"] is False
    cached = run_cli("plan", env={"VERL_DEPLOY_CACHE_DIR": str(blocker / "sub"), "HOME": str(tmp_path)})
    one_line_refusal(cached, str(blocker), "VERL_DEPLOY_CACHE_DIR")
    xdg = run_cli("plan", env={"XDG_CACHE_HOME": str(blocker), "VERL_DEPLOY_CACHE_DIR": "", "HOME": str(tmp_path)})
    one_line_refusal(xdg, "XDG_CACHE_HOME")


def test_a_path_with_a_byte_that_is_not_utf8_is_one_line_and_writes_nothing(tmp_path):
    bad = str(tmp_path) + "/run\udcff"  # the byte 0xff as Python receives it from argv
    out = tmp_path / "out"
    for flag in ("--run-dir", "--model-path", "--ckpts-dir"):
        result = run_cli("generate", "--output-dir", str(out), flag, bad)
        one_line_refusal(result, flag.lstrip("-").replace("-", "_"), "0xff", "not UTF-8")
        assert not out.exists()
