"""The recovery policy on real diagnoses of real failure lines (seed 000's ladder, told apart by class)."""

from pathlib import Path

from verl_deploy.runs.recovery import decide
from verl_deploy.backends.slurm import outcome, parse_job
from verl_deploy.sources import resolve
from verl_deploy.watch.diagnosis import diagnose
from verl_deploy.watch.scan import LogScanner

FAILURES = Path(__file__).parent / "fixtures" / "failures"
RAY = Path(__file__).parent / "fixtures" / "ray"


def diagnosis_of(name: str, *extra: str):
    scanner = LogScanner(eager=False)
    scanner.feed_lines([*extra, *(FAILURES / f"{name}.log").read_text().splitlines()])
    return diagnose(scanner)


def spec(**flags):
    return resolve(flags=flags, environ={})


def test_megatron_ladder_offload_then_recompute_then_stop():
    oom = diagnosis_of("S-DOOM-02", "ray::WorkerDict.actor_rollout_update_actor()")
    first = decide(oom, spec(), 0, [])
    assert first.retry and first.added == ["offload"] and first.changes == {"oom_features": ["offload"]}
    second = decide(oom, spec(oom_features=["offload"]), 1, ["offload"])
    assert second.retry and second.changes == {"oom_features": ["offload", "recompute"]}
    third = decide(oom, spec(oom_features=["offload", "recompute"], max_oom_retries=5), 2, ["recompute"])
    assert not third.retry and "already on" in third.reason


def test_user_features_are_kept_and_count_as_rungs():
    oom = diagnosis_of("S-DOOM-02")
    decision = decide(oom, spec(features=["offload"]), 0, [])
    assert decision.changes == {"oom_features": ["recompute"]}


def test_retries_are_bounded_by_max_oom_retries():
    oom = diagnosis_of("S-DOOM-02")
    decision = decide(oom, spec(max_oom_retries=1), 1, ["offload"])
    assert not decision.retry and "MAX_OOM_RETRIES=1" in decision.reason


def test_fsdp_uses_gradient_checkpointing_as_its_second_rung():
    oom = diagnosis_of("S-DOOM-01")
    first = decide(oom, spec(framework="fsdp", features=["-gradient_checkpointing"]), 0, [])
    assert first.changes == {"oom_features": ["offload"]}
    second = decide(oom, spec(framework="fsdp", features=["-gradient_checkpointing"], oom_features=["offload"]), 1, [])
    assert second.retry and second.changes == {"oom_features": ["offload", "gradient_checkpointing"]}


def test_rollout_oom_and_kv_cache_lower_utilization_with_a_floor():
    kv = diagnosis_of("S-KV-01")
    decision = decide(kv, spec(), 0, [])
    assert decision.changes == {"gpu_memory_utilization": 0.5} and decision.added == []
    assert not decide(kv, spec(gpu_memory_utilization=0.35), 0, []).retry
    wake_up = diagnosis_of("S-DOOM-06")  # CUDA OOM in vLLM wake_up: the rollout
    assert decide(wake_up, spec(), 0, []).changes == {"gpu_memory_utilization": 0.5}


def test_host_oom_never_adds_offload_and_names_the_offload_we_added():
    host = diagnosis_of("S-HOOM-06")
    decision = decide(host, spec(oom_features=["offload"]), 1, ["offload"])
    assert not decision.retry and "offload would make it worse" in decision.reason
    assert "had just added offload" in decision.reason


def test_guarded_ooms_and_other_classes_stop():
    assert not decide(diagnosis_of("S-DOOM-09"), spec(), 0, []).retry  # impossible size
    assert not decide(diagnosis_of("S-DOOM-08"), spec(), 0, []).retry  # another process holds the card
    timeout = decide(diagnosis_of("S-CTO-01"), spec(), 0, [])
    assert not timeout.retry and timeout.reason.startswith("collective_timeout")


SLURM_OUT_OF_MEMORY = ("JobId=7 JobName=verl-deploy-x JobState=OUT_OF_MEMORY Reason=OutOfMemory ExitCode=0:125 "
                       "Partition=a800 NodeList=node01 NumNodes=1")


def test_the_jobs_memory_limit_is_not_hidden_by_a_warning_or_a_line_the_scripts_survived():
    """Slurm ended the job at its memory limit; the log holds only Ray's NPU probe warning and a `ray start` failure
    that start_verl.sh retried past: the host OOM is what recovery acts on, not those lines."""
    scheduler = outcome(parse_job(SLURM_OUT_OF_MEMORY))
    npu_probe = ["2026-12-04 16:23:39,559\tERROR npu.py:82 -- Failed to detect NPU type.",
                 "ModuleNotFoundError: No module named 'acl'"]
    survived = [*(RAY / "start-retried-then-handed-over.log").read_text().splitlines(),
                "(TaskRunner pid=1) Training from scratch"]
    for lines in (npu_probe, survived, npu_probe + survived):
        scanner = LogScanner(eager=False)
        scanner.feed_lines(lines)
        seen = diagnose(scanner)
        assert seen.class_id is not None and not seen.failed
        decision = decide(seen, spec(), 0, [], scheduler=scheduler)
        assert not decision.retry and decision.reason.startswith("host (CPU) memory ran out"), lines
    scanner = LogScanner(eager=False)
    scanner.feed_lines(survived + ["ConnectionError: Failed to connect to GCS at address 192.0.2.2:6379"])
    assert decide(diagnose(scanner), spec(), 0, [], scheduler=scheduler).reason.startswith("ray_cluster_startup")
