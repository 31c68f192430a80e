"""Acting before a predicted OOM (runs/predicted_oom.py): the memory estimate's oom_response_len against the log.

The stand-in trainer logs verl's response_length/mean, /max and /clip_ratio growing step by step; the model is a
small Qwen3 (8 layers, hidden 2048) whose real memory estimate, on 24 GB devices with TP 1 and fixed micro-batches
of 16, fits at the typical step and runs out of memory once a micro-batch's responses average 1407 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import make_model, run_cli, webhook_server
from test_launch import launch, status, trainer  # noqa: F401  (the fixture)

from verl_deploy.runs import predicted_oom

MODEL = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 8, "hidden_size": 2048,
         "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144,
         "vocab_size": 1000, "torch_dtype": "bfloat16", "max_position_embeddings": 40960}
LAYOUT = ["--max-response-length", "2048", "--max-prompt-length", "512", "--train-tp", "1", "--train-pp", "1",
          "--gen-tp", "1", "--device-memory-gb", "24", "-o", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"]
OOM_LEN = 1407  # what the estimate says for this layout (checked below, not assumed)


@pytest.fixture()
def long_run(trainer):  # noqa: F811
    """The trainer fixture with the model above and 12 steps (checkpoints every 2)."""
    (trainer["host"]["root"] / "models" / "Qwen3-8B" / "config.json").write_text(json.dumps(MODEL))
    args = trainer["args"]
    args[args.index("--train-steps") + 1] = "12"
    return trainer


def _spec(tmp_path: Path, *features: str, **fields):
    from verl_deploy.sources import resolve

    model = make_model(tmp_path / "Qwen3-8B", MODEL)
    flags = {"model_path": str(model), "max_response_length": 2048, "max_prompt_length": 512, "train_tp": 1,
             "train_pp": 1, "gen_tp": 1, "device_memory_gb": 24,
             "overrides": ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"], "features": list(features),
             **fields}
    return resolve(flags=flags, environ={}, detected={"devices": list(range(8))})


def test_the_watched_length_is_the_micro_batch_holding_the_longest_response():
    metrics = {"response_length/mean": 1000.0, "response_length/max": 2000.0}
    assert predicted_oom.watched_length(metrics, 1) == 2000.0  # one sequence per micro-batch: the longest
    assert predicted_oom.watched_length(metrics, 4) == 1250.0  # (2000 + 3 x 1000) / 4
    assert predicted_oom.watched_length(metrics, None) == 1000.0  # dynamic batching below its budget: the share
    assert predicted_oom.watched_length({"response_length/mean": 900.0}, 8) == 900.0  # no max logged
    assert predicted_oom.watched_length({"response_length/max": 900.0}, 8) is None
    assert predicted_oom.watched_length({"response_length/mean": float("nan")}, 8) is None


def test_the_step_the_oom_length_is_reached_is_projected_from_the_recent_growth():
    seen = [[1, 1000.0], [2, 1040.0], [3, 1080.0], [4, 1120.0]]
    assert predicted_oom.projected_step(seen, 1400) == 11  # 280 tokens to go at 40 a step
    assert predicted_oom.projected_step([[1, 1000.0], [2, 990.0], [3, 980.0]], 1400) is None  # shrinking
    assert predicted_oom.projected_step(seen[:2], 1400) is None  # too few steps to say


def test_the_feature_is_the_one_the_estimate_says_prevents_it(tmp_path):
    """Fixed micro-batches, dynamic batching turned off by the user: offload (the ladder's first rung) does not
    move this OOM (the update loads offloaded state back), recompute makes the worst step fit: recompute is chosen.
    With every default off, dynamic batching is not refused and its budget bounds the worst step: it is chosen."""
    spec = _spec(tmp_path, "-dynamic_batch")
    watch = predicted_oom.outlook(*predicted_oom._estimate(spec))
    assert watch["active"] and watch["oom_response_len"] == OOM_LEN and watch["micro_batch"] == 16
    assert predicted_oom._candidates(spec) == ["offload", "recompute"]
    chosen = predicted_oom.prevention(spec, OOM_LEN)
    assert chosen["feature"] == "recompute" and "worst step fits" in chosen["effect"]
    bare = _spec(tmp_path, no_default_features=True)
    assert predicted_oom.prevention(bare, OOM_LEN)["feature"] == "dynamic_batch"


def test_nothing_is_watched_when_the_token_budget_bounds_every_micro_batch(tmp_path):
    watch = predicted_oom.outlook(*predicted_oom._estimate(_spec(tmp_path)))  # dynamic batching on (a default)
    assert watch == {"active": False, "why": "dynamic batching: the token budget bounds every micro-batch, whatever "
                                             "the response lengths"}


def test_a_feature_on_or_turned_off_by_the_user_is_never_a_candidate(tmp_path):
    assert predicted_oom._candidates(_spec(tmp_path, "-dynamic_batch", "-recompute")) == ["offload"]
    assert predicted_oom._candidates(_spec(tmp_path, "-dynamic_batch", oom_features=["offload"])) == ["recompute"]
    assert predicted_oom._candidates(_spec(tmp_path, "-dynamic_batch", "offload", "recompute")) == []
    spec = _spec(tmp_path, "-dynamic_batch", "-recompute", "-offload")
    assert predicted_oom.prevention(spec, OOM_LEN)["feature"] is None


def test_a_features_mask_bit_at_0_is_a_choice_never_undone(tmp_path):
    """A mask given is the user's choice for all seven bits: its 0s are never added, as `--features -NAME` is
    not; a feature list's name turns its bit back on; a feature without a bit keeps its default (FSDP's gradient
    checkpointing, on). With no mask and --no-default-features every memory feature is still open."""
    masked = _spec(tmp_path, mask="1000000")  # remove padding only: dynamic batching, offload, recompute off
    assert predicted_oom._candidates(masked) == []
    assert predicted_oom.prevention(masked, OOM_LEN)["feature"] is None
    assert predicted_oom._candidates(_spec(tmp_path, mask="1010000")) == []  # offload on, the rest off
    assert predicted_oom._candidates(_spec(tmp_path, "-offload", mask="1110000")) == []  # dynamic batching on
    assert predicted_oom._candidates(_spec(tmp_path, framework="fsdp", mask="1000000")) == []
    assert predicted_oom._candidates(_spec(tmp_path, framework="fsdp", no_default_features=True)) == [
        "dynamic_batch", "offload", "gradient_checkpointing"]


def first_step_at(length: float) -> int:
    """The first step whose watched micro-batch reaches `length`: the stand-in's mean is 1000 + 40 x step and its
    longest 1.5 x the mean, one of 16 sequences beside 15 at the mean (watched_length)."""
    return next(step for step in range(1, 1000) if (1.5 + 15) / 16 * (1000 + 40 * step) >= length)


def _notices(final: dict, kind: str) -> list[dict]:
    return [n for n in final["notices"] if n["kind"] == kind]


@pytest.mark.parametrize("warned", [False, True])
def test_growing_responses_restart_the_run_at_a_checkpoint_with_the_feature_before_the_oom(long_run, warned):
    """The responses grow 40 tokens a step; at 90 % of OOM_LEN (step 6 or 7) a notice names the step, the lengths,
    the OOM length and recompute; at the next complete checkpoint the attempt stops and the next resumes from it
    with recompute, whose estimate fits the worst step: nothing is watched after, the run succeeds. With `warned`,
    the log also holds a warning (Ray's NPU probe without `acl`): the stop is still a restart, not a failure."""
    server, received, url = webhook_server()
    env = {"STANDIN_STEP_SECONDS": "1"}
    if warned:
        env["STANDIN_LINES_FILE"] = str(Path(__file__).parent / "fixtures" / "ray" / "start-head-npu-without-acl.log")
    try:
        result = launch(long_run, "--follow", "--json", "--notify", url, "--features", "-dynamic_batch", *LAYOUT,
                        env=env)
    finally:
        server.shutdown()
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded" and final["step"] == 12, result.stderr[-3000:]
    first, second = final["attempts"]
    watch = first["predicted_oom"]
    assert watch["oom_response_len"] == OOM_LEN and watch["feature"] == "recompute" and watch["state"] == "restarted"
    fired = watch["fired"]["step"]
    reached = first_step_at(0.9 * OOM_LEN)
    assert fired in (reached, reached + 1) and watch["fired"]["length"] >= 0.9 * OOM_LEN
    warned = _notices(final, "predicted_oom")
    assert len(warned) == 1
    title = warned[0]["title"]
    assert f"predicted OOM at response length {OOM_LEN}: at step {fired}" in title and "adding recompute" in title
    assert "response_length/mean" in title and "/max" in title
    assert received and f"predicted OOM at response length {OOM_LEN}" in received[0]["message"]  # --notify
    assert first["exit_code"] is None and first["failure"] is None
    assert second["features"] == ["recompute"] and second["reason"].startswith(
        f"predicted OOM at response length {OOM_LEN} (step {fired}")
    assert second["feature_origins"]["recompute"] == f"predicted OOM at response length {OOM_LEN}"
    assert second["resumed_from_step"] >= fired and second["resumed_from_step"] % 2 == 0
    assert f"Setting global step to {second['resumed_from_step']}" in Path(second["log"]).read_text()
    plan = json.loads((Path(second["log"]).parent / "scripts" / "plan.json").read_text())
    assert plan["spec"]["oom_features"] == ["recompute"]
    assert second["predicted_oom"]["active"] is False  # recompute fits the worst step: no second change
    assert len(_notices(final, "recovery")) == 1
    again = status(long_run, final["id"])
    assert again["attempts"][1]["feature_origins"]["recompute"] == f"predicted OOM at response length {OOM_LEN}"


def test_with_no_preempt_oom_it_only_notices(long_run):
    result = launch(long_run, "--follow", "--json", "--no-preempt-oom", "--features", "-dynamic_batch", *LAYOUT,
                    env={"STANDIN_STEP_SECONDS": "0.5"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert len(final["attempts"]) == 1 and final["preempt_oom"] is False
    watch = final["attempts"][0]["predicted_oom"]
    assert watch["state"] == "noticed" and watch["preempt"] is False
    warned = _notices(final, "predicted_oom")
    assert len(warned) == 1 and "--no-preempt-oom" in warned[0]["title"] and "recompute" in warned[0]["title"]


def test_dynamic_batching_whose_budget_bounds_the_worst_step_is_never_preempted(long_run):
    result = launch(long_run, "--follow", "--json", *LAYOUT, env={"STANDIN_STEP_SECONDS": "0.5"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert len(final["attempts"]) == 1 and not _notices(final, "predicted_oom")
    assert "token budget bounds" in final["attempts"][0]["predicted_oom"]["why"]


def test_status_says_what_is_watched(long_run):
    result = launch(long_run, "--json", "--features", "-dynamic_batch", *LAYOUT, env={"STANDIN_STEP_SECONDS": "2"})
    started = json.loads(result.stdout)
    from test_launch import wait_for

    wait_for(long_run, started["id"], lambda d: (d["attempts"][-1]["predicted_oom"] or {}).get("state") == "watching",
             timeout=60)
    shown = run_cli("status", started["id"], env=long_run["env"]).stdout
    assert f"the estimate runs out at {OOM_LEN}-token micro-batch responses" in shown
    run_cli("stop", started["id"], "--yes", env=long_run["env"])
