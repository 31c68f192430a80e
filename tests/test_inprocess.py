"""The tests' in-process CLI (tests/inprocess.py) gives what the installed entry point gives: same exit code,
stdout and stderr, a child process's output included, and an escaped exception as a traceback on stderr (so a
test that looks for tracebacks can still fail)."""

from __future__ import annotations

import os

import pytest

from conftest import FIXTURES, run_cli
from inprocess import run_in_process

CASES = [
    ("plan",),
    ("plan", "--json"),
    ("plan", "--max-response-length", "lots"),  # a refusal: one line, exit 2
    ("features", "--mask", "1010000", "--json"),
    ("diagnose", str(FIXTURES / "failures" / "S-CANN-01.log"), "--json"),
    ("diagnose", str(FIXTURES / "failures" / "S-CANN-01.log")),
    ("bogus",),
]


@pytest.mark.parametrize("args", CASES, ids=["plan", "plan-json", "refusal", "features-mask", "diagnose-json", "diagnose",
                                             "unknown-command"])
def test_in_process_is_what_the_entry_point_gives(args, tmp_path):
    inside = run_cli(*args, cwd=tmp_path)
    outside = run_cli(*args, cwd=tmp_path, subprocess_only=True)
    assert (inside.returncode, inside.stdout, inside.stderr) == (outside.returncode, outside.stdout, outside.stderr)


def test_environment_and_directory_are_restored(tmp_path):
    before, cwd = dict(os.environ), os.getcwd()
    run_cli("plan", env={"VERL_DEPLOY_TEST_MARKER": "1"}, cwd=tmp_path)
    assert dict(os.environ) == before and os.getcwd() == cwd


def test_an_escaped_exception_is_a_traceback_on_stderr(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("verl_deploy.cli.output.print_json", broken)  # features imports it when it runs
    result = run_in_process(["features", "--json"], {}, None, None)
    assert result.returncode == 1
    assert "Traceback (most recent call last):" in result.stderr and "RuntimeError: boom" in result.stderr


def test_a_child_process_output_is_captured(tmp_path):
    """What a process the command starts writes to the inherited descriptors lands in stdout/stderr, as in a pipe."""
    script = tmp_path / "start_verl.sh"
    script.write_text("echo from-child; echo to-stderr >&2\n")
    from inprocess import _descriptors_captured, _read

    with _descriptors_captured() as (out, err):
        os.system(f"bash {script}")
    assert _read(out) == "from-child\n" and _read(err) == "to-stderr\n"


@pytest.mark.parametrize("args", [("status", "--json"), ("status", "nope"), ("logs", "nope"), ("launch", "--bogus")],
                         ids=["status-json", "status", "logs", "launch-refusal"])
def test_a_forked_command_is_what_the_entry_point_gives(args, tmp_path):
    """status, logs and launch own their process: the tests run them in a forked child (inprocess.run_forked)."""
    env = {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state")}
    forked = run_cli(*args, env=env, cwd=tmp_path)
    outside = run_cli(*args, env=env, cwd=tmp_path, subprocess_only=True)
    assert forked.returncode != 0  # each case is a user's mistake
    assert (forked.returncode, forked.stdout, forked.stderr) == (outside.returncode, outside.stdout, outside.stderr)


def test_a_forked_command_that_crashes_shows_its_traceback_and_leaves_this_process_as_it_was(tmp_path, monkeypatch):
    from inprocess import run_forked

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    import verl_deploy.cli.status_cmd as status_cmd

    monkeypatch.setattr(status_cmd, "load", broken)  # status's first call; put back after the test, as it found it
    before, cwd = dict(os.environ), os.getcwd()
    result = run_forked(["status", "--json"], {**os.environ, "VERL_DEPLOY_STATE_DIR": str(tmp_path)}, None,
                        tmp_path, timeout=60)
    assert dict(os.environ) == before and os.getcwd() == cwd
    assert result.returncode == 1, result
    assert "Traceback (most recent call last):" in result.stderr and "RuntimeError: boom" in result.stderr
