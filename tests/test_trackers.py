"""Trackers besides SwanLab (--logger): mapped to verl's trainer.logger, their credentials handed over in a
0600 trackers.env only (never argv, scripts, plan.json or output), refused early when verl would stop at start,
and the report links the run in each tracker that printed where it is."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli

KEY = "wandb-$ecret 'quoted' value-0123456789"  # shell metacharacters: the file must hand it over exactly


def env_for(tmp_path: Path, **extra: str) -> dict:
    clean = {k: "" for k in os.environ if k.startswith(("WANDB_", "MLFLOW_", "CLEARML_", "VOLC_", "MLP_"))}
    return {**clean, "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config"), "VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"),
            **extra}


def logger_override(document: dict) -> list[str]:
    return [o for o in document["overrides"] if o.startswith("trainer.logger=")]


def test_logger_maps_to_trainer_logger_and_the_override_is_read_the_same_way(tmp_path):
    env = env_for(tmp_path, WANDB_API_KEY=KEY)
    flag = json.loads(run_cli("plan", "--logger", "console,wandb", "--json", env=env).stdout)
    override = run_cli("plan", "-o", "trainer.logger=[console,wandb]", "--json", env=env)
    assert override.returncode == 0, override.stdout[-2000:]
    assert logger_override(flag) == logger_override(json.loads(override.stdout)) == ["trainer.logger=[console,wandb]"]
    assert json.loads(override.stdout)["sources"]["logger"] == "flag --override"
    swanlab = json.loads(run_cli("plan", "--logger", "wandb", "--swanlab", "yes", "--swanlab-host", "http://10.0.0.1:8000",
                                 "--json", env=env).stdout)
    assert logger_override(swanlab) == ["trainer.logger=[wandb,swanlab]"]  # SwanLab keeps its own flags and flow
    default = json.loads(run_cli("plan", "--json", env=env).stdout)
    assert logger_override(default) == ["trainer.logger=[console]"]


def test_an_unknown_tracker_is_one_line_naming_the_ones_there_are(tmp_path):
    result = run_cli("plan", "--logger", "console,neptune", env=env_for(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "neptune is not a tracker verl-deploy sets up (one of: console, wandb, swanlab, mlflow, tensorboard, " \
           "clearml, vemlp_wandb, file)" in result.stderr + result.stdout


def test_a_credential_reaches_the_run_only_through_the_0600_trackers_env(tmp_path):
    out = tmp_path / "scripts"
    result = run_cli("generate", "--logger", "console,wandb,mlflow", "--output-dir", str(out),
                     env=env_for(tmp_path, WANDB_API_KEY=KEY, MLFLOW_TRACKING_URI="http://10.0.0.5:5000"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert KEY not in result.stdout + result.stderr
    secret = out / "trackers.env"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    for name in ("start_verl.sh", "run_training.sh", "plan.json"):
        assert "ecret" not in (out / name).read_text(), name
    assert json.loads((out / "plan.json").read_text())["trackers"] == {
        "logger": ["console", "wandb", "mlflow"], "environment": ["MLFLOW_TRACKING_URI", "WANDB_API_KEY"]}
    assert '-f "$HERE/trackers.env"' in (out / "start_verl.sh").read_text()
    # what start_verl.sh does with it, in a real bash: the exact value, metacharacters and all
    shown = subprocess.run(["bash", "-c", f'set -a; source "{secret}"; printf %s "$WANDB_API_KEY"'],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert shown.stdout == KEY
    plain = tmp_path / "plain"
    run_cli("generate", "--output-dir", str(plain), env=env_for(tmp_path, WANDB_API_KEY=KEY))
    assert not (plain / "trackers.env").exists() and "trackers" not in (plain / "start_verl.sh").read_text()


def test_a_tracker_verl_cannot_start_without_is_refused_early_and_the_user_file_supplies_it(tmp_path):
    env = env_for(tmp_path)
    result = run_cli("plan", "--logger", "console,vemlp_wandb", env=env)
    assert result.returncode == 1
    assert ("the vemlp_wandb tracker needs VOLC_ACCESS_KEY_ID, VOLC_SECRET_ACCESS_KEY, MLP_TRACKING_REGION: "
            "verl stops at start without them") in result.stdout + result.stderr
    saved = tmp_path / "config" / "trackers.env"
    saved.parent.mkdir(parents=True)
    saved.write_text("# volcengine\nVOLC_ACCESS_KEY_ID=ak-1\nexport VOLC_SECRET_ACCESS_KEY='sk 2'\nMLP_TRACKING_REGION=cn-beijing\n")
    saved.chmod(0o600)
    out = tmp_path / "scripts"
    result = run_cli("generate", "--logger", "console,vemlp_wandb", "--output-dir", str(out), env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (out / "trackers.env").read_text() == ("MLP_TRACKING_REGION=cn-beijing\nVOLC_ACCESS_KEY_ID=ak-1\n"
                                                  "VOLC_SECRET_ACCESS_KEY='sk 2'\n")
    warned = run_cli("plan", "--logger", "wandb", env=env)
    assert "the wandb tracker has no credential here (WANDB_API_KEY)" in warned.stdout + warned.stderr


def test_the_report_links_the_run_in_each_tracker_that_printed_it(tmp_path):
    pytest.importorskip("matplotlib", reason="the report needs the optional extra: pip install 'verl-deploy[report]'")
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "(TaskRunner pid=1) wandb: 🚀 View run dapo-qwen3 at: https://wandb.ai/team/verl/runs/ab12cd",
        "(TaskRunner pid=1) 🏃 View run dapo-qwen3 at: http://10.0.0.5:5000/#/experiments/1/runs/f00d",
        "(TaskRunner pid=1) ClearML results page: https://app.clear.ml/projects/p1/experiments/e1/output/log",
        "(TaskRunner pid=1) Saving tensorboard log to tensorboard_log/verl/dapo-qwen3.",
        "(TaskRunner pid=1) step:1 - critic/score/mean:0.1"]) + "\n")
    result = run_cli("report", str(log), "-o", str(tmp_path / "r"), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    page = Path(json.loads(result.stdout)["html"]).read_text()
    assert '<th>Weights &amp; Biases</th><td><a href="https://wandb.ai/team/verl/runs/ab12cd">' in page
    assert '<th>MLflow</th><td><a href="http://10.0.0.5:5000/#/experiments/1/runs/f00d">' in page
    assert '<th>ClearML</th><td><a href="https://app.clear.ml/projects/p1/experiments/e1/output/log">' in page
    assert "<th>TensorBoard log</th><td><code>tensorboard_log/verl/dapo-qwen3</code>" in page
    assert "<th>SwanLab</th><td>—</td>" in page  # a wandb link is not taken for SwanLab's
