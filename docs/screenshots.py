"""Regenerate docs/live-view.png and docs/report.png from a run of the stand-in trainer.

    python docs/screenshots.py          # needs chromium (apt-get install chromium) and matplotlib

The run is the tests' stand-in (tests/standin_trainer.py, verl's log formats) with two device
OOMs, so the recovery shows, on the tests' fake Ascend host (tests/fakes: npu-smi printing a real
910B3 table), in a temporary state directory, so nothing of yours is touched. The live view is drawn by the same code as `status --watch` (views/
live.py) into an SVG with Rich, and Chromium turns the SVG and the report page into PNGs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DOCS = ROOT / "docs"
CLI = [sys.executable, "-m", "verl_deploy"]
STEPS = 80
TINY_MODEL = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
              "vocab_size": 1000, "torch_dtype": "bfloat16"}


def host(tmp: Path) -> tuple[dict, list[str]]:
    """The fake Ascend host and the stand-in as verl's DAPO entry; returns (environment, launch args)."""
    model = tmp / "mnt" / "models" / "Qwen3-8B"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(TINY_MODEL))
    data = tmp / "mnt" / "data"
    data.mkdir(parents=True)
    shutil.copy(TESTS / "fixtures" / "dapo-math-17k.SYNTHETIC.parquet", data / "dapo-math-17k.parquet")
    shutil.copy(TESTS / "fixtures" / "aime-2024.SYNTHETIC.parquet", data / "aime-2024.parquet")
    verl = tmp / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(TESTS / "standin_trainer.py", verl / "recipe" / "dapo" / "main_dapo.py")
    env = {**os.environ, "PATH": f"{TESTS / 'fakes'}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "FAKE_NPU_SMI": str(TESTS / "fixtures" / "hw" / "npu-smi-910b3-8npu-busy-container.txt"),
           "VERL_DEPLOY_STATE_DIR": str(tmp / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp / "config"),
           "HOME": str(tmp / "home"), "STANDIN_STEP_SECONDS": "0.5", "COLUMNS": "140",
           "STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "12"}  # two OOM retries: offload, then recompute
    args = ["--yes", "--skip-check", "--backend", "local", "--run-dir", str(verl), "--ckpts-dir", str(tmp / "ckpts"),
            "--model-path", str(model), "--train-file", str(data / "dapo-math-17k.parquet"),
            "--test-file", str(data / "aime-2024.parquet"), "--train-steps", str(STEPS), "--save-freq", "4"]
    return env, args


def status(run_id: str, env: dict) -> dict:
    return json.loads(subprocess.run([*CLI, "status", run_id, "--json"], capture_output=True, text=True, env=env).stdout)


def chromium_png(page: Path, out: Path, width: int, height: int) -> None:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        subprocess.run([shutil.which("chromium") or "chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-quic", "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", f"--screenshot={out}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def live_view_svg(run_id: str, env: dict, out: Path) -> tuple[int, int]:
    """The frame `status --watch` draws, as an SVG (same render code, Rich's SVG export)."""
    os.environ.update({k: v for k, v in env.items() if k != "COLUMNS"})  # state dir, fake npu-smi on PATH
    from rich.console import Console

    from verl_deploy.runs.record import RunRecord
    from verl_deploy.views.devices import read_devices
    from verl_deploy.views.live import Follow, render

    record = RunRecord.load(run_id)
    follow = Follow(record)
    follow.refresh()
    console = Console(record=True, width=140, force_terminal=True, color_system="truecolor", file=open(os.devnull, "w"))
    console.print(render(follow, read_devices(record), 140))
    svg = console.export_svg(title=f"verl-deploy status {run_id} --watch")
    out.write_text(svg)
    width, height = (int(float(v)) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
    return width, height


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="verl-deploy-docs-"))
    env, args = host(tmp)
    run = json.loads(subprocess.run([*CLI, "launch", *args, "--json"], capture_output=True, text=True, env=env,
                                    check=True).stdout)
    run_id = run["id"]
    try:
        deadline = time.monotonic() + 120
        while status(run_id, env)["step"] < 24 or len(status(run_id, env)["attempts"]) < 3:
            assert time.monotonic() < deadline, "the stand-in run did not get going"
            time.sleep(0.5)
        width, height = live_view_svg(run_id, env, tmp / "live.svg")
        chromium_png(tmp / "live.svg", DOCS / "live-view.png", width, height)
        while status(run_id, env)["state"] == "running":
            time.sleep(0.5)
        subprocess.run([*CLI, "report", run_id, "--output", str(tmp / "report")], check=True, env=env,
                       capture_output=True)
        chromium_png(tmp / "report" / "report.html", DOCS / "report.png", 1300, 1900)
    finally:
        subprocess.run([*CLI, "stop", run_id], capture_output=True, env=env)
    print(f"wrote {DOCS / 'live-view.png'} and {DOCS / 'report.png'}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
