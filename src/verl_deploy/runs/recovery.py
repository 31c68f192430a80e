"""What to do after a failed attempt (seed 000's OOM policy, made to tell failures apart).

Device OOM in training or log-prob: add the next memory feature of the ladder (offload, then
recompute; on FSDP, where recompute is not a feature, gradient checkpointing) and resume. Rollout
KV-cache OOM: lower rollout.gpu_memory_utilization by 0.1, not below 0.3 — offload does not help
there. Host OOM: never add offload (it moves more into host memory); stop and say so, naming the
offload this tool added if it did. Everything else: stop with the cause and the fix. User
features are never removed; MAX_OOM_RETRIES bounds the retries.

A scheduler may end an attempt itself (a failed or preempted node): the training was fine, so
the same spec is resubmitted and resumes (at most MAX_RESUBMITS times). What a scheduler says of
an end the log does not explain (its own memory limit, its time limit) becomes the failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_deploy import features as registry
from verl_deploy.spec import SPLIT_MODES, RunSpec
from verl_deploy.watch.diagnosis import Diagnosis

MIN_UTILIZATION = 0.3
UTILIZATION_STEP = 0.1
MAX_RESUBMITS = 3
RESUBMIT_REASON = "resubmitted"  # the reason of an attempt that repeats one the scheduler ended
RESUME_REASON = "resumed by `verl-deploy resume`"  # the retry budget counts again from such an attempt
ADVICE = ("give each device less work: a smaller max_response_length or batch, more devices, or a larger "
          "TP/PP (--train-tp/--train-pp)")


@dataclass
class Decision:
    retry: bool
    reason: str
    changes: dict = field(default_factory=dict)  # spec fields for the next attempt
    added: list[str] = field(default_factory=list)  # memory features added


def _ladder(spec: RunSpec) -> tuple[str, ...]:
    return registry.oom_ladder(spec.framework)


def _states(spec: RunSpec) -> dict[str, bool]:
    states, _ = registry.resolve(framework=spec.framework, device=spec.device, mask=spec.mask,
                                 user_features=spec.features, no_default_features=spec.no_default_features,
                                 oom_features=spec.oom_features, estimate_features=spec.estimate_features)
    return {s.name: s.on for s in states}


def decide(diagnosis: Diagnosis, spec: RunSpec, retries_done: int, added_before: list[str], *,
           scheduler: dict | None = None, resubmits_done: int = 0) -> Decision:
    """`retries_done`: recovery attempts so far; `added_before`: features this tool added last time;
    `scheduler`: the scheduler's word on the ended attempt (Backend.scheduler_state)."""
    if scheduler and scheduler.get("resubmit"):
        return _resubmit(scheduler, resubmits_done)
    failure = _failure_class(diagnosis, scheduler)
    if isinstance(failure, Decision):
        return failure
    if retries_done >= spec.max_oom_retries and failure in ("device_oom", "rollout_kv_cache_insufficient"):
        return Decision(False, f"{failure} again after {retries_done} automatic retries (MAX_OOM_RETRIES="
                               f"{spec.max_oom_retries}); {ADVICE}")
    if failure == "device_oom" and diagnosis.retryable is False:
        return Decision(False, "device OOM that a retry will not fix: " + (diagnosis.cause or ""))
    if failure == "rollout_kv_cache_insufficient" or (failure == "device_oom" and diagnosis.phase == "rollout"):
        return _rollout_oom(failure, spec)
    if failure == "device_oom":
        return _training_oom(diagnosis, spec)
    if failure == "host_oom":
        return _host_oom(added_before)
    return Decision(False, f"{failure}: {diagnosis.cause or ''}".strip())


def _failure_class(diagnosis: Diagnosis, scheduler: dict | None) -> str | Decision:
    """What failed: the training's own fatal class in the log, else what the scheduler says ended the job (its memory
    limit is the host's OOM), else the log's warning or survived class; a Decision to stop when none names a failure
    recovery knows."""
    sched_failure = (scheduler or {}).get("failure") or {}
    if diagnosis.class_id is not None and diagnosis.failed:
        return diagnosis.class_id
    if sched_failure.get("class") == "host_oom":  # the job's memory limit, under a warning or a survived line
        return "host_oom"
    if sched_failure:
        return Decision(False, f"{sched_failure.get('cause')}; {sched_failure.get('fix')}")
    if diagnosis.class_id is not None:
        return diagnosis.class_id
    return Decision(False, "the training exited with an error but the log names no known failure; "
                           "see `verl-deploy logs --errors`")


def _resubmit(scheduler: dict, resubmits_done: int) -> Decision:
    """The scheduler ended the job (a failed or preempted node): the same spec again, a bounded number of times."""
    what = f"{scheduler.get('state')}: {scheduler.get('cause') or scheduler.get('reason') or ''}".rstrip(": ")
    if resubmits_done >= MAX_RESUBMITS:
        return Decision(False, f"the scheduler ended the job again ({what}) after {resubmits_done} resubmissions; "
                               "ask the cluster's admins about the nodes")
    return Decision(True, f"{RESUBMIT_REASON}: the scheduler ended the job ({what}), not the training")


def _rollout_oom(failure: str, spec: RunSpec) -> Decision:
    """The rollout's KV cache: a lower gpu_memory_utilization (offload does not help there), not below the floor."""
    lowered = round(spec.gpu_memory_utilization - UTILIZATION_STEP, 2)
    if lowered < MIN_UTILIZATION:
        return Decision(False, f"{failure} in the rollout with gpu_memory_utilization already at "
                               f"{spec.gpu_memory_utilization}; raise the rollout TP (--gen-tp) or shorten the sequences")
    pool = f" pool (its own {spec.rollout_gpus} devices per node)" if spec.mode in SPLIT_MODES else ""
    return Decision(True, f"{failure} in the rollout{pool}: gpu_memory_utilization {spec.gpu_memory_utilization} -> "
                          f"{lowered}",
                    {"gpu_memory_utilization": lowered})


def _training_oom(diagnosis: Diagnosis, spec: RunSpec) -> Decision:
    """Device OOM in training or log-prob: the next memory feature of the ladder that is not on yet."""
    states = _states(spec)
    for name in _ladder(spec):
        feature = registry.BY_NAME[name]
        if feature.applies_to(spec.framework, spec.device) and not states.get(name):
            pool = f" in the trainer pool ({spec.trainer_gpus} devices per node)" if spec.mode in SPLIT_MODES else ""
            return Decision(True, f"device OOM during {diagnosis.phase_label or 'training'}{pool}: adding {name}",
                            {"oom_features": [*spec.oom_features, name]}, [name])
    return Decision(False, f"device OOM with {', '.join(_ladder(spec))} already on; {ADVICE}")


def _host_oom(added_before: list[str]) -> Decision:
    """Host memory: never offload (it moves more into host memory); name the offload this tool added, if it did."""
    note = (f" This tool had just added {', '.join(added_before)}, which moves state into host memory: "
            f"relaunch without it (--features -{added_before[0]}) if device memory allows."
            if "offload" in added_before else "")
    return Decision(False, "host (CPU) memory ran out; offload would make it worse, so no retry." + note)
