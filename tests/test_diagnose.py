"""Failure classification on real log excerpts, mixed logs, healthy noise, stalls, and `verl-deploy diagnose`.

The excerpts in fixtures/failures/ are copied unchanged from shared/reference/failures.md
(facts: real log lines from public issues); expected.json maps each to its class.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verl_deploy.watch.diagnosis import diagnose
from verl_deploy.watch.scan import FailureSeen, LogScanner, Stalled
from verl_deploy.watch.signatures import load_table
from conftest import VERL_BIN, run_cli
from verl_logs import healthy_lines, metric_line, write_big_log

FAILURES = Path(__file__).parent / "fixtures" / "failures"
EXPECTED = json.loads((FAILURES / "expected.json").read_text())


def excerpt(name: str) -> list[str]:
    return (FAILURES / f"{name}.log").read_text().splitlines()


def verdict(lines: list[str], eager: bool = False):
    scanner = LogScanner(eager=eager)
    scanner.feed_lines(lines)
    return diagnose(scanner)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_reference_excerpt_gets_its_class(name):
    result = verdict(excerpt(name))
    assert result.class_id == EXPECTED[name]
    if result.class_id:
        assert result.cause and result.fix and result.lines


def test_every_class_in_the_reference_is_in_the_table():
    ids = [c.id for c in load_table().classes]
    beyond_reference = {"dapo_gen_batches_exhausted", "resume_ran_no_steps", "step_time_regression", "reward_collapse",
                        "missing_python_package", "ray_npu_type_unknown"}  # test_agent_errors.py, the Ray tests below
    assert set(filter(None, EXPECTED.values())) | beyond_reference == set(ids)  # tests/test_trends.py covers those
    assert len(ids) == 25
    assert ids[:4] == ["disk_full", "host_oom", "rollout_kv_cache_insufficient", "device_oom"]
    assert ids[-2:] == ["ray_actor_died", "ray_npu_type_unknown"]  # a warning that must never outrank a cause


@pytest.mark.parametrize("name, phase", [
    ("S-DOOM-01", "log_prob"),  # compute_log_prob -> entropy_from_logits
    ("S-DOOM-06", "rollout"),  # vLLM wake_up in the cumem allocator
    ("S-HOOM-01", "rollout"),  # ray::WorkerDict.actor_rollout_generate_sequences
    ("S-HOOM-06", "checkpoint_save"),  # ray::WorkerDict.actor_rollout_save_checkpoint
    ("S-KV-01", "rollout"),
    ("S-CIF-02", "model_load"),  # _build_model_optimizer / ref_init_model
    ("S-PTL-01", "data_load"),
    ("S-HYD-03", "startup"),
])
def test_phase_is_read_from_wrappers_and_frames(name, phase):
    assert verdict(excerpt(name)).phase == phase


@pytest.mark.parametrize("name, retryable", [
    ("S-DOOM-01", True),
    ("S-DOOM-08", False),  # 10.65 GiB reserved by this process, 19.79 MiB free of 60.97: someone else holds the card
    ("S-DOOM-09", False),  # "more than 1EB": a corrupted size, not an OOM
    ("S-KV-03", True),
    ("S-CIF-01", True),  # EJ0001: a stale process; retry after cleanup
    ("S-CIF-03", False),
    ("S-HOOM-01", False),
    ("S-RCS-01", True),
    ("S-HYD-01", False),
])
def test_retry_policy_and_guards(name, retryable):
    assert verdict(excerpt(name)).retryable is retryable


def test_oom_guard_explains_itself():
    result = verdict(excerpt("S-DOOM-08"))
    assert "another process" in result.cause


def test_mixed_log_gives_the_root_cause_not_the_symptoms():
    oom_rank = [
        "(WorkerDict pid=5107) Traceback (most recent call last):",
        '(WorkerDict pid=5107)   File "/verl/verl/workers/megatron_workers.py", line 711, in update_actor',
        "(WorkerDict pid=5107)     metrics = self.actor.update_policy(dataloader=dataloader)",
        "(WorkerDict pid=5107) RuntimeError: NPU out of memory. Tried to allocate 3.20 GiB (NPU 5; 60.96 GiB total "
        "capacity; 55.02 GiB already allocated; 55.02 GiB current active; 1.10 GiB free; 58.30 GiB reserved in total by PyTorch)",
    ]
    timeouts = [f"(WorkerDict pid={5100 + r}) [rank{r}]:[E1129 12:00:25.428029551 compiler_depend.ts:574] [Rank {r}] Watchdog "
                f"caught collective operation timeout: WorkHCCL(SeqNum=4196, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
                f"1800185 milliseconds before timing out." for r in (0, 1, 2, 3)]
    wrappers = [
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() (pid=5107, ip=10.0.0.2)",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        "Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=32']",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ]
    # The timeouts are flushed first: order in the file must not matter.
    result = verdict(healthy_lines(12, 100) + timeouts + oom_rank + wrappers)
    assert result.class_id == "device_oom"
    assert result.phase == "actor_update"
    assert result.retryable is True
    assert set(result.secondary) == {"collective_timeout", "ray_actor_died"}
    assert result.step == 12 and result.total_steps == 100
    assert result.lines[0].text.startswith("RuntimeError: NPU out of memory")


def test_ray_memory_monitor_makes_a_wrapped_oom_a_host_oom():
    lines = ["ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_generate_sequences()"] + excerpt("S-HOOM-01")
    assert verdict(lines).class_id == "host_oom"


def test_healthy_log_with_noise_has_no_class():
    lines = healthy_lines(60, 200) + excerpt("S-DEP-06") + excerpt("S-SWAN-03")
    result = verdict(lines)
    assert result.class_id is None and result.secondary == []
    assert (result.step, result.total_steps, result.last_checkpoint_step) == (60, 200, 50)
    assert result.swanlab_url == "https://swanlab.cn/@rl-team/verl-dapo/runs/x1y2z3"
    assert result.metrics["critic/score/mean"] == pytest.approx(0.16)


def test_a_single_skipped_step_is_not_divergence_but_a_streak_is():
    one = healthy_lines(5) + ["(WorkerDict pid=9092) WARN: grad_norm is not finite: nan"]
    assert verdict(one).class_id is None
    streak = healthy_lines(5) + [metric_line(s).replace("actor/grad_norm:0.231", "actor/grad_norm:nan") for s in (6, 7, 8)]
    assert verdict(streak).class_id == "nan_loss"
    assert verdict(healthy_lines(5) + [metric_line(6, numpy_repr=True, pg_loss="np.float64(nan)")]).class_id == "nan_loss"


def test_warning_level_ray_spill_does_not_mask_a_fatal_class():
    result = verdict(excerpt("S-DISK-03") + excerpt("S-HYD-04"))
    assert result.class_id == "hydra_config_error" and result.secondary == ["disk_full"]
    alone = verdict(excerpt("S-DISK-03"))
    assert alone.class_id == "disk_full" and alone.severity == "warning" and not alone.failed


@pytest.mark.parametrize("line, class_id", [
    # Shapes of the same kinds that are not in the reference.
    ("torch.OutOfMemoryError: NPU out of memory. Tried to allocate 1.91 GiB (NPU 0; 29.50 GiB total capacity)", "device_oom"),
    ("ValueError: To serve at least one request with the models's max seq len (32768), (4.5 GiB KV cache is needed, "
     "which is larger than the available KV cache memory (2.1 GiB).", "rollout_kv_cache_insufficient"),
    ("ImportError: libascend_hal.so: cannot open shared object file: No such file or directory", "cann_env_error"),
    ("omegaconf.errors.ConfigAttributeError: Key 'rollout_n' is not in struct", "hydra_config_error"),
    ("AssertionError: real_train_batch_size (96) must be divisible by minimal possible batch size (64)", "config_validation_error"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/data/dapo-math-17k.parquet'", "data_path_error"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/global_step_50/actor/model.pt'", "disk_full"),
    ("[2026-01-02 10:00:00,000 E 1 1] gcs_rpc_client.h:179: Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds.",
     "ray_cluster_startup"),
    ("ValueError: Total available NPUs 8.0 is less than total desired NPUs 16", "ray_insufficient_resources"),
    ("AttributeError: module 'vllm.distributed.parallel_state' has no attribute 'get_tp_group'", "dependency_version_mismatch"),
    ("[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", "collective_init_failure"),
    ("swanlab: Error: 401 Unauthorized, please check your api key", "swanlab_error"),
    ("NotImplementedError: sequence_length=9001 is larger than max_length=2048", "prompt_too_long"),
    ("run_training.sh: line 61: 4242 Killed                  python3 -m recipe.dapo.main_dapo", "host_oom"),
    ("RuntimeError: call aclrtMalloc failed, ACL_ERROR_RT_MEMORY_ALLOCATION", "device_oom"),
    ("RuntimeError: Initialize:compiler_depend.ts:217 NPU function error: aclrtSetDevice(device_index), error code is 507033",
     "cann_env_error"),
    ("hydra.errors.ConfigCompositionException: Could not load 'actor/dp_actorr'.", "hydra_config_error"),
    ("torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
     "c10d key-value store by key '0', but store->get('0') got error: wait timeout after 600000ms", "collective_init_failure"),
    ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.", "ray_actor_died"),
    ("OSError: Can't load the configuration of '/models/foo'.", "model_path_error"),
    ("Token indices sequence length is longer than the specified maximum sequence length for this model (5000 > 4096).",
     None),  # a tokenizer warning, not a failure
])
def test_signatures_cover_kinds_not_just_excerpts(line, class_id):
    assert verdict(["(TaskRunner pid=1) " + line]).class_id == class_id


def test_eager_and_fast_scans_agree():
    lines = healthy_lines(75, 300) + excerpt("S-HOOM-06")
    fast, eager = verdict(lines), verdict(lines, eager=True)
    assert fast.as_dict() == eager.as_dict()
    assert fast.class_id == "host_oom" and fast.step == 75 and fast.last_checkpoint_step == 50


def test_line_numbers_are_those_of_the_file(tmp_path):
    lines = healthy_lines(3) + excerpt("S-RCS-02")
    scanner = LogScanner(eager=False)
    data = ("\n".join(lines) + "\n").encode()
    cut = data.rfind(b"\n", 0, len(data) // 2) + 1
    scanner.feed(data[:cut])
    scanner.feed(data[cut:])
    result = diagnose(scanner)
    assert result.lines[0].line == len(lines)
    assert result.lines_read == len(lines)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_stall_after_max_of_floor_and_five_median_steps():
    clock, events = Clock(), []
    scanner = LogScanner(clock=clock, on_event=events.append)
    scanner.feed_lines([metric_line(s) for s in (1, 2, 3)])  # timing_s/step 130.2 -> 5x = 651 s > 600 s
    clock.now += 640
    assert scanner.check_stall() is None
    clock.now += 20
    stalled = scanner.check_stall()
    assert isinstance(stalled, Stalled) and stalled.step == 3 and stalled.seconds == pytest.approx(660)
    assert scanner.check_stall() is None  # once per stall
    scanner.feed_lines([metric_line(4)])  # a new step re-arms it
    clock.now += 30
    assert scanner.check_stall(min_seconds=10) is None  # 5 x 130 s still rules
    assert events.count(stalled) == 1


def test_failure_events_are_delivered_once_per_signature():
    events = []
    scanner = LogScanner(on_event=events.append)
    scanner.feed_lines(excerpt("S-NAN-02"))  # eight ranks report the same skipped step
    failures = [e for e in events if isinstance(e, FailureSeen)]
    assert len(failures) == 1 and failures[0].class_id == "nan_loss" and failures[0].line == 3


RAY = Path(__file__).parent / "fixtures" / "ray"


def test_rays_npu_probe_traceback_is_a_warning_and_never_ends_a_run():
    """Real `ray start --head --resources '{"NPU": 8}'` output (Ray 2.60, no CANN): Ray logs `No module named
    'acl'` with a traceback and starts. A fatal reading made the supervisor stop a healthy run 120 s later."""
    started = (RAY / "start-head-npu-without-acl.log").read_text().splitlines()
    events: list = []
    scanner = LogScanner(on_event=events.append)
    scanner.feed_lines(started + healthy_lines(5))
    result = diagnose(scanner)
    assert [(e.class_id, e.severity) for e in events if isinstance(e, FailureSeen)] == [("ray_npu_type_unknown", "warning")]
    assert result.class_id == "ray_npu_type_unknown" and not result.failed and "set_env.sh" in result.fix
    assert verdict(started + excerpt("S-DOOM-01")).class_id == "device_oom"  # a real cause after it wins
    missing = verdict(started + ["ModuleNotFoundError: No module named 'swanlab'"])
    assert missing.class_id == "missing_python_package" and missing.secondary == ["ray_npu_type_unknown"]


def test_a_ray_head_that_timed_out_is_rays_start_up_and_start_verl_tries_again():
    """The raylet missed Ray's fixed 30 s registration wait (seen in CI): a warning while start_verl.sh tries again,
    the cause when the tries ran out; the acl lines before it do not outrank it."""
    started = (RAY / "start-head-npu-without-acl.log").read_text().splitlines()
    timed_out = (RAY / "start-head-timed-out.tail.log").read_text().splitlines()
    events: list = []
    scanner = LogScanner(on_event=events.append)
    scanner.feed_lines(started + timed_out)
    result = diagnose(scanner)
    assert not [e for e in events if isinstance(e, FailureSeen) and e.severity == "fatal"]
    assert result.class_id == "ray_cluster_startup" and result.retryable
    assert "VERL_DEPLOY_RAY_START_TRIES" in result.cause and result.secondary == ["ray_npu_type_unknown"]


# what start_verl.sh prints when its first `ray start` fails and the second starts (a stale session's port), then the
# hand-over line run_training.sh prints before the trainer
*RAY_RETRIED, HANDED_OVER = (RAY / "start-retried-then-handed-over.log").read_text().splitlines()


def test_a_failure_the_scripts_survived_never_outranks_the_trainings_own():
    """A fatal line before the hand-over was survived (the scripts went on); what the training printed after it is
    the run's end, even where the class table ranks the survived class first (ray_cluster_startup before nan_loss)."""
    diverged = [metric_line(4, pg_loss="nan")]
    after = verdict(RAY_RETRIED + [HANDED_OVER] + healthy_lines(3) + diverged)
    assert after.class_id == "nan_loss" and after.secondary == ["ray_cluster_startup"]
    assert after.failed and not after.survived
    assert f"(line {len(RAY_RETRIED) + 1}) the log also shows ray_cluster_startup, which the scripts went on past" \
        in after.cause  # with several nodes, a node's failure before the hand-over can be the root
    # without the hand-over line (the scripts never reached the trainer), precedence is the table's
    assert verdict(RAY_RETRIED + healthy_lines(3) + diverged).class_id == "ray_cluster_startup"
    # the same class again after the hand-over is the training's own: no note that it was survived
    again = verdict(RAY_RETRIED + [HANDED_OVER] + healthy_lines(3) + [RAY_RETRIED[1]] + diverged)
    assert again.class_id == "ray_cluster_startup" and "handed over" not in again.cause


def test_a_survived_failure_alone_is_named_with_where_it_came_from():
    """Nothing the training printed is known (it was killed, or died of what no signature knows): the survived line
    is still the only lead (on several nodes it can be a worker's), and the verdict says it came before the hand-over."""
    lines = RAY_RETRIED + [HANDED_OVER] + healthy_lines(2) + ["Segmentation fault (core dumped)"]
    result = verdict(lines)
    assert result.class_id == "ray_cluster_startup" and result.survived and not result.failed
    assert f"before the scripts handed over to the training (line {len(RAY_RETRIED) + 1})" in result.cause
    assert result.retryable is None  # it did not end the run: no word on retrying it
    assert verdict(lines, eager=True).cause == result.cause


def test_diagnose_names_a_survived_line_as_such_and_exits_0(tmp_path):
    """A healthy training whose first `ray start` was retried: `diagnose` says what it saw, and that nothing failed
    after the hand-over (exit 0), not a failure with a retry to make."""
    log = tmp_path / "train.log"
    log.write_text("\n".join(RAY_RETRIED + [HANDED_OVER] + healthy_lines(3)) + "\n")
    result = run_cli("diagnose", str(log))
    verdict_line = next(line for line in result.stdout.splitlines() if line.startswith("verdict"))
    assert result.returncode == 0, result.stdout
    assert verdict_line.split()[1:3] == ["survived", "ray_cluster_startup:"] and "went on past it" in verdict_line
    assert "retry" not in verdict_line
    data = json.loads(run_cli("diagnose", str(log), "--json").stdout)
    assert data["class"] == "ray_cluster_startup" and data["survived"] is True and data["retryable"] is None


# -- the command ---------------------------------------------------------------------------------

def test_diagnose_json_shape(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\n".join(healthy_lines(7, 50) + excerpt("S-CTO-02") + excerpt("S-DOOM-04")) + "\n")
    result = run_cli("diagnose", str(log), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert {"class", "phase", "cause", "fix", "retryable", "lines", "step", "total_steps", "metrics", "swanlab_url"} <= set(data)
    assert data["class"] == "device_oom" and data["secondary"] == ["collective_timeout"]
    assert data["step"] == 7 and data["total_steps"] == 50
    assert data["metrics"]["perf/throughput"] == 2175.1
    assert any("EL0004" in line["text"] for line in data["lines"])


def test_diagnose_healthy_log_and_stdin(tmp_path):
    text = "\n".join(healthy_lines(4, 10)) + "\n"
    result = run_cli("diagnose", "-", "--json", input=text)
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["class"] is None and data["retryable"] is None and data["step"] == 4
    human = run_cli("diagnose", "-", input=text)
    assert human.returncode == 0 and "no failure found" in human.stdout and "step 4/10" in human.stdout


def test_diagnose_human_output_names_class_phase_fix_and_lines(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("\n".join(excerpt("S-DOOM-01")) + "\n")
    result = run_cli("diagnose", str(log))
    assert result.returncode == 1
    out = " ".join(result.stdout.split())
    assert "device_oom" in out and "during log-prob" in out
    assert "entropy_checkpointing=True" in out and "13: torch.OutOfMemoryError" in out


def test_diagnose_says_a_warning_is_one_in_words_where_no_colour_shows():
    """Ray's start output on an NPU host without CANN's `acl` (piped: no colour) reads as a warning, not a failure."""
    result = run_cli("diagnose", str(RAY / "start-head-npu-without-acl.log"))
    verdict = next(line for line in result.stdout.splitlines() if line.startswith("verdict"))
    assert result.returncode == 0 and "\x1b[" not in result.stdout
    assert verdict.split()[1:3] == ["warning", "ray_npu_type_unknown:"] and "nothing failed; the run may go on" in verdict
    assert "retry" not in verdict


def test_diagnose_missing_file_is_one_line_and_exit_2(tmp_path):
    result = run_cli("diagnose", str(tmp_path / "nope.log"))
    assert result.returncode == 2
    assert "LOGFILE" in result.stderr and "does not exist" in result.stderr and "Traceback" not in result.stderr


WRITER = """
import sys, time
sys.path.insert(0, sys.argv[2])
from verl_logs import healthy_lines
path = sys.argv[1]
with open(path, "a", buffering=1) as f:
    for line in healthy_lines(6, 6):
        f.write(line + "\\n")
        time.sleep(0.002)
    f.write("Training Progress: 100%|##########| 6/6 [13:01<00:00, 130.20s/it]")  # a tqdm bar without newline
    time.sleep(0.5)
    f.write("\\n(WorkerDict pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\\n")
"""


def test_diagnose_follow_prints_events_as_a_process_writes(tmp_path):
    log = tmp_path / "live.log"
    log.write_text("(TaskRunner pid=1) an earlier line\n")
    follower = subprocess.Popen([*VERL_BIN, "diagnose", str(log), "--follow", "--json", "--idle-exit", "2"],
                                stdout=subprocess.PIPE, text=True)
    first = json.loads(follower.stdout.readline())
    assert first == {"event": "following", "source": str(log), "lines": 1, "step": 0, "total_steps": None}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(Path(__file__).parent)])
    writer.wait(timeout=30)
    out, _ = follower.communicate(timeout=60)
    records = [json.loads(line) for line in out.splitlines()]
    kinds = [r["event"] for r in records]
    steps = [r["step"] for r in records if r["event"] == "metrics"]
    assert steps == [1, 2, 3, 4, 5, 6]  # each once, in order
    assert kinds.index("total_steps") < kinds.index("swanlab") < kinds.index("metrics")
    assert [r["step"] for r in records if r["event"] == "progress"][-1] == 6
    failure = next(r for r in records if r["event"] == "failure")
    assert failure["class_id"] == "device_oom" and failure["line"] == 1 + len(healthy_lines(6, 6)) + 2  # after the bar's line
    assert records[-1]["event"] == "diagnosis" and records[-1]["class"] == "device_oom" and records[-1]["step"] == 6
    assert follower.returncode == 1


@pytest.mark.timeout(900)  # CPU-bound for minutes on a 2-core machine shared with the other workers
def test_one_gigabyte_log_scans_in_bounded_memory(tmp_path):
    log = tmp_path / "big.log"
    steps = write_big_log(log, 1 << 30, tail=excerpt("S-DOOM-03") + excerpt("S-CTO-05"))
    assert log.stat().st_size > 1 << 30
    # A parent that reports the peak memory of its one child: the CLI as a user runs it.
    measure = ("import json, resource, subprocess, sys; "
               "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(json.dumps({'out': r.stdout, 'err': r.stderr, 'rc': r.returncode, "
               "'peak_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", measure, *VERL_BIN, "diagnose", str(log), "--json"],
                         capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    report = json.loads(run.stdout)
    assert report["rc"] == 1, report["err"]
    result = subprocess.CompletedProcess([], report["rc"], report["out"], report["err"])
    peak_mib = report["peak_kib"] / 1024
    data = json.loads(result.stdout)
    assert data["class"] == "device_oom" and data["secondary"] == ["collective_timeout"]
    assert data["step"] == steps and data["total_steps"] == 10_000_000
    assert data["lines_read"] == sum(1 for _ in open(log, "rb"))
    assert peak_mib < 150, f"peak {peak_mib:.0f} MiB"
    print(f"1 GiB log: {elapsed:.1f} s, peak {peak_mib:.0f} MiB")


def test_follow_reads_a_tqdm_bar_that_has_no_newline_yet(tmp_path):
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.reader import follow

    log = tmp_path / "bar.log"
    log.write_bytes(b"Total training steps: 10\nTraining Progress:  10%|#| 1/10 [02:10<19:30, 130.0s/it]"
                    b"\rTraining Progress:  20%|##| 2/10 [04:20<17:20, 130.0s/it]")
    events = []
    scanner = LogScanner(on_event=events.append)
    follower = LogFollower(log)
    follow(follower, scanner, poll=0.01, idle_exit=0.1)
    assert scanner.state.step == 2 and scanner.state.total_steps == 10
    assert scanner.lines == 2  # the unfinished line is counted once the follow ends


def test_also_seen_says_which_classes_are_symptoms_warnings_or_survived(tmp_path):
    """Beside the verdict, a class is called a symptom only if it is a failure of the training: the acl warning and a
    `ray start` the scripts retried are named for what they are, on their own lines."""
    acl = (RAY / "start-head-npu-without-acl.log").read_text().splitlines()
    log = tmp_path / "train.log"
    log.write_text("\n".join(RAY_RETRIED + acl + [HANDED_OVER] + healthy_lines(2) + excerpt("S-DOOM-01")
                             + ["torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation "
                                "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 "
                                "milliseconds before timing out."]) + "\n")
    data = json.loads(run_cli("diagnose", str(log), "--json").stdout)
    assert data["class"] == "device_oom"
    assert data["secondary_warnings"] == ["ray_npu_type_unknown"]
    assert data["secondary_survived"] == ["ray_cluster_startup"]
    assert "collective_timeout" in data["secondary"]
    seen = [line for line in run_cli("diagnose", str(log)).stdout.splitlines() if line.startswith("also seen")]
    assert any(line.split()[2].startswith("collective_timeout") and "usually symptoms" in line for line in seen), seen
    assert any("ray_cluster_startup" in line and "before the hand-over" in line for line in seen), seen
    assert any("ray_npu_type_unknown" in line and "warnings: nothing failed there" in line for line in seen), seen
    assert not any("usually symptoms" in line and ("ray_npu" in line or "ray_cluster" in line) for line in seen)


def test_a_signature_the_scripts_survived_is_reported_again_when_the_training_prints_it():
    """The scanner reports a signature once; a line before the hand-over was survived, so the same failure printed
    by the training is reported again (the supervisor's grace and the report's mark start from it)."""
    events: list = []
    scanner = LogScanner(on_event=events.append)
    gcs = next(line for line in RAY_RETRIED if "Failed to connect to GCS" in line)
    lines = RAY_RETRIED + [HANDED_OVER] + healthy_lines(3) + [gcs, gcs]
    scanner.feed_lines(lines)
    seen = [(e.class_id, e.line) for e in events if isinstance(e, FailureSeen) and e.severity == "fatal"]
    after = len(lines) - 1
    assert seen == [("ray_cluster_startup", 2), ("ray_cluster_startup", after)]  # once before, once after; no more
    result = diagnose(scanner)
    assert result.class_id == "ray_cluster_startup" and result.failed and not result.survived
