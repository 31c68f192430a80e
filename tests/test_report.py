"""`verl-deploy report`: HTML + SVG plots from a real-format verl log and from a run with OOM retries, checked in
a real headless Chromium (Debian's): the page loads without errors, loads nothing from outside, and every plot's
y tick labels, read back from the laid-out page, are whole, inside the plot and the values at their heights.
Screenshots go to the test's tmp dir (and are what docs/ shows).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from browser import chromium, load
from conftest import run_cli, skip_module_without
from test_launch import launch as launch_with_check, trainer  # noqa: F401  (trainer is a fixture)
from verl_logs import HEADER, healthy_lines, metric_line, progress_line

skip_module_without("matplotlib", reason="the report needs the optional extra: pip install 'verl-deploy[report]'")
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


# For each plot: its key, its box, each y tick (the tick mark's height in the SVG, its label, the label's laid-out box),
# the y axis label, the curve's path and the marks drawn (matplotlib's <g id> of each, see views/curves.py).
READ_PLOTS = """JSON.stringify([...document.querySelectorAll('figure[data-key]')].map(f => {
  const svg = f.querySelector('svg'), box = svg.getBoundingClientRect();
  const rect = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  const ticks = [...svg.querySelectorAll('g[id^="ytick_"]')].map(g => ({
    y: parseFloat(g.querySelector('use').getAttribute('y')), label: g.querySelector('text').textContent,
    box: rect(g.querySelector('text').getBoundingClientRect())}));
  const axis = svg.querySelector('g[id="matplotlib.axis_2"]');
  const texts = [...axis.querySelectorAll(':scope > g[id^="text_"] text')].map(t => t.textContent);
  const curve = svg.querySelector('g[id$="-curve"] path');
  return {key: f.dataset.key, box: rect(box), ticks, ylabel: texts, curve: curve ? curve.getAttribute('d') : null,
          marks: [...svg.querySelectorAll('g[id*="-mark-"]')].map(g => g.id.split('-mark-')[1].split('-')[0]),
          mark_colours: [...svg.querySelectorAll('g[id*="-mark-"] path')].map(p => p.style.stroke)};
}))"""


# The configuration section as the browser lays it out: each block's title and its rows' cells.
READ_CONFIG = """JSON.stringify([...document.querySelectorAll('.config.columns > div')].map(d => ({
  section: d.querySelector('h3').textContent,
  rows: [...d.querySelectorAll('tr')].map(tr => [...tr.children].map(c => c.textContent))})))"""


def number(label: str) -> float:
    return float(label.replace("\u2212", "-"))


def curve_values(plot: dict) -> list[float]:
    """The curve's points as values, by the y tick labels: the label at each tick mark's height, interpolated."""
    ticks = sorted((t["y"], number(t["label"])) for t in plot["ticks"])
    (y0, v0), (y1, v1) = ticks[0], ticks[-1]
    heights = [float(y) for _, y in re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", plot["curve"] or "")]
    return [v0 + (h - y0) * (v1 - v0) / (y1 - y0) for h in heights]


def ranged_log(path: Path, steps: int = 21) -> tuple[Path, dict[str, list[float]]]:
    """Metrics whose tick labels a cut-off or offset label would misstate: 900..1300 tokens, a flat 0.300 s step,
    negative scores, 1.2e9 tokens, and validation every 5 steps with verl's wrapped `Final validation metrics`."""
    data: dict[str, list[float]] = {k: [] for k in ("response_length/mean", "timing_s/step", "critic/score/mean",
                                                    "perf/total_num_tokens", "val-core/math_dapo/acc/mean@1")}
    lines = []
    for step in range(1, steps + 1):
        values = {"response_length/mean": 900 + 400 * (step - 1) / (steps - 1), "timing_s/step": 0.3,
                  "critic/score/mean": -0.5 + 0.75 * (step - 1) / (steps - 1), "perf/total_num_tokens": 1.2e9 + 2e7 * step}
        if step % 5 == 0 or step == steps:
            values["val-core/math_dapo/acc/mean@1"] = 0.25 + step / 200
        for key, value in values.items():
            data[key].append(value)
        lines.append(f"(TaskRunner pid=7) step:{step} - " + " - ".join(f"{k}:np.float64({v!r})" for k, v in values.items()))
    lines += ["(TaskRunner pid=7) (\"Final validation metrics: {'val-aux/math_dapo/score/mean@1': np.float64(-0.3), \"",
              "(TaskRunner pid=7)  \"'val-core/math_dapo/acc/mean@1': np.float64(0.355), 'val-aux/num_turns/min': "
              "np.int32(1)}\")"]
    path.write_text("\n".join(lines) + "\n")
    return path, data


def report(*args: str, env: dict | None = None):
    result = run_cli("report", *args, "--json", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_verl_log_gives_a_plot_per_metric_and_a_page_with_failure_and_configuration(tmp_path):
    written = report(str(verl_log(tmp_path / "train.log")), "--output", str(tmp_path / "out"))
    groups = {Path(p).stem.split("-")[0] for p in written["plots"]}
    assert groups == GROUPS and len(written["plots"]) == written["metrics"]  # one plot per metric
    for svg in written["plots"]:
        text = Path(svg).read_text()
        assert text.startswith("<?xml") and "<text" in text and "training step" in text  # text kept as text
    assert written["steps"] == 24 and written["metrics"] == 39 and written["failure"] == "device_oom"
    page = Path(written["html"]).read_text()
    assert "NPU out of memory" in page and "offload" in page  # the failure with its cause and fix
    assert "ppo_mini_batch_size" in page  # the configuration verl printed
    assert page.count("<figure id=") == len(written["plots"]) and "<img" not in page  # self-contained: the plots are inline
    loads = re.sub(r'xmlns(?::\w+)?="http[^"]*"', "", page)  # an SVG's namespace names are names, not loads
    assert "http" not in loads.replace("https://swanlab.cn/@rl-team/verl-dapo/runs/x1y2z3", "")


@pytest.mark.browser
@pytest.mark.skipif(chromium() is None, reason="no chromium here (apt-get install chromium; tests/install-services.sh installs it)")
def test_the_page_loads_in_a_real_browser_without_errors_and_every_plot_renders(tmp_path):
    written = report(str(verl_log(tmp_path / "train.log")), "--output", str(tmp_path / "out"))
    shot = tmp_path / "report.png"
    seen = load(Path(written["html"]), shot)
    assert seen.errors == []
    assert all(url.startswith(("data:", "file:")) for url in seen.requests), seen.requests
    assert seen.images == []  # no image to fetch: the plots are inline SVG
    assert seen.title.startswith("verl-deploy report: log ")
    assert "device_oom" in seen.text and "Reward and score" in seen.text
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


@pytest.mark.skipif(chromium() is None, reason="no chromium here (apt-get install chromium; tests/install-services.sh installs it)")
def test_every_y_tick_label_in_the_browser_is_whole_and_the_value_at_its_height(tmp_path):
    log, data = ranged_log(tmp_path / "train.log")
    written = report(str(log), "--output", str(tmp_path / "out"))
    assert written["validation"] == {"final": True, "metrics": {"val-aux/math_dapo/score/mean@1": -0.3,
                                     "val-core/math_dapo/acc/mean@1": 0.355, "val-aux/num_turns/min": 1.0}}
    seen = load(Path(written["html"]), tmp_path / "report.png", scripts={"plots": READ_PLOTS})
    assert seen.errors == []
    plots = {p["key"]: p for p in seen.values["plots"]}
    assert set(data) <= set(plots)
    for key, plot in plots.items():
        labels = [t["label"] for t in sorted(plot["ticks"], key=lambda t: -t["y"])]  # bottom to top
        values = [number(label) for label in labels]
        assert len(values) >= 3 and values == sorted(values), (key, labels)
        steps = {round(b - a, 12) for a, b in zip(values, values[1:])}
        assert max(steps) - min(steps) <= 1e-9 * max(map(abs, values)), (key, labels)  # evenly spaced: no label cut
        for tick in plot["ticks"]:  # drawn whole, inside the plot (a cut label would reach past its left edge)
            assert tick["box"]["left"] >= plot["box"]["left"] and tick["box"]["right"] <= plot["box"]["right"], (key, tick)
        assert plot["ylabel"] and plot["ylabel"][0], key  # every y axis says what it measures
        if key in data:  # the curve, read back through the labels, is the data
            span = values[-1] - values[0]
            read = curve_values(plot)
            assert len(read) == len(data[key]), key
            assert all(abs(r - d) <= 0.01 * span for r, d in zip(read, data[key])), (key, read[:3], data[key][:3])
    assert {"900", "1000", "1100", "1200", "1300"} <= {t["label"] for t in plots["response_length/mean"]["ticks"]}
    assert plots["response_length/mean"]["ylabel"] == ["mean length (tokens)"]
    assert "0.30" in {t["label"] for t in plots["timing_s/step"]["ticks"]}
    assert plots["timing_s/step"]["ylabel"] == ["step time (s)"]
    assert any(t["label"].startswith("\u2212") for t in plots["critic/score/mean"]["ticks"])
    assert plots["perf/total_num_tokens"]["ylabel"] == ["tokens per step"]
    grid = sorted({round(p["box"]["left"]) for p in plots.values()})
    assert len(grid) >= 3  # the plots sit side by side across the page, not one per row
    assert seen.text.index("final validation: math_dapo acc/mean@1") < seen.text.index("Validation")


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
    # the configuration as `plan` shows it: its sections, gen_tp as plan derives it, no None or [] dumps
    plan = json.loads((Path(run["directory"]) / "attempt-3" / "scripts" / "plan.json").read_text())
    gen_tp = plan["derived"]["rollout_tp"]  # what `plan` shows for gen_tp when it is not given
    assert plan["spec"]["gen_tp"] is None and gen_tp
    config = page[page.index("<h2>Configuration</h2>"):]
    assert f"<tr><th>gen_tp</th><td>{gen_tp}</td><td class=\"src\">derived</td></tr>" in config
    assert "<h3>Parallelism</h3>" in config and "<h3>Hyper-parameters</h3>" in config
    table = config[:config.index("<h3>Hydra overrides</h3>")]
    assert "None" not in table and "[]" not in table
    # attempts, the resume and the failure are marked apart on every plot, in their own colours
    seen = load(Path(written["html"]), tmp_path / "run.png", scripts={"plots": READ_PLOTS, "config": READ_CONFIG})
    # what the reader sees of the configuration: the mode and the algorithm lead it, with their sources, in plan's
    # sections and order; no other mode's settings (the Async section is separate-async's, fully-async's...)
    blocks = {block["section"]: block["rows"] for block in seen.values["config"]}
    from verl_deploy.views.spec_rows import TITLES

    assert list(blocks) == [title for title in TITLES if title in blocks] and "Async" not in blocks
    assert blocks["Run"][:2] == [["mode", "dapo", "default"], ["algorithm", "dapo", "default"]]
    assert ["train_steps", "8", "flag --train-steps"] in blocks["Hyper-parameters"]
    shown = {row[0] for rows in blocks.values() for row in rows}
    assert not shown & {"parameter_sync_step", "warmup_batches", "staleness_threshold", "trainer_gpus", "dapo_source"}
    plot = next(p for p in seen.values["plots"] if p["key"] == "critic/score/mean")
    assert {"attempt", "resume", "failure"} <= set(plot["marks"])
    assert len(set(plot["mark_colours"])) == 3
    # verl's final validation: in status, status --json and the report
    final = {"val-aux/math_dapo/score/mean@1": -0.44, "val-core/math_dapo/acc/mean@1": 0.28, "val-aux/num_turns/min": 1.0}
    assert written["validation"] == {"final": True, "metrics": final}
    document = json.loads(run_cli("status", run["id"], "--json", env=trainer["env"]).stdout)
    assert document["validation"] == {"step": 8, "final": True, "metrics": final}
    shown = run_cli("status", run["id"], env=trainer["env"]).stdout
    assert "validation (final, step 8): math_dapo acc/mean@1 0.28 · math_dapo score/mean@1 -0.44" in shown
    assert "final validation: math_dapo acc/mean@1" in seen.text


@pytest.mark.parametrize("args", [["--mode", "separate-async", "--algorithm", "grpo", "--verl-version", "0.9.1",
                                   "--warmup-batches", "2"],
                                  ["--mode", "fully-async", "--verl-version", "0.9.1", "--config", "CONFIG"]])
def test_the_reports_configuration_is_plans_rows_for_the_run(tmp_path, args):
    """The report's configuration (views/report_config.py, from the record's spec and sources) shows each field
    with the value and source `plan --all` shows; a mode's own settings appear in that mode."""
    from verl_deploy.views.report_config import config_rows

    config = tmp_path / "run.yaml"
    config.write_text("staleness_threshold: 0.3\n")
    args = [str(config) if part == "CONFIG" else part for part in args]
    env = {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    document = json.loads(run_cli("plan", "--json", *args, env=env).stdout)
    sections = config_rows({**document["spec"], "sources": document["sources"]}, document["superseded"])
    full = run_cli("plan", "--all", *args, env=env).stdout.splitlines()
    for title, rows in sections:
        for name, value, origin in rows:
            line = next(line for line in full if line.split() and line.split()[0] == name)
            assert line.split(None, 1)[1].split() == [*value.split(), *origin.split()], (title, name, line)
    found = {name: (value, origin) for _, rows in sections for name, value, origin in rows}
    assert found["mode"] == (document["spec"]["mode"], "flag --mode")
    assert "algorithm" in found and "parameter_sync_step" in found  # both modes sync weights by it
    if document["spec"]["mode"] == "separate-async":
        assert found["algorithm"] == ("grpo", "flag --algorithm") and found["warmup_batches"] == ("2", "flag --warmup-batches")
        assert found["filter_groups"][1].startswith("default of --algorithm grpo") and "staleness_threshold" not in found
    else:
        assert found["staleness_threshold"] == ("0.3", f"file {config}") and "warmup_batches" not in found
    assert [title for title, _ in sections].count("Async") == 1


def test_a_file_without_metrics_still_gets_a_page_that_says_so(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"\x00\x01binary\xff\n")
    written = report(str(empty), "-o", str(tmp_path / "out"))
    assert written["plots"] == [] and "no <code>step:N - key:value</code> metric lines" in Path(written["html"]).read_text()


def test_a_line_the_scripts_survived_is_shown_as_such_and_is_not_the_runs_failure(tmp_path):
    """A healthy training whose first `ray start` was retried: the page shows the line marked survived, and the
    report's failure is none (as `diagnose` exits 0 on it)."""
    fixture = Path(__file__).parent / "fixtures" / "ray" / "start-retried-then-handed-over.log"
    log = tmp_path / "train.log"
    log.write_text(fixture.read_text() + "\n".join(healthy_lines(3)) + "\n")
    written = report(str(log), "--output", str(tmp_path / "out"))
    assert written["failure"] is None and written["steps"] == 3
    page = Path(written["html"]).read_text()
    assert "<b>ray_cluster_startup</b> (survived)" in page and 'class="failure warning"' in page
    # the plots draw no failure for it and the legend names none; the marks' list says what it was
    assert written["plots"] and not any("-mark-failure-" in Path(svg).read_text() for svg in written["plots"])
    assert "the training printed a failure" not in page
    assert "ray_cluster_startup (survived: before the hand-over)" in page and "<h2>Failure: none</h2>" in page
    assert [m["kind"] for m in written["marks"]] == ["survived"]


def test_a_failure_after_the_hand_over_is_still_drawn_as_one(tmp_path):
    """The same retried start, then the training itself fails: that line is the run's failure and the plots mark it;
    the start-up line stays survived."""
    fixture = Path(__file__).parent / "fixtures" / "ray" / "start-retried-then-handed-over.log"
    log = tmp_path / "train.log"
    log.write_text(fixture.read_text() + "\n".join(healthy_lines(3))
                   + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    written = report(str(log), "--output", str(tmp_path / "out"))
    assert written["failure"] == "device_oom"
    assert sorted(m["kind"] for m in written["marks"]) == ["failure", "survived"]
    assert any("-mark-failure-" in Path(svg).read_text() for svg in written["plots"])
    page = Path(written["html"]).read_text()
    assert "the training printed a failure" in page and "<h2>Failure</h2>" in page


def test_metric_values_near_the_float_limit_are_marked_not_plotted_and_the_report_is_written(tmp_path):
    """±1e308 overflows matplotlib's tick arithmetic: such values (and 1e400 = inf) are marked, the rest drawn."""
    log = tmp_path / "b.log"
    log.write_text("step:1 - critic/score/mean:1e308\nstep:2 - critic/score/mean:-1e308\n"
                   "step:3 - critic/score/mean:0.5 - actor/grad_norm:1e400\n")
    result = run_cli("report", str(log), "-o", str(tmp_path / "r"), "--json")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    written = json.loads(result.stdout)
    assert written["metrics"] == 2 and len(written["plots"]) == 2
    for svg in written["plots"]:
        assert "<path" in Path(svg).read_text()  # a real plot, not an empty file
    assert Path(written["html"]).is_file()


def test_a_missing_file_or_run_is_one_line():
    result = run_cli("report", "/nonexistent/train.log")
    assert result.returncode == 1 and "is not a file" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("report", "nope")
    assert result.returncode == 1 and "no run 'nope'" in result.stderr


def test_the_cli_does_not_import_matplotlib_to_start():
    code = "import sys, verl_deploy.cli; assert 'matplotlib' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_same_failure_before_and_after_the_hand_over_is_survived_then_drawn(tmp_path):
    """A retried `ray start`, then the training loses the cluster with the same line: the first is survived, the
    second is the run's failure, drawn at the step it came."""
    fixture = Path(__file__).parent / "fixtures" / "ray" / "start-retried-then-handed-over.log"
    gcs = next(line for line in fixture.read_text().splitlines() if "Failed to connect to GCS" in line)
    log = tmp_path / "train.log"
    log.write_text(fixture.read_text() + "\n".join(healthy_lines(3)) + f"\n{gcs}\n")
    last = len(log.read_text().splitlines())
    written = report(str(log), "--output", str(tmp_path / "out"))
    assert written["failure"] == "ray_cluster_startup"
    assert [(m["kind"], m["step"], m["line"]) for m in written["marks"]] == [("survived", 0, 2), ("failure", 3, last)]
    assert any("-mark-failure-" in Path(svg).read_text() for svg in written["plots"])
