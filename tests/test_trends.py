"""The watcher classes read from a run's course or from DAPO's own message: each with its cause and fix.

Logs are verl's real shapes (tests/verl_logs.py); the DAPO message is verl's own text from
recipe/dapo/dapo_ray_trainer.py (v0.6.0..v0.7.x in verl, verl-recipe after).
"""

from __future__ import annotations

import pytest

from verl_deploy.watch.diagnosis import diagnose
from verl_deploy.watch.scan import FailureSeen, LogScanner
from verl_logs import HEADER, healthy_lines, metric_line

DAPO_GAVE_UP = ("(TaskRunner pid=2231) ValueError: num_gen_batches=11 >= max_num_gen_batches=10. Generated too many. "
                "Please check if your data are too difficult. You could also try set max_num_gen_batches=0 to enable "
                "endless trials.")

def verdict(lines: list[str], eager: bool):
    seen: list[FailureSeen] = []
    scanner = LogScanner(eager=eager, on_event=lambda e: seen.append(e) if isinstance(e, FailureSeen) else None)
    scanner.feed_lines(lines)
    return diagnose(scanner), seen

def set_metric(lines: list[str], step: int, key: str, value: float) -> list[str]:
    out = []
    for line in lines:
        if f"step:{step} - " in line:
            head, _, rest = line.partition(f" - {key}:")
            _, _, tail = rest.partition(" - ")
            line = f"{head} - {key}:{value} - {tail}"
        out.append(line)
    return out

@pytest.mark.parametrize("eager", [True, False])
def test_dapo_dynamic_sampling_giving_up_is_its_own_class(eager):
    result, _ = verdict(healthy_lines(3) + [DAPO_GAVE_UP], eager)
    assert result.class_id == "dapo_gen_batches_exhausted" and result.severity == "fatal"
    assert "max_num_gen_batches" in result.fix and "0" in result.fix and not result.retryable

@pytest.mark.parametrize("eager", [True, False])
def test_a_step_twice_as_slow_as_the_median_of_the_last_five_is_a_warning(eager):
    lines = set_metric(healthy_lines(8), 8, "timing_s/step", 300.0)  # the others take 130.2 s
    result, seen = verdict(lines, eager)
    assert result.class_id == "step_time_regression" and result.severity == "warning"
    assert "step 8 took 300.0 s, 2.3x the median 130.2 s" in result.lines[0].text
    assert "swapping" in result.cause and "timing_s" in result.fix
    assert [e.class_id for e in seen] == ["step_time_regression"]

def test_a_slower_step_below_twice_the_median_is_not_flagged():
    result, _ = verdict(set_metric(healthy_lines(8), 8, "timing_s/step", 250.0), eager=True)
    assert result.class_id is None

@pytest.mark.parametrize("eager", [True, False])
def test_a_reward_that_rose_and_fell_back_is_a_collapse(eager):
    lines = healthy_lines(15)
    scores = [0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.55, 0.6, 0.6, 0.58, 0.3, 0.2, 0.1, 0.1, 0.05]
    for step, score in enumerate(scores, start=1):
        lines = set_metric(lines, step, "critic/score/mean", score)
    result, _ = verdict(lines, eager)
    assert result.class_id == "reward_collapse" and result.severity == "warning"
    assert "last-5 mean 0.256, down from the best 5-step mean 0.566" in result.lines[0].text  # first at step 14

def test_a_noisy_flat_reward_is_not_a_collapse():
    lines = healthy_lines(15)
    for step in range(1, 16):
        lines = set_metric(lines, step, "critic/score/mean", 0.3 + (0.05 if step % 2 else -0.05))
    assert verdict(lines, eager=True)[0].class_id is None

@pytest.mark.parametrize("eager", [True, False])
def test_a_resume_that_trains_no_step_is_named_only_at_the_end(eager):
    resumed = [line.replace("{total}", "8") for line in HEADER] + [
        "(TaskRunner pid=2231) Load from checkpoint folder: /ckpt/global_step_8",
        "(TaskRunner pid=2231) Setting global step to 8",
        "(TaskRunner pid=2231) Final validation metrics: {'val-core/math_dapo/acc/mean@1': 0.3}"]
    result, _ = verdict(resumed, eager)
    assert result.class_id == "resume_ran_no_steps"
    assert result.lines[0].text == "resumed at step 8 of 8 and logged no step after it"
    assert "--ckpts-dir" in result.fix and "resume_mode=disable" in result.fix

def test_a_resume_that_goes_on_training_is_fine():
    lines = [line.replace("{total}", "8") for line in HEADER] + ["(TaskRunner pid=2231) Setting global step to 4"]
    lines += [metric_line(5), metric_line(6)]
    assert verdict(lines, eager=False)[0].class_id is None
