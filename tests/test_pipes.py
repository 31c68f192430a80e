"""Output read by a program: off a terminal no line ends in padding spaces (Rich pads every table cell to the widest
row; a log line of 900 characters in one row padded all the others to it), on a terminal it still fits the width."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pexpect

from conftest import VERL_BIN, run_cli
from test_launch import trainer  # noqa: F401  (a fixture)
from test_report import verl_log


def padded(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.endswith(" ")]


def test_diagnose_and_check_in_a_pipe_end_no_line_in_spaces(tmp_path, npu_host):
    log = verl_log(tmp_path / "train.log")
    env = {**os.environ, **npu_host["env"]}
    env.pop("COLUMNS", None)
    for args in (["diagnose", str(log)], ["check", "--search-root", str(npu_host["root"])]):
        result = subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=env, timeout=120)
        assert result.stdout.strip(), (args, result.stderr[-1000:])
        assert padded(result.stdout) == [] and padded(result.stderr) == [], args
    long_line = subprocess.run([*VERL_BIN, "diagnose", str(log)], capture_output=True, text=True, env=env).stdout
    assert "NPU out of memory. Tried to allocate 5.03 GiB" in long_line  # the long evidence line whole, unwrapped


def test_diagnose_in_a_terminal_still_fits_its_width(tmp_path):
    log = verl_log(tmp_path / "train.log")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child = pexpect.spawn(VERL_BIN[0], [*VERL_BIN[1:], "diagnose", str(log)], env={**env, "TERM": "xterm"},
                          encoding="utf-8", dimensions=(60, 100), timeout=60)
    text = child.read()
    child.close()
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).split("\r\n")
    assert "device_oom" in text and max(len(line) for line in lines) <= 100


def test_logs_errors_reads_every_attempt_not_only_the_last(trainer):
    from test_launch import launch
    from conftest import run_cli
    import json

    run = json.loads(launch(trainer, "--skip-check", "--follow", "--json", env={"STANDIN_FAIL": "device_oom"}).stdout)
    assert run["state"] == "succeeded" and len(run["attempts"]) == 3
    shown = run_cli("logs", run["id"], "--errors", env=trainer["env"]).stdout
    headers = re.findall(r"^--- attempt (\d): ", shown, re.M)
    assert headers == ["1", "2", "3"], shown[-2000:]
    per_attempt = re.split(r"^--- attempt \d: .*$", shown, flags=re.M)[1:]
    assert ["NPU out of memory" in part for part in per_attempt] == [True, True, False]  # the two OOMs recovery fixed
    assert padded(shown) == []


def test_plans_note_on_where_it_differs_from_verls_scripts_is_one_short_line(tmp_path):
    from conftest import run_cli

    shown = run_cli("plan", env={"VERL_DEPLOY_STATE_DIR": str(tmp_path)}).stdout
    note = next(line for line in shown.splitlines() if line.startswith("info: mode: differs from verl's own scripts"))
    assert len(note) < 340 and "filter_groups on" in note and "gpu_memory_utilization 0.6 not 0.9" in note


def test_generate_says_what_it_wrote_and_what_changed_not_every_note_again(tmp_path):
    """#27.7: a second generate names which files changed; plan's notes are counted, not printed again."""
    out = tmp_path / "scripts"
    first = run_cli("generate", "--output-dir", str(out))
    assert first.returncode == 0, first.stderr[-2000:]
    assert "wrote plan.json, run_training.sh, start_verl.sh to" in first.stdout
    assert "info:" not in first.stdout + first.stderr and "note(s) on the plan" in first.stdout
    same = run_cli("generate", "--output-dir", str(out), "--force")
    assert "plan.json (unchanged), run_training.sh (unchanged), start_verl.sh (unchanged)" in same.stdout
    bigger = run_cli("generate", "--output-dir", str(out), "--force", "--batch-size", "64", "--json")
    assert json.loads(bigger.stdout)["changes"] == {"plan.json": "changed", "run_training.sh": "changed",
                                                    "start_verl.sh": "unchanged"}


def test_plan_fits_a_screen_and_plan_all_shows_every_field_and_override(tmp_path):
    """#27.7: the default plan is the deciding values, what was set, the features on, the memory per phase and
    the command's first line (a 120x60 terminal, 50 lines in a pipe); --all is every field and every override."""
    from verl_deploy.views.spec_rows import SECTIONS

    env = {"VERL_DEPLOY_STATE_DIR": str(tmp_path)}
    document = json.loads(run_cli("plan", "--json", "--train-steps", "7", env=env).stdout)
    short = run_cli("plan", "--train-steps", "7", env=env)
    assert short.returncode == 0, short.stderr[-2000:]
    lines = short.stdout.splitlines()
    assert len(lines) <= 50, short.stdout
    rows = {line.split()[0]: line for line in lines if line.strip()}
    assert "7" in rows["train_steps"] and "flag --train-steps" in rows["train_steps"]  # what was set, with its source
    assert "0.6" in rows["gpu_memory_utilization"] and "vllm-ascend" in rows["gpu_memory_utilization"]  # and why
    assert "clip_ratio_high" not in rows and "swanlab_workspace" not in rows  # defaults that decide nothing here
    assert f"recipe.dapo.main_dapo --config-name=dapo_megatron_trainer + {len(document['overrides'])} overrides" in short.stdout
    assert not [o for o in document["overrides"] if o in short.stdout]  # the overrides themselves: --all
    assert "peak 58.3 GiB in rollout" in short.stdout and "plan --all" in lines[-1]

    full = run_cli("plan", "--all", "--train-steps", "7", env=env).stdout
    starts = {line.split()[0] for line in full.splitlines() if line.strip()}
    assert [n for _, names in SECTIONS for n in names if n not in starts] == []
    assert [o for o in document["overrides"] if f"    {o} \\" not in full] == []

    screen_env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    child = pexpect.spawn(VERL_BIN[0], [*VERL_BIN[1:], "plan"], env={**screen_env, **env, "TERM": "xterm"},
                          encoding="utf-8", dimensions=(200, 120), timeout=60)
    import pyte

    screen = pyte.Screen(120, 200)
    pyte.Stream(screen).feed(child.read())
    child.close()
    used = max(i for i, line in enumerate(screen.display) if line.strip()) + 1
    assert used <= 60, "\n".join(screen.display[:used])
