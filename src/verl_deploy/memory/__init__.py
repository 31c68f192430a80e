"""Memory estimate: peak memory per device for each phase of a verl step, before launching.

``estimate_plan(plan)`` reads the model's config.json, the compiled plan (what verl will get) and
the device's memory, and returns a ``MemoryEstimate`` (phases with their terms and formulas,
fits, host memory per node, what would make it fit, the assumptions) or None with the reason.
Modules: model (config.json -> shape), setup (plan -> inputs), device_memory, terms (one formula
each), phases (terms alive per phase), estimate (fits and needs), calibration (the OOM log).
"""

from __future__ import annotations

from pathlib import Path

from verl_deploy.memory import calibration
from verl_deploy.memory.device_memory import device_memory
from verl_deploy.memory.estimate import (MEMORY_FEATURES, MemoryEstimate, build, find_alternative, find_needs,
                                         length_outlook, memory_features_on)
from verl_deploy.memory.model import load_shape
from verl_deploy.memory.setup import Setup, setup_from_plan

__all__ = ["MemoryEstimate", "estimate_plan", "needed_features"]


def _features_on(setup: Setup) -> list[str]:
    """The memory features a setup has, in the ladder's order."""
    on = memory_features_on(setup)
    return [f for f in MEMORY_FEATURES[setup.framework] if f in on]


def _seen_ran(estimate: MemoryEstimate, entries, shape, setup: Setup, device, on: list[str]) -> None:
    """A clean run of this very configuration in the calibration log: it fits, and plan names the run."""
    ran = calibration.clean_runs(entries, shape.identity, setup.layout(), device.total_gb, setup.workload(), tuple(on))
    if not ran:
        return
    last = ran[-1]
    estimate.seen_ran = (f"calibration log ({last.name or 'this model'} [{last.model}], {last.layout}, "
                         f"{last.device_gb:g} GB, {last.time or 'undated'}): this configuration ran cleanly"
                         + (f", device peak {last.peak_gb:.1f} GiB (perf/max_memory_reserved_gb)"
                            if last.peak_gb is not None else ""))
    estimate.seen_peak_gb = last.peak_gb


def _lesson(estimate: MemoryEstimate, lesson, setup: Setup, on: list[str]) -> tuple[list[str], list[str]]:
    """What one OOM lesson of the calibration log requires: (features, knob changes); it marks the phase it saw."""
    ladder = MEMORY_FEATURES[setup.framework]
    seen = (f"calibration log ({lesson.name or 'this model'} [{lesson.model}], {lesson.layout}, "
            f"{lesson.device_gb:g} GB, {lesson.time or 'undated'}): OOM in {lesson.phase} with "
            f"{', '.join(lesson.features_on) or 'no memory features'}")
    if not lesson.added:  # the ladder ran out: what was on was not enough, whatever comes next
        missing = [f for f in ladder if f not in lesson.features_on]
        if not set(lesson.features_on) <= set(on):
            return [], []
        estimate.observed[lesson.phase] = f"{seen}; the OOM ladder could not fix it"
        knobs = [] if missing else ["more devices or a larger TP/PP (the calibration log saw this OOM with every "
                                    "memory feature on)"]
        return [f for f in (*lesson.features_on, *missing) if f not in on], knobs
    if lesson.added in ladder and lesson.added not in on:
        estimate.observed[lesson.phase] = f"{seen}; fixed by adding {lesson.added}"
        return [f for f in (*lesson.features_on, lesson.added) if f in ladder and f not in on], []
    if lesson.added.startswith("gpu_memory_utilization="):
        try:
            lowered = float(lesson.added.split("=", 1)[1])
        except ValueError:
            return [], []
        if setup.gpu_memory_utilization > lowered:
            estimate.observed[lesson.phase] = f"{seen}; the ladder lowered {lesson.added}"
            return [], [lesson.added]
    return [], []


def _calibrate(estimate: MemoryEstimate, shape, setup: Setup, device, on: list[str],
               calibration_file: Path | None) -> tuple[list[str], list[str]]:
    """Apply the calibration log (clean runs, then OOM lessons) for this model x layout x device."""
    entries = calibration.read(calibration_file)
    _seen_ran(estimate, entries, shape, setup, device, on)
    required: list[str] = []
    knob_needs: list[str] = []
    for lesson in calibration.lessons(entries, shape.identity, setup.layout(), device.total_gb):
        features, knobs = _lesson(estimate, lesson, setup, on)
        required += features
        knob_needs += knobs
    return required, knob_needs


def _judge_lengths(estimate: MemoryEstimate, shape, setup: Setup, device) -> None:
    """Typical vs worst step: a run whose typical step fits is judged to fit, and the worst step is kept apart with
    what it needs and the response length where it starts to run out of memory."""
    try:
        estimate.lengths = length_outlook(shape, setup, device)
    except Exception:  # advice on top of advice: never the reason an estimate is missing
        estimate.lengths = None
        return
    worst = estimate.worst_over()
    if worst and estimate.lengths.typical_fits:
        estimate.tolerated = tuple(worst)
        estimate.worst_needs = find_needs(shape, setup, device)


def estimate_plan(plan, *, use_calibration: bool = True,
                  calibration_file: Path | None = None) -> tuple[MemoryEstimate | None, str]:
    """(estimate, how the model was found) or (None, why there is no estimate)."""
    spec = plan.spec
    shape, how = load_shape(spec.model_path)
    if shape is None:
        return None, how
    setup = setup_from_plan(plan)
    device = device_memory(spec.device, spec.device_memory_gb, spec.sources.get("device_memory_gb", "default"),
                           spec.device_name)
    estimate = build(shape, setup, device, spec.host_memory_gb)
    on = _features_on(setup)
    required, knob_needs = (_calibrate(estimate, shape, setup, device, on, calibration_file)
                            if use_calibration else ([], []))
    _judge_lengths(estimate, shape, setup, device)
    if not estimate.fits:
        estimate.needs = list(dict.fromkeys(find_needs(shape, setup, device, list(dict.fromkeys(required)))
                                            + knob_needs))
        if not estimate.observed:  # a seen OOM is not fixed by knobs the model alone suggests
            estimate.alternatives = find_alternative(shape, setup, device)
    estimate.assumptions = assumptions(setup, how, device)
    return estimate, how


def needed_features(estimate: MemoryEstimate) -> list[str]:
    """The memory features among the estimate's needs (what launch adds)."""
    features = {f for names in MEMORY_FEATURES.values() for f in names}
    return [n for n in estimate.needs if n in features]


def assumptions(setup: Setup, how: str, device) -> list[str]:
    found = [
        f"model shape from {how}",
        f"device memory {device.total_gb:g} GiB ({device.source}), {device.usable_gb:.2f} GiB usable by a process; "
        "a phase fits under that with its allowances: the runtime context, the communicators' buffers, the engine's "
        "graphs, and in training phases 5 % for allocator fragmentation (plan --explain-memory shows each)",
        "GB figures are GiB (2^30 bytes); the phases are shown at the worst step (every prompt and response at its "
        "maximum); the verdict is the typical step's when fixed micro-batches make the two differ",
        "reference model " + ("loaded (use_kl_loss or use_kl_in_reward)" if setup.ref_loaded else
                              "not loaded (use_kl_loss and use_kl_in_reward are off, as verl decides)"),
    ]
    if setup.colocated:
        found.append(("rollout engine sleeps during training (free_cache_engine; vLLM sleep level 1 on NPU keeps its "
                      "weights in host memory, level 2 on GPU from vLLM 0.8.5 drops them)") if setup.free_cache_engine else
                     "free_cache_engine off: the rollout engine keeps its share during training")
        if setup.device == "npu" and setup.free_cache_engine:
            found.append("NPU: vllm-ascend sleep mode is assumed to release memory (it did not in vllm-ascend "
                         "0.8.4rc2; it does not combine with PYTORCH_NPU_ALLOC_CONF=expandable_segments)")
    else:
        found.append(f"{setup.mode}: the rollout pool ({setup.rollout_devices_per_node} devices per node) holds only the "
                     f"engine, sized with its own gpu_memory_utilization; the trainer pool ({setup.devices_per_node} per "
                     "node) holds the training phases; the weights cross a bucket at a time")
    if setup.rollout_engine == "sglang":
        found.append("sglang: mem_fraction_static is a share of free memory; treated as vLLM's share of the device")
    found.append("offloaded parameters and optimizer state are loaded back for the actor update (verl's "
                 "workers do), so offload lowers the rollout and log-prob peaks, not the update's")
    return found


def _keyed(spec):
    """What a calibration entry is keyed on for this spec (model shape, layout, device memory), or None when it
    cannot be keyed (no model shape, a stand-in profile)."""
    from verl_deploy.compiler import compile_plan
    from verl_deploy.profiles import Profile, profile_for_spec

    profile, _ = profile_for_spec(spec)
    if not isinstance(profile, Profile):
        return None
    shape, _ = load_shape(spec.model_path)
    if shape is None:
        return None
    setup = setup_from_plan(compile_plan(spec, profile))
    return shape, setup, device_memory(spec.device, spec.device_memory_gb, "spec", spec.device_name)


def record_clean_run(spec, peak_gb: float | None, path: Path | None = None) -> bool:
    """Append a run that finished without running out of memory (and the peak its log printed); False when it
    cannot be keyed."""
    keyed = _keyed(spec)
    if keyed is None:
        return False
    shape, setup, device = keyed
    calibration.append(calibration.Entry(shape.identity, setup.layout(), device.total_gb, "", tuple(_features_on(setup)),
                                         "", name=shape.name, outcome="ran", peak_gb=peak_gb,
                                         workload=setup.workload()), path)
    return True


def record_oom(spec, phase: str | None, added: str, path: Path | None = None) -> bool:
    """Append an OOM the recovery ladder saw to the calibration log; False when it cannot be keyed."""
    keyed = _keyed(spec)
    if keyed is None:
        return False
    shape, setup, device = keyed
    calibration.append(calibration.Entry(shape.identity, setup.layout(), device.total_gb, phase or "actor_update",
                                         tuple(_features_on(setup)), added, name=shape.name), path)
    return True
