"""Acting before a predicted device OOM: the memory estimate's `oom_response_len`, watched against the log.

With fixed micro-batches a run that fits at the start can run out of memory later: activations and
logits grow with the responses, and DAPO's responses grow as it trains. The memory estimate gives the
response length at which a micro-batch stops fitting (`memory.lengths.oom_response_len`: every response
of the micro-batch at that length, prompts at half their maximum). The supervisor compares each step's
logged lengths with it and, before the OOM, (a) notices it (step, length, OOM length, the feature that
prevents it), and (b) unless the run was launched with `--no-preempt-oom`, stops the attempt at the next
complete checkpoint and resumes from it with that feature (an attempt whose reason and feature origin say
"predicted OOM at response length N").

The rule (why these numbers): the estimate sizes a micro-batch whose responses *average* N tokens, so
the length watched is the mean response length of the heaviest micro-batch. verl logs per step
`response_length/mean` and `/max` (metric_utils.compute_data_metrics) and splits each mini-batch into
micro-batches of `ppo_micro_batch_size_per_gpu` sequences (k). The micro-batch holding the step's
longest response, the other k-1 at the step's mean, averages (max + (k-1) x mean) / k: exactly the
longest response when k = 1, the mean as k grows. With dynamic batching below its budget a micro-batch
holds the rank's whole share, so the mean. It fires when that reaches FRACTION of N: the change waits for
the next checkpoint (up to save_freq steps), during which the responses keep growing, and the other
sequences of a micro-batch can be longer than the mean.

It never loops: one change per threshold (each attempt's own estimate gives its threshold, and the
state is kept in the record), never a feature already on or one the user turned off (a feature list's `-NAME`
or a mask's 0 bit), never with dynamic batching whose token budget bounds every micro-batch (the worst step is
then the budget, not the responses), and only when the estimate says the feature prevents the OOM or moves it
later.
"""

from __future__ import annotations

import time
from typing import Any

from verl_deploy.runs import notify
from verl_deploy.runs.record import Attempt, RunRecord, save_keeping_last_good as _save
from verl_deploy.spec import RunSpec

FRACTION = 0.9  # of oom_response_len: the watched length at which the notice (and the restart) is due
REASON = "predicted OOM"  # how a pre-emptive attempt's reason (and its feature's origin) begins
TREND_POINTS = 20  # steps kept to project the step at which the OOM length is reached
MICRO_OF_PHASE = {"actor_update": "micro_batch", "log_prob": "log_prob_micro_batch",
                  "ref_log_prob": "log_prob_micro_batch", "critic_values": "critic_micro_batch",
                  "critic_update": "critic_micro_batch"}


def _estimate(spec: RunSpec) -> tuple[Any, Any]:
    """(the memory estimate, its Setup) of the spec as compiled, or (None, None) when there is none."""
    from verl_deploy.compiler import compile_plan
    from verl_deploy.memory.setup import setup_from_plan
    from verl_deploy.pipeline import estimate_memory
    from verl_deploy.profiles import Profile, profile_for_spec

    profile, _ = profile_for_spec(spec)
    if not isinstance(profile, Profile):
        return None, None
    plan = compile_plan(spec, profile)
    estimate, _ = estimate_memory(plan)
    return estimate, setup_from_plan(plan)


def outlook(estimate: Any, setup: Any) -> dict:
    """What the attempt's estimate says about growing responses: a threshold to watch, or why there is none."""
    lengths = getattr(estimate, "lengths", None)
    if lengths is None:
        return {"active": False, "why": "no memory estimate with response lengths"}
    if lengths.dynamic and lengths.budget_bound:
        return {"active": False, "why": "dynamic batching: the token budget bounds every micro-batch, whatever the "
                                        "response lengths"}
    if lengths.worst_fits or not lengths.oom_response_len:
        return {"active": False, "why": "the worst step fits" if lengths.worst_fits else
                "no response length runs out of memory (the maximum prompts do, or every length does)"}
    phases = [p for p in estimate.worst_over() if p in MICRO_OF_PHASE]
    if not phases:
        return {"active": False, "why": "only the rollout runs out of memory, and it does not grow with the responses"}
    micro = None if setup.dynamic_bsz else min(getattr(setup, MICRO_OF_PHASE[p]) for p in phases)
    return {"active": True, "oom_response_len": int(lengths.oom_response_len),
            "max_response_len": int(lengths.max_response_len), "phases": phases, "micro_batch": micro,
            "state": "watching"}


def _candidates(spec: RunSpec) -> list[str]:
    """Features that could prevent it, in order: dynamic batching, then the OOM ladder's rungs; only those off by
    their default (`features.resolve`'s origin "default", which `--no-default-features` leaves too): none on, none
    that does not apply here, none the user turned off, by `--features -NAME` or by a `--mask` bit (a mask given is
    a choice for all seven bits)."""
    from verl_deploy import features as registry

    states, _ = registry.resolve(framework=spec.framework, device=spec.device, mask=spec.mask,
                                 user_features=spec.features, no_default_features=spec.no_default_features,
                                 oom_features=spec.oom_features, estimate_features=spec.estimate_features)
    by_name = {s.name: s for s in states}
    found = []
    for name in ("dynamic_batch", *registry.oom_ladder(spec.framework)):
        state = by_name.get(name)
        if state is not None and not state.on and state.why == "default":
            found.append(name)
    return found


def prevention(spec: RunSpec, oom_len: int) -> dict:
    """The first candidate with which the estimate's worst step fits, else the first that moves the OOM to
    longer responses; {"feature": None, "advice"} when none does."""
    moved: dict | None = None
    for name in _candidates(spec):
        try:
            estimate, _ = _estimate(spec.with_changes(source="recovery", oom_features=[*spec.oom_features, name]))
        except Exception:  # noqa: BLE001 - a candidate the estimate cannot judge is not chosen
            continue
        lengths = getattr(estimate, "lengths", None)
        if lengths is None:
            continue
        if lengths.worst_fits or (lengths.dynamic and lengths.budget_bound):
            return {"feature": name, "effect": f"with {name} the memory estimate's worst step fits"}
        later = lengths.oom_response_len
        if moved is None and later and later * FRACTION > oom_len:  # its own threshold lies past this OOM
            moved = {"feature": name, "effect": f"with {name} the memory estimate runs out of memory only at about "
                                                f"{later}-token responses", "next_oom_response_len": later}
    if moved is not None:
        return moved
    return {"feature": None, "effect": "no memory feature that is off moves it (the estimate's worst step needs fewer "
                                       "tokens per device: a shorter max_response_length, a smaller micro-batch or "
                                       "token budget, or more devices)"}


def watched_length(metrics: dict, micro: int | None) -> float | None:
    """The mean response length of the step's heaviest micro-batch, as far as the logged lengths tell:
    (max + (k-1) x mean) / k for micro-batches of k sequences, the mean when a micro-batch holds the whole share."""
    mean, top = metrics.get("response_length/mean"), metrics.get("response_length/max")
    if not isinstance(mean, (int, float)) or mean != mean or mean < 0:
        return None
    if micro is None or not isinstance(top, (int, float)) or top != top or top < mean:
        return float(mean)
    return (float(top) + (micro - 1) * float(mean)) / micro


def projected_step(seen: list[list[float]], oom_len: int) -> int | None:
    """The step at which the watched length reaches oom_len at its recent rate (least squares), None when it does
    not grow."""
    if len(seen) < 3:
        return None
    steps, lengths = [p[0] for p in seen], [p[1] for p in seen]
    n = len(seen)
    mean_step, mean_len = sum(steps) / n, sum(lengths) / n
    spread = sum((s - mean_step) ** 2 for s in steps)
    if spread <= 0:
        return None
    slope = sum((s - mean_step) * (v - mean_len) for s, v in zip(steps, lengths)) / spread
    if slope <= 0:
        return None
    at = steps[-1] + (oom_len - lengths[-1]) / slope
    return max(int(steps[-1]), int(at + 0.999))


def _watch(record: RunRecord, attempt: Attempt, spec: RunSpec) -> dict:
    """The attempt's watch, computed once (the estimate and its candidates) and kept on the attempt."""
    watch = attempt.predicted_oom
    if not watch:
        try:
            estimate, setup = _estimate(spec)
            watch = outlook(estimate, setup)
            if watch["active"]:
                watch.update(prevention(spec, watch["oom_response_len"]))
        except Exception as exc:  # noqa: BLE001 - advice on top of the run: never the supervisor's death
            watch = {"active": False, "why": f"the memory estimate failed ({type(exc).__name__}: {exc})"}
        watch["preempt"] = record.preempt_oom
        attempt.predicted_oom = watch
        _save(record)
    return watch


def look(record: RunRecord, spec: RunSpec) -> bool:
    """One look at the newest metrics and checkpoints; True when the attempt must be stopped now (the predicted
    OOM's checkpoint is complete: the next attempt resumes from it with the feature)."""
    attempt = record.current
    if attempt is None or record.step <= 0:  # no lengths logged yet: nothing to compare (and no estimate to pay for)
        return False
    watch = _watch(record, attempt, spec)
    if not watch.get("active"):
        return False
    if watch["state"] == "watching":
        _follow_lengths(record, watch)
    if watch["state"] == "waiting_for_checkpoint":
        return _checkpoint_due(record, spec, watch)
    return False


def _follow_lengths(record: RunRecord, watch: dict) -> None:
    """Keep the step's watched length; at FRACTION of the OOM length, the notice (and the restart when it is on)."""
    length = watched_length(record.metrics, watch.get("micro_batch"))
    if length is None or record.step <= 0:
        return
    seen = watch.setdefault("seen", [])
    if seen and seen[-1][0] == record.step:
        return
    seen.append([record.step, round(length, 1)])
    del seen[:-TREND_POINTS]
    if length < FRACTION * watch["oom_response_len"]:
        return
    watch["fired"] = {"step": record.step, "length": round(length, 1), "time": time.time(),
                      "mean": record.metrics.get("response_length/mean"), "max": record.metrics.get("response_length/max"),
                      "projected_step": projected_step(seen, watch["oom_response_len"])}
    restart = bool(watch["feature"]) and watch.get("preempt", True) and _checkpoints_on(record)
    watch["state"] = "waiting_for_checkpoint" if restart else "noticed"
    _notice(record, watch, restart)


def _checkpoints_on(record: RunRecord) -> bool:
    return int(record.spec.get("save_freq") or 0) > 0


def _notice(record: RunRecord, watch: dict, restart: bool) -> None:
    fired, oom = watch["fired"], watch["oom_response_len"]
    micro = watch.get("micro_batch")
    how = (f"response_length/mean {_n(fired['mean'])}" +
           (f", /max {_n(fired['max'])}, micro-batches of {micro}" if micro and fired.get("max") is not None else ""))
    when = f"; at this rate around step {fired['projected_step']}" if fired.get("projected_step") else ""
    feature = watch.get("feature")
    if restart:
        action = f"adding {feature} at the next complete checkpoint and resuming from it"
        fix = f"nothing to do: the supervisor restarts the run with {feature} ({watch['effect']})"
    elif feature and not watch.get("preempt", True):
        action = f"{feature} prevents it ({watch['effect']}); not restarted: the run was launched with --no-preempt-oom"
        fix = (f"`verl-deploy stop {record.id}` then `verl-deploy resume {record.id} --features {feature}`, or let the "
               "OOM ladder react when it happens")
    elif feature:
        action = f"{feature} prevents it, but the run saves no checkpoints (save_freq): not restarted"
        fix = f"`verl-deploy stop {record.id}` and relaunch with --features {feature} and checkpoints on"
    else:
        action = watch["effect"]
        fix = "when the OOM comes the ladder adds what is left; or stop and resume with a shorter --max-response-length"
    title = (f"predicted OOM at response length {oom}: at step {fired['step']} the micro-batches reach about "
             f"{fired['length']:.0f} tokens ({how}){when}; {action}")
    entry = notify.notice(record, title, failure={"class": "predicted_oom", "phase": ", ".join(watch["phases"]),
                                                  "cause": title, "fix": fix})
    entry["kind"] = "predicted_oom"
    _save(record)


def _n(value: object) -> str:
    return f"{value:.0f}" if isinstance(value, (int, float)) else "?"


def _checkpoint_due(record: RunRecord, spec: RunSpec, watch: dict) -> bool:
    """The newest complete checkpoint is at or past the step the notice was given, and the training has steps
    left after it: stop now."""
    from verl_deploy.runs.checkpoints import resume_point

    point = resume_point(spec.effective_ckpts_dir, spec.framework)
    total = record.total_steps or spec.train_steps
    if point.step is None or point.step < watch["fired"]["step"]:
        return False
    if total and point.step >= total:
        watch["state"] = "noticed"  # the training ends at that checkpoint: nothing left to protect
        _save(record)
        return False
    watch["state"] = "stopping"
    watch["checkpoint"] = point.step
    _save(record)
    return True


def stopping(attempt: Attempt) -> bool:
    """The supervisor stopped this attempt to resume it with the feature (not a failure)."""
    return attempt.predicted_oom.get("state") == "stopping"


def next_attempt(record: RunRecord, attempt: Attempt, spec: RunSpec) -> tuple[str, dict, str, str]:
    """(reason, spec changes, feature, notice title) of the attempt that resumes with the feature."""
    watch = attempt.predicted_oom
    feature, oom, fired = watch["feature"], watch["oom_response_len"], watch["fired"]
    origin = f"{REASON} at response length {oom}"
    record.predicted_features = {**record.predicted_features, feature: origin}
    watch["state"] = "restarted"
    reason = (f"{origin} (step {fired['step']}: micro-batches at about {fired['length']:.0f} tokens): adding "
              f"{feature}")
    title = (f"{origin}: attempt {attempt.n} stopped at the complete checkpoint of step {watch.get('checkpoint')}; "
             f"attempt {attempt.n + 1} resumes from it with {feature}")
    return reason, {"oom_features": [*spec.oom_features, feature]}, feature, title


def public(watch: dict) -> dict | None:
    """The watch as status --json shows it (no trend points)."""
    if not watch:
        return None
    return {k: v for k, v in watch.items() if k != "seen"}


def summary(watch: dict) -> str | None:
    """One line for `status` while the attempt is watched or after it fired (None when there is nothing to say)."""
    if not watch.get("active"):
        return None
    oom, state = watch["oom_response_len"], watch.get("state")
    fired = watch.get("fired") or {}
    then = f"then {watch['feature']} at the next checkpoint" if watch.get("feature") and watch.get("preempt", True) \
        else "then a notice"
    if state == "watching":
        seen = watch.get("seen") or []
        now = f"; now about {seen[-1][1]:.0f}" if seen else ""
        return (f"memory: the estimate runs out at {oom}-token micro-batch responses{now}; at "
                f"{FRACTION * oom:.0f}: {then}")
    if state in ("waiting_for_checkpoint", "stopping"):
        return (f"predicted OOM at response length {oom} (step {fired.get('step')}): adding {watch['feature']} at the "
                "next complete checkpoint")
    if state == "noticed":
        return f"predicted OOM at response length {oom} (step {fired.get('step')}): {watch.get('effect')}"
    return None
