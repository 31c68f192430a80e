"""The launch stage (runs/launch.py) compiles the Plan once: the Plan the gates checked and the confirmation showed
is the one written and started. Counted in the real `launch` process with the stand-in trainer; the run's
plan.json and scripts are those of that Plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_launch import trainer, wait_for  # noqa: F401  (trainer is a fixture)

COUNTING = """
import atexit, sys
import verl_deploy.pipeline as pipeline
compiled = []
real = pipeline.compile_plan
def counting(spec, profile):
    compiled.append(spec.train_steps)
    return real(spec, profile)
pipeline.compile_plan = counting
counted = sys.argv[1]
atexit.register(lambda: open(counted, "w").write(str(len(compiled))))
from verl_deploy.cli import main
sys.argv = ["verl-deploy", *sys.argv[2:]]
main()
"""


def launch_counting(trainer, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess, int]:
    count = tmp / "compiled"
    result = subprocess.run([sys.executable, "-c", COUNTING, str(count), "launch", *trainer["args"], *extra],
                            capture_output=True, text=True, timeout=240,
                            env={**os.environ, **trainer["env"], "COLUMNS": "200"})
    assert count.is_file(), result.stderr[-3000:]
    return result, int(count.read_text())


def test_a_launch_compiles_its_plan_once_and_starts_that_plan(trainer, tmp_path):
    result, compiled = launch_counting(trainer, tmp_path, "--json", "--no-estimate")
    assert result.returncode == 0, result.stderr[-3000:]
    assert compiled == 1  # the gates' Plan is confirmed, written and started (it used to be compiled again to write)
    run = json.loads(result.stdout)
    scripts = Path(run["attempts"][0]["log"]).parent / "scripts"
    plan = json.loads((scripts / "plan.json").read_text())
    assert plan["spec"]["train_steps"] == 8 and (scripts / "run_training.sh").is_file()
    final = wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"))
    assert final["state"] == "succeeded"


def test_a_dry_run_compiles_once_and_starts_nothing(trainer, tmp_path):
    result, compiled = launch_counting(trainer, tmp_path, "--json", "--no-estimate", "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert compiled == 1 and json.loads(result.stdout)["ok"] is True
    runs = Path(trainer["env"]["VERL_DEPLOY_STATE_DIR"]) / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if p.is_dir()]
