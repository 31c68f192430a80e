"""`verl-deploy report`: HTML + PNGs from a real-format verl log and from a run with OOM retries, checked in a
real headless Chromium (Debian's): the page loads without errors, loads nothing from outside, and every plot
decodes to a real image. Screenshots go to the test's tmp dir (and are what docs/ shows).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from browser import chromium, load
from conftest import run_cli
from test_launch import launch as launch_with_check, trainer  # noqa: F401  (trainer is a fixture)
from verl_logs import HEADER, metric_line, progress_line

pytest.importorskip("matplotlib", reason="the report needs the optional extra: pip install 'verl-deploy[report]'")
OOM = ("(WorkerDict pid=5107) RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total "
       "capacity; 49.47 GiB already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch)")
GROUPS = {"reward", "lengths", "entropy", "actor", "timing", "validation", "other"}


def verl_log(path: Path, steps: int = 24) -> Path:
    """A verl 0.9-style log (numpy reprs) with validation every 8 steps, ending in a device OOM."""
    lines = [line.replace("{total}", "100") for line in HEADER]
    for step in range(1, steps + 1):
        metrics = metric_line(step, numpy_repr=True)
        if step % 8 == 0:
            metrics += f" - val-core/math_dapo/acc/mean@1:np.float64({0.2 + step / 100}) - val-aux/num_turns/mean:1.0"
        lines += [metrics, progress_line(step, 100)]
    lines += ["(WorkerDict pid=5107) Traceback (most recent call last):",
              "(WorkerDict pid=5107)   File \"/verl/verl/workers/megatron_workers.py\", line 711, in update_actor", OOM]
    path.write_text("\n".join(lines) + "\n")
    return path


def report(*args: str, env: dict | None = None):
    result = run_cli("report", *args, "--json", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_verl_log_gives_grouped_pngs_and_a_page_with_failure_and_configuration(tmp_path):
    written = report(str(verl_log(tmp_path / "train.log")), "--output", str(tmp_path / "out"))
    pngs = {Path(p).stem.split("-")[0] for p in written["pngs"]}
    assert pngs == GROUPS
    for png in written["pngs"]:
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(png).stat().st_size > 5000
    assert written["steps"] == 24 and written["metrics"] == 39 and written["failure"] == "device_oom"
    page = Path(written["html"]).read_text()
    assert "NPU out of memory" in page and "offload" in page  # the failure with its cause and fix
    assert "ppo_mini_batch_size" in page  # the configuration verl printed
    assert page.count("data:image/png;base64,") == len(written["pngs"])  # self-contained
    assert "http" not in page.replace("https://swanlab.cn/@rl-team/verl-dapo/runs/x1y2z3", "")


@pytest.mark.browser
@pytest.mark.skipif(chromium() is None, reason="no chromium here (apt-get install chromium; tests/install-services.sh installs it)")
def test_the_page_loads_in_a_real_browser_without_errors_and_every_plot_renders(tmp_path):
    written = report(str(verl_log(tmp_path / "train.log")), "--output", str(tmp_path / "out"))
    shot = tmp_path / "report.png"
    seen = load(Path(written["html"]), shot)
    assert seen.errors == []
    assert all(url.startswith(("data:", "file:")) for url in seen.requests), seen.requests
    assert len(seen.images) == len(written["pngs"])
    for image in seen.images:
        assert image["complete"] and image["width"] > 300 and image["height"] > 150, image
    assert seen.title.startswith("verl-deploy report: log ")
    assert "device_oom" in seen.text and "Reward and score" in seen.text
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_a_run_with_oom_retries_marks_the_attempts_on_the_step_axis(trainer, tmp_path):
    result = launch_with_check(trainer, "--skip-check", "--follow", "--json", env={"STANDIN_FAIL": "device_oom"})
    run = json.loads(result.stdout)
    assert run["state"] == "succeeded"
    written = report(run["id"], env=trainer["env"])
    assert Path(written["html"]).parent == Path(run["directory"]) / "report"
    attempts = [m for m in written["marks"] if m["kind"] == "attempt"]
    assert [(m["step"], m["label"].split(":")[0]) for m in attempts] == [(2, "attempt 2"), (4, "attempt 3")]
    assert any(m["kind"] == "failure" and m["label"].startswith("device_oom") for m in written["marks"])
    page = Path(written["html"]).read_text()
    assert "<th>features added</th>" in page and "<td>offload</td>" in page and "<td>recompute</td>" in page
    assert "trainer.total_training_steps=8" in page  # the Hydra overrides of the run


def test_a_file_without_metrics_still_gets_a_page_that_says_so(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"\x00\x01binary\xff\n")
    written = report(str(empty), "-o", str(tmp_path / "out"))
    assert written["pngs"] == [] and "no <code>step:N - key:value</code> metric lines" in Path(written["html"]).read_text()


def test_metric_values_near_the_float_limit_are_marked_not_plotted_and_the_report_is_written(tmp_path):
    """±1e308 overflows matplotlib's tick arithmetic: such values (and 1e400 = inf) are marked, the rest drawn."""
    from matplotlib.image import imread

    log = tmp_path / "b.log"
    log.write_text("step:1 - critic/score/mean:1e308\nstep:2 - critic/score/mean:-1e308\n"
                   "step:3 - critic/score/mean:0.5 - actor/grad_norm:1e400\n")
    result = run_cli("report", str(log), "-o", str(tmp_path / "r"), "--json")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    written = json.loads(result.stdout)
    assert written["metrics"] == 2 and len(written["pngs"]) == 2
    for png in written["pngs"]:
        assert imread(png).shape[0] > 100  # a real image, not an empty file
    assert Path(written["html"]).is_file()


def test_a_missing_file_or_run_is_one_line():
    result = run_cli("report", "/nonexistent/train.log")
    assert result.returncode == 1 and "is not a file" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("report", "nope")
    assert result.returncode == 1 and "no run 'nope'" in result.stderr


def test_the_cli_does_not_import_matplotlib_to_start():
    code = "import sys, verl_deploy.cli; assert 'matplotlib' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
