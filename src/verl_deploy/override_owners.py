"""Which `--override` takes a key away from a verl-deploy field or feature, and why that is refused.

Every check, derived value, memory estimate and recovery step reads the spec's fields. An override
that replaces (or deletes) a key a field sets would send verl one value while all of those work from
another: `-o ...tensor_model_parallel_size=3` would pass the device-divisibility check made for TP 4,
and the estimate would still size TP 4. So such an override is refused with the flag that sets the
value through the one path; keys verl-deploy sets to a constant (clip_ratio_c, top_p, ...) and keys it
only derives (the token budgets) stay open to --override, and the rules read what is sent.
"""

from __future__ import annotations

from verl_deploy import features as feature_registry
from verl_deploy.compiler import split_user_override
from verl_deploy.findings import Finding, error, warning

# knob -> the flag that sets it (knobs named after a spec field are that field's flag)
DERIVED_FROM: dict[str, str] = {
    "train_batch_size": "--batch-size", "train_files": "--train-file", "val_files": "--test-file",
    "rollout_n": "--n-resp-per-prompt", "rollout_tp": "--gen-tp", "rollout_name": "--rollout-engine",
    "total_training_steps": "--train-steps", "n_gpus_per_node": "--devices (or --trainer-gpus)",
    "default_local_dir": "--ckpts-dir", "logger": "--logger", "overlong_enable": "--overlong-buffer",
    "overlong_len": "--overlong-buffer-len", "overlong_penalty": "--overlong-penalty-factor",
    "max_resp_len": "--max-response-length", "filter_groups_enable": "--filter-groups",
    "rollout_pool_gpus": "--rollout-gpus", "rollout_pool_nnodes": "--nnodes", "device": "--device",
}


def owner_flag(knob: str) -> str | None:
    """The flag (or --features entry) that owns this knob, or None when --override may set it; a field without a
    flag (prompt_key, staleness_threshold) names its config-file line (spec.how_to_set), not a made-up flag."""
    from verl_deploy.spec import RunSpec, how_to_set

    if knob in DERIVED_FROM:
        return DERIVED_FROM[knob]
    if knob in RunSpec.model_fields:
        return how_to_set(knob)
    owners = sorted({f.name for f in feature_registry.REGISTRY
                     if knob in f.on or knob in f.off or knob in f.forces})
    if owners:
        return "--features " + " / ".join(f"{name} or -{name}" for name in owners)
    return None


def beyond_feature(plan, knob: str, key: str, raw: str | None) -> tuple[str, ...]:
    """The values a feature's key can take, when `raw` is none of them and only a feature owns the knob
    (Megatron's attention_backend=auto: flash_attn sends flash or fused). Such an override says what no
    feature can, so it is kept, with a warning; () otherwise."""
    from verl_deploy.profiles import modes
    from verl_deploy.spec import RunSpec

    if raw is None or knob in DERIVED_FROM or knob in RunSpec.model_fields:
        return ()
    spec = plan.spec
    try:
        found = plan.profile.keys_for(knob, spec.framework, spec.device, modes.mechanism(spec))
    except KeyError:
        return ()
    profile_key = next((k for k in found if k.path == key), None)
    if profile_key is None or profile_key.values is None:
        return ()
    sent = tuple(str(v) for v in profile_key.values.values())
    return () if raw.strip("'\"") in sent else sent


def override_findings(plan) -> list[Finding]:
    """An error per --override that replaces or deletes a key a field or feature owns; a warning for a
    key given twice (Hydra keeps the last, which is what is sent and shown)."""
    found: list[Finding] = []
    seen: dict[str, str] = {}
    for text in plan.spec.overrides:
        key = split_user_override(text)[1]
        if key in seen:
            found.append(warning("overrides", f"{key} is given twice ({seen[key]!r}, then {text!r}): verl gets "
                                 "the last one", "keep one --override per key"))
        seen[key] = text
    owned: dict[str, list[tuple[str, str]]] = {}  # override text -> [(knob, flag)], one line per override
    for knob, text in plan.superseded.items():
        flag = owner_flag(knob)
        _, key, raw = split_user_override(text)
        sent = beyond_feature(plan, knob, key, raw)
        if sent:
            found.append(warning("overrides", f"--override {text!r} sets a value {knob} cannot send (it sends "
                                 f"{' or '.join(sent)}): "
                                 f"verl gets {raw}, and checks and the memory estimate read {knob} as the "
                                 "features leave it", f"keep it to mean {raw}; use {flag} for one of the others"))
        elif flag is not None:
            owned.setdefault(text, []).append((knob, flag))
    for text, pairs in owned.items():
        knobs = ", ".join(knob for knob, _ in pairs)
        flags = ", ".join(dict.fromkeys(flag for _, flag in pairs))
        found.append(error("overrides", f"--override {text!r} takes over what verl-deploy sets from {knobs}: its "
                           "checks, derived values and memory estimate would use one value and verl another",
                           f"use {flags} instead of this --override"))
    return found
