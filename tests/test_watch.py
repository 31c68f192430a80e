"""The log follower on real files with real writers, and the line -> event parser."""

import math
import subprocess
import sys
import time

from verl_deploy.watch.events import (CheckpointSaved, Metrics, Progress, Resumed, SwanLabLink, parse_line,
                                      parse_lines)
from verl_deploy.watch.follow import LogFollower
from verl_deploy.watch.state import RunState

WRITER = """
import sys, time
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "a", buffering=1) as f:
    for i in range(1, n + 1):
        f.write(f"(TaskRunner pid=42) step:{i} - critic/score/mean:0.{i} - timing_s/step:{10 + i}\\n")
        time.sleep(0.01)
"""


def test_follower_reads_only_new_lines_while_a_process_writes(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    follower = LogFollower(log)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "50"])
    seen = []
    deadline = time.time() + 30
    while time.time() < deadline and len(seen) < 50:
        seen += follower.read_lines()
        time.sleep(0.02)
    writer.wait(timeout=30)
    seen += follower.read_lines()
    steps = [e.step for e in parse_lines(seen) if isinstance(e, Metrics)]
    assert steps == list(range(1, 51))  # every line once, in order, none twice


def test_partial_lines_wait_for_their_end(tmp_path):
    log = tmp_path / "p.log"
    log.write_bytes(b"first\nsec")
    follower = LogFollower(log)
    assert follower.read_lines() == ["first"]
    with open(log, "ab") as handle:
        handle.write(b"ond\nthird")
    assert follower.read_lines() == ["second"]
    assert follower.read_lines() == []


def test_truncation_and_rotation_restart_from_the_new_start(tmp_path):
    log = tmp_path / "r.log"
    log.write_text("a\nb\nc\n")
    follower = LogFollower(log)
    assert follower.read_lines() == ["a", "b", "c"]
    log.write_text("x\n")  # truncated and rewritten
    assert follower.read_lines() == ["x"]
    rotated = tmp_path / "r.log.1"
    log.rename(rotated)
    log.write_text("new1\nnew2\n")  # a new file (new inode) under the same name
    assert follower.read_lines() == ["new1", "new2"]


def test_missing_file_is_not_an_error(tmp_path):
    follower = LogFollower(tmp_path / "later.log")
    assert follower.read_lines() == []
    (tmp_path / "later.log").write_text("hello\n")
    assert follower.read_lines() == ["hello"]


def test_progress_from_tqdm_with_ray_prefix_and_carriage_returns():
    line = ("(TaskRunner pid=1234) Training Progress:  11%|█         | 11/100 [09:32<1:17:10, 52.03s/it]"
            "\rTraining Progress:  12%|█▏        | 12/100 [10:24<1:16:18, 51.96s/it]")
    events = parse_line(line)
    assert events[-1] == Progress(12, 100, 51.96)


def test_metrics_accept_plain_and_numpy_reprs_and_nan():
    line = ("step:7 - actor/pg_loss:0.0123 - critic/score/mean:np.float64(0.25) - perf/throughput:1234.5 - "
            "actor/grad_norm:nan - training/global_step:7 - val-core/math_dapo/acc/mean@1:np.float64(-1e-05)")
    (event,) = parse_line(line)
    assert event.step == 7
    assert event.values["critic/score/mean"] == 0.25
    assert event.values["perf/throughput"] == 1234.5
    assert math.isnan(event.values["actor/grad_norm"])
    assert event.values["val-core/math_dapo/acc/mean@1"] == -1e-05


def test_swanlab_links_checkpoints_and_resume():
    assert parse_line("swanlab: 🚀 View run at http://10.0.0.1:8000/@me/verl_hlm/runs/abc123") == [
        SwanLabLink("http://10.0.0.1:8000/@me/verl_hlm/runs/abc123")]
    local = parse_line("swanlab: 🌟 Run `swanlab watch /verl/swanlog` to view SwanLab Experiment Dashboard locally")
    assert local == [SwanLabLink("swanlab watch /verl/swanlog", local=True)]
    assert parse_line("local_global_step_folder: /ck/global_step_20") == [CheckpointSaved(20, "/ck/global_step_20")]
    assert parse_line("Setting global step to 20") == [Resumed(20)]
    assert parse_line("INFO some unrelated line with step:words") == []


def test_run_state_keeps_step_metrics_link_and_eta():
    state = RunState()
    lines = [
        "swanlab: 🚀 View run at https://swanlab.cn/@u/p/runs/r1",
        "Training Progress:   0%|          | 0/10 [00:00<?, ?it/s]",
        *[f"step:{i} - critic/score/mean:0.{i} - timing_s/step:{20 + i % 2}" for i in range(1, 5)],
        "Training Progress:  40%|████      | 4/10 [01:24<02:06, 21.00s/it]",
    ]
    for event in parse_lines(lines):
        state.apply(event)
    assert (state.step, state.total_steps) == (4, 10)
    assert state.swanlab_url == "https://swanlab.cn/@u/p/runs/r1"
    assert state.metrics["critic/score/mean"] == 0.4
    assert state.median_step_seconds == 20.5 and state.eta_seconds == 6 * 20.5
    assert [s for s, _ in state.history["critic/score/mean"]] == [1, 2, 3, 4]
