"""The live view (`status --watch`, `launch --follow`) on runs of the stand-in trainer: in a real pty drawn on a
pyte screen, and through a pipe (one line per event). The view only reads: quitting leaves the run running.
"""

from __future__ import annotations

import json
import os
import re
import time

from conftest import run_cli
from test_init import Terminal
from test_launch import launch as launch_with_check, status, trainer, wait_for  # noqa: F401  (trainer is a fixture)

# The host check is not what these tests look at, and it refuses a host whose python has a CPU torch
# without torch_npu (a developer venv with system site-packages): skip it.
SKIP_CHECK = "--skip-check"


def launch(trainer, *extra, env=None):
    return launch_with_check(trainer, SKIP_CHECK, *extra, env=env)


def screen_text(term: Terminal) -> str:
    return "\n".join(term.screen.display)


def wait_screen(term: Terminal, pattern: str, timeout: float = 30) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, screen_text(term))
        if found:
            return found
        term._read(0.2)
    raise AssertionError(f"{pattern!r} not on:\n{screen_text(term)}")


def test_status_watch_draws_step_eta_and_metrics_that_update_and_q_leaves_the_run_running(trainer):
    run = json.loads(launch(trainer, "--json", "--train-steps", "12", env={"STANDIN_STEP_SECONDS": "0.8"}).stdout)
    term = Terminal(["status", run["id"], "--watch"], trainer["env"])
    first = wait_screen(term, r"step (\d+)/12 · ETA \d+s · score (0\.1\d+)")
    wait_screen(term, r"910B3")  # the devices from npu-smi (the fake prints the real 910B3 table)
    assert re.search(r"entropy\s+0\.\d+", screen_text(term)) and "accuracy" not in screen_text(term)  # no validation logged
    later = wait_screen(term, r"step (\d+)/12 · ETA \d+s · score (0\.1\d+)(?<!" + re.escape(first.group(2)) + ")")
    assert int(later.group(1)) > int(first.group(1)) and later.group(2) != first.group(2)
    assert re.search(r"score\s+0\.1\d+\s+[▁▂▃▄▅▆▇█]{2,}", screen_text(term))  # the trend chart grows
    term.child.send("q")
    assert term.finish() == 0
    assert status(trainer, run["id"])["state"] == "running"  # quitting the view does not touch the run
    final = wait_for(trainer, run["id"], lambda d: d["state"] == "succeeded", timeout=60)
    assert final["step"] == 12


def test_watch_off_a_terminal_prints_one_line_per_event_until_the_end(trainer):
    run = json.loads(launch(trainer, "--json", env={"STANDIN_STEP_SECONDS": "0.3"}).stdout)
    result = run_cli("status", run["id"], "--watch", env=trainer["env"])
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and "\x1b[" not in result.stdout
    steps = [int(m.group(1)) for line in lines if (m := re.match(r"step (\d+)/8: score 0\.1\d+ · response len", line))]
    assert steps == sorted(steps) and steps[-1] == 8 and len(steps) >= 4
    assert lines[-1] == f"run {run['id']}: succeeded at step 8/8"


def test_launch_follow_on_a_terminal_shows_the_live_view_and_ends_with_the_run(trainer):
    term = Terminal(["launch", *trainer["args"], SKIP_CHECK, "--follow"], dict(trainer["env"], STANDIN_STEP_SECONDS="0.6"))
    wait_screen(term, r"attempt 1: launch", timeout=60)
    wait_screen(term, r"step \d+/8 · ETA \d+s · score 0\.1\d+ · attempt 1")
    assert term.finish() == 0
    assert re.search(r"run \S+ +succeeded", screen_text(term))  # the last frame stays on the normal screen
    assert "quits this view" not in screen_text(term)


def test_launch_follow_off_a_terminal_prints_events_and_the_retries(trainer):
    result = launch(trainer, "--follow", env={"STANDIN_FAIL": "device_oom"})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("failure device_oom at line") for line in lines)
    assert any(line.startswith("attempt 2: device OOM") or line.startswith("attempt 2:") for line in lines)
    # the event lines end with the success; then the end of the run: cause and the next command to copy
    assert lines[-4].endswith("succeeded at step 8/8"), lines[-6:]
    assert lines[-3].startswith("run ") and "succeeded: the training reached its end (step 8/8)" in lines[-3]
    assert lines[-2].startswith("next: ") and lines[-1].strip().startswith("verl-deploy report ")


def test_a_stopped_run_shows_no_eta(trainer):
    run = json.loads(launch(trainer, "--json", env={"STANDIN_STEP_SECONDS": "1.5"}).stdout)
    wait_for(trainer, run["id"], lambda d: d["step"] >= 2 and d["eta_seconds"])
    assert run_cli("stop", run["id"], env=trainer["env"]).returncode == 0
    assert status(trainer, run["id"])["eta_seconds"] is None
    text = run_cli("status", run["id"], env=trainer["env"]).stdout
    assert "stopped" in text and "ETA" not in text


# -- pieces of the view, without a run ------------------------------------------------------------

def test_device_rows_come_from_the_real_npu_and_gpu_formats(tmp_path, monkeypatch):
    from conftest import FAKES, HW
    from verl_deploy.runs.record import RunRecord
    from verl_deploy.views.devices import read_devices

    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPU_SMI", str(HW / "npu-smi-910b3-8npu-busy-container.txt"))
    npu = read_devices(RunRecord("r", "local", {"device": "npu", "devices": [0, 1]}))
    assert [(r.id, r.name, r.used_mb, r.total_mb, r.utilization) for r in npu.rows] == [
        (0, "910B3", 54592, 65536, 0), (1, "910B3", 54592, 65536, 0)]  # only the run's devices
    monkeypatch.setenv("FAKE_NVIDIA_SMI_CSV", str(HW / "nvidia-smi-query-gpu-csv-8x3090-noheader-nounits.DERIVED.txt"))
    gpu = read_devices(RunRecord("r", "local", {"device": "gpu", "devices": []}))
    assert len(gpu.rows) == 8 and gpu.rows[0].total_mb == 24576 and gpu.rows[0].utilization is not None
    monkeypatch.setenv("PATH", "/nonexistent")
    missing = read_devices(RunRecord("r", "local", {"device": "npu"}))
    assert missing.rows == [] and missing.problem == "npu-smi not found"


def test_the_memory_estimate_is_drawn_when_the_plan_has_one(tmp_path, monkeypatch):
    from rich.console import Console

    from verl_deploy.runs.record import Attempt, RunRecord
    from verl_deploy.views.devices import DeviceReading, DeviceRow, memory_estimate_mb
    from verl_deploy.views.live import Follow, render

    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path))
    record = RunRecord("r1", "local", {"device": "npu", "devices": [0]}, state="running",
                       attempts=[Attempt(1, [], "launch", log=str(tmp_path / "runs" / "r1" / "attempt-1" / "none.log"))])
    record.save()
    assert memory_estimate_mb(record) is None  # no estimate: device memory alone
    scripts = tmp_path / "runs" / "r1" / "attempt-1" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "plan.json").write_text(json.dumps({"memory": {"peak_gb": 48}}))
    assert memory_estimate_mb(record) == 48 * 1024
    console = Console(width=140, record=True, file=open(os.devnull, "w"))
    reading = DeviceReading([DeviceRow(0, "910B3", 60000, 65536, 90)])
    console.print(render(Follow(record), reading, 140))
    text = console.export_text()
    assert "(| = estimate 48.0 GB)" in text and "60000/65536" in text and "|" in text.split("60000/65536")[1]


def test_a_damaged_record_mid_watch_keeps_the_last_good_one(tmp_path, monkeypatch):
    from verl_deploy.runs.record import Attempt, RunRecord
    from verl_deploy.views.live import Follow

    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path))
    log = tmp_path / "runs" / "r2" / "attempt-1" / "train.log"  # where a run's log is
    log.parent.mkdir(parents=True)
    log.write_text("(TaskRunner pid=1) step:1 - critic/score/mean:0.2 - timing_s/step:3.0\n")
    record = RunRecord("r2", "local", {"device": "npu"}, state="running", step=1,
                       attempts=[Attempt(1, [], "launch", log=str(log))])
    record.save()
    follow = Follow(record)
    assert follow.history.take_new_events() == ["step 1: score 0.2 · step s 3"]
    (tmp_path / "runs" / "r2" / "run.json").write_text('{"id": "r2", "backe')  # half a file
    with open(log, "a") as handle:
        handle.write("(TaskRunner pid=1) step:2 - critic/score/mean:0.3 - timing_s/step:3.0\n")
    lines = follow.refresh()
    assert follow.record.state == "running" and lines == ["step 2: score 0.3 · step s 3"]


def test_a_view_started_after_a_retry_began_still_prints_the_retry_line_in_order(tmp_path, monkeypatch):
    """`launch --follow` off a terminal on a slow host: the first attempt failed and the second began before the
    view started. Its first lines are the first attempt's events, then "attempt 2: ...", then the second's."""
    from verl_deploy.runs.record import Attempt, RunRecord
    from verl_deploy.views.live import Follow

    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path))
    logs = []
    for n, text in ((1, "(TaskRunner pid=1) step:1 - critic/score/mean:0.2 - timing_s/step:3.0\n"),
                    (2, "(TaskRunner pid=1) step:2 - critic/score/mean:0.3 - timing_s/step:3.0\n")):
        log = tmp_path / "runs" / "r4" / f"attempt-{n}" / "train.log"
        log.parent.mkdir(parents=True)
        log.write_text(text)
        logs.append(str(log))
    record = RunRecord("r4", "local", {"device": "npu"}, state="running", step=2,
                       attempts=[Attempt(1, [], "launch", log=logs[0]),
                                 Attempt(2, ["offload"], "device OOM: adding offload", log=logs[1])])
    record.save()
    lines = Follow(record).refresh()
    assert lines == ["step 1: score 0.2 · step s 3", "attempt 2: device OOM: adding offload",
                     "step 2: score 0.3 · step s 3"]
    # the lines view prints the last events already in the logs first: the retry line is among them, in order
    from verl_deploy.views.live import watch_lines

    record.state = "succeeded"
    record.save()
    written: list[str] = []
    watch_lines(record, written.append, keep_supervised=lambda r: r, backlog=2)
    assert written[:2] == ["attempt 2: device OOM: adding offload", "step 2: score 0.3 · step s 3"]
    assert written[-1] == "run r4: succeeded at step 2/?"


def test_the_live_view_shows_verl_validation_as_it_comes_and_the_final_one_at_the_end(tmp_path, monkeypatch):
    from rich.console import Console

    from verl_deploy.runs.record import Attempt, RunRecord
    from verl_deploy.views.live import Follow, render

    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path))
    log = tmp_path / "runs" / "r3" / "attempt-1" / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"(TaskRunner pid=1) step:{s} - critic/score/mean:0.2 - val-core/math_dapo/acc/mean@1:"
                           f"{0.1 * s:.1f}\n" for s in (1, 2, 3)))
    record = RunRecord("r3", "local", {"device": "npu"}, state="running", step=3,
                       attempts=[Attempt(1, [], "launch", log=str(log))])
    record.save()
    follow = Follow(record)

    def screen() -> str:
        console = Console(width=140, record=True, file=open(os.devnull, "w"))
        console.print(render(follow, None, 140))
        return console.export_text()

    assert "validation (step 3): math_dapo acc/mean@1 0.3  ▁▅█" in screen()
    with open(log, "a") as handle:  # verl's last step: pprint wraps the dict over two lines
        handle.write("(TaskRunner pid=1) (\"Final validation metrics: {'val-aux/math_dapo/score/mean@1': "
                     "np.float64(-0.2), \"\n(TaskRunner pid=1)  \"'val-core/math_dapo/acc/mean@1': np.float64(0.35)}\")\n")
    lines = follow.refresh()
    assert "final validation: math_dapo score/mean@1 -0.2" in lines
    assert "final validation (more): math_dapo acc/mean@1 0.35" in lines
    assert "validation (final): math_dapo acc/mean@1 0.35 · math_dapo score/mean@1 -0.2" in screen()
