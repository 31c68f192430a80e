"""Compiler: (RunSpec, profile) -> Plan.

The plan is everything the two scripts need: the entry point, the Hydra overrides
(with `+` where verl's config lacks the key), the variables shown at the top of
run_training.sh, the device/network environment and the Ray head arguments. It asks
the profile for every verl key; it never spells one itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_deploy import features as feature_registry
from verl_deploy.devices import PLATFORMS, Platform
from verl_deploy.findings import Finding, warning
from verl_deploy.hydra_text import format_value, parse_override
from verl_deploy.profiles import Profile
from verl_deploy.profiles import modes
from verl_deploy.profiles.algorithms import GRPO_DROPS, GRPO_KNOBS
from verl_deploy.spec import DECLARED, RunSpec

# knob -> (variable at the top of run_training.sh, group). Knobs not listed go in literally.
VARIABLES: dict[str, tuple[str, str]] = {
    "model_path": ("MODEL_PATH", "paths"),
    "train_files": ("TRAIN_FILE", "paths"),
    "val_files": ("TEST_FILE", "paths"),
    "default_local_dir": ("CKPTS_DIR", "paths"),
    "project_name": ("PROJECT_NAME", "run"),
    "experiment_name": ("EXP_NAME", "run"),
    "total_training_steps": ("TRAIN_STEPS", "run"),
    "save_freq": ("SAVE_FREQ", "run"),
    "test_freq": ("TEST_FREQ", "run"),
    "train_batch_size": ("TRAIN_BATCH_SIZE", "hyper-parameters"),
    "gen_batch_size": ("GEN_BATCH_SIZE", "hyper-parameters"),
    "mini_batch_size": ("MINI_BATCH_SIZE", "hyper-parameters"),
    "rollout_n": ("N_RESP_PER_PROMPT", "hyper-parameters"),
    "lr": ("LR", "hyper-parameters"),
    "max_prompt_length": ("MAX_PROMPT_LENGTH", "hyper-parameters"),
    "max_response_length": ("MAX_RESPONSE_LENGTH", "hyper-parameters"),
    "max_token_len": ("MAX_TOKEN_LEN", "hyper-parameters"),
    "overlong_len": ("OVERLONG_BUFFER_LEN", "hyper-parameters"),
    "overlong_penalty": ("OVERLONG_PENALTY_FACTOR", "hyper-parameters"),
    "nnodes": ("NNODES", "parallelism"),
    "n_gpus_per_node": ("N_GPUS_PER_NODE", "parallelism"),
    "train_tp": ("TRAIN_TP", "parallelism"),
    "train_pp": ("TRAIN_PP", "parallelism"),
    "train_cp": ("TRAIN_CP", "parallelism"),
    "rollout_tp": ("GEN_TP", "parallelism"),
    "rollout_pool_nnodes": ("ROLLOUT_NNODES", "parallelism"),
    "rollout_pool_gpus": ("ROLLOUT_GPUS", "parallelism"),
    "v1_rollout_gpus": ("ROLLOUT_GPUS", "parallelism"),
    "parameter_sync_step": ("PARAMETER_SYNC_STEP", "hyper-parameters"),
    "remove_padding": ("USE_REMOVE_PADDING", "features"),
    "use_dynamic_bsz": ("USE_DYNAMIC_BSZ", "features"),
    "param_offload": ("PARAM_OFFLOAD", "features"),
    "ref_param_offload": ("REF_PARAM_OFFLOAD", "features"),
    "grad_offload": ("GRAD_OFFLOAD", "features"),
    "optimizer_offload": ("OPTIMIZER_OFFLOAD", "features"),
    "prefix_caching": ("ENABLE_PREFIX_CACHING", "features"),
    "chunked_prefill": ("ENABLE_CHUNKED_PREFILL", "features"),
    "gradient_checkpointing": ("GRADIENT_CHECKPOINTING", "features"),
    # the same value as another variable: the key reads that variable (edit it once at the top)
    "max_num_batched_tokens": ("MAX_TOKEN_LEN", "hyper-parameters"),
    "max_model_len": ("MAX_TOKEN_LEN", "hyper-parameters"),
    "max_resp_len": ("MAX_RESPONSE_LENGTH", "hyper-parameters"),
}
GROUPS = ("paths", "run", "hyper-parameters", "parallelism", "features")


@dataclass(frozen=True)
class Override:
    """One Hydra override. `var` names the run_training.sh variable that holds its value."""

    key: str
    value: Any
    prefix: str = ""  # "", "+" or "++"
    var: str | None = None
    origin: str = ""  # the knob, or "--override"
    raw: str | None = None  # a user's value text in Hydra syntax, kept verbatim

    def text(self) -> str:
        """The override as Hydra reads it (what verl receives as one argv item)."""
        if self.prefix == "~" and self.raw is None:
            return f"~{self.key}"  # Hydra's delete without a value
        value = self.raw if self.raw is not None else format_value(self.value)
        return f"{self.prefix}{self.key}={value}"


@dataclass(frozen=True)
class Variable:
    name: str
    value: Any
    group: str
    # bash arithmetic over variables above it, when the value is derived from them (run_training.sh
    # then stays consistent when a user edits MAX_RESPONSE_LENGTH there)
    expr: str | None = None


def derived_expressions(spec: RunSpec) -> dict[str, tuple[str, tuple[str, ...]]]:
    """variable -> (bash expression, variables it reads), for values the spec derives rather than holds."""
    derived: dict[str, tuple[str, tuple[str, ...]]] = {"MAX_TOKEN_LEN": ("$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))",
                                 ("MAX_PROMPT_LENGTH", "MAX_RESPONSE_LENGTH"))}  # RunSpec.token_budget
    if spec.overlong_buffer_len is None:  # RunSpec.effective_overlong_buffer_len
        derived["OVERLONG_BUFFER_LEN"] = ("$((MAX_RESPONSE_LENGTH / 4 > 0 ? MAX_RESPONSE_LENGTH / 4 : 1))",
                                          ("MAX_RESPONSE_LENGTH",))
    if spec.mode == "fully-async":  # TRAIN_BATCH_SIZE is 0 there (its rollouter asserts it): nothing derives from it
        return derived
    if spec.mini_batch_size is None:  # RunSpec.effective_mini_batch_size
        derived["MINI_BATCH_SIZE"] = ("$((TRAIN_BATCH_SIZE))", ("TRAIN_BATCH_SIZE",))
    if spec.parameter_sync_step is None:  # RunSpec.effective_parameter_sync_step (separate-async asserts it)
        derived["PARAMETER_SYNC_STEP"] = ("$((TRAIN_BATCH_SIZE / MINI_BATCH_SIZE > 0 ? TRAIN_BATCH_SIZE / MINI_BATCH_SIZE "
                                          ": 1))", ("TRAIN_BATCH_SIZE", "MINI_BATCH_SIZE"))
    if spec.gen_batch_size is None:  # RunSpec.effective_gen_batch_size
        factor = 3 if spec.filter_groups else 1
        derived["GEN_BATCH_SIZE"] = (f"$((TRAIN_BATCH_SIZE * {factor}))", ("TRAIN_BATCH_SIZE",))
    return derived


@dataclass
class Plan:
    spec: RunSpec
    profile: Profile
    entry_module: str
    config_name: str
    overrides: list[Override]
    variables: list[Variable]
    env: list[tuple[str, str]]
    platform: Platform
    features: list[feature_registry.FeatureState]
    feature_findings: list = field(default_factory=list)
    # knob -> the --override that replaced the key it would have set (what verl receives is the override)
    superseded: dict[str, str] = field(default_factory=dict)

    @property
    def mechanism(self) -> str:
        """The profile key of the verl entry this plan runs (profiles/modes.py)."""
        return modes.mechanism(self.spec)

    @property
    def mask(self) -> str:
        return feature_registry.mask_of(self.features)

    def argv(self) -> list[str]:
        """The exact argv verl's Python process receives (after `python3`)."""
        return ["-m", self.entry_module, f"--config-name={self.config_name}", *(o.text() for o in self.overrides)]

    def override_map(self) -> dict[str, Override]:
        return {o.key: o for o in self.overrides}


def knob_settings(spec: RunSpec, states: list[feature_registry.FeatureState]) -> list[tuple[str, Any]]:
    """Every knob the run sets, in the order the command shows them."""
    kind = modes.mechanism(spec)
    v1 = modes.is_v1(spec)
    knobs: list[tuple[str, Any]] = [
        ("train_files", spec.train_file),
        ("val_files", spec.test_file),
        ("prompt_key", spec.prompt_key),
        ("max_prompt_length", spec.max_prompt_length),
        ("max_response_length", spec.max_response_length),
        ("train_batch_size", spec.batch_size),
        ("truncation", "left"),
        ("filter_overlong_prompts", False),
        ("adv_estimator", "grpo"),
        ("use_kl_in_reward", False),
        ("kl_coef", 0.0),
    ]
    if kind == "dapo":
        knobs += [
            ("gen_batch_size", spec.effective_gen_batch_size),
            ("filter_groups_enable", spec.filter_groups),
            ("filter_groups_metric", spec.filter_groups_metric),
            ("max_num_gen_batches", spec.max_num_gen_batches),
        ]
    elif v1 and spec.filter_groups:
        # the V1 replay buffer filters groups itself and refills one prompt at a time: it overrides
        # data.gen_batch_size to 1 and ignores max_num_gen_batches (trainer_base.py), so neither is sent
        knobs += [("filter_groups_enable", True), ("filter_groups_metric", spec.filter_groups_metric)]
    knobs += [
        ("model_path", spec.model_path),
        ("lr", spec.lr),
        ("lr_warmup_steps", 10),
        ("weight_decay", 0.1),  # every DAPO script in verl and verl-recipe (verl's default is 0.01)
        ("mini_batch_size", spec.effective_mini_batch_size),
        ("micro_batch_size", 1),
        ("use_kl_loss", False),
        ("kl_loss_coef", 0.0),
        ("clip_ratio_low", spec.clip_ratio_low),
        ("clip_ratio_high", spec.clip_ratio_high),
        ("clip_ratio_c", 10.0),
        ("loss_agg_mode", spec.loss_agg_mode),
        ("entropy_coeff", 0),
        ("max_token_len", spec.token_budget),
    ]
    if spec.framework == "megatron":
        knobs += [("train_tp", spec.train_tp), ("train_pp", spec.train_pp), ("train_cp", spec.train_cp)]
    else:
        knobs += [("strategy", "fsdp2")]
    knobs += [
        ("rollout_name", spec.rollout_engine),
        ("rollout_n", spec.n_resp_per_prompt),
        ("rollout_tp", spec.rollout_tp),
        ("gpu_memory_utilization", spec.gpu_memory_utilization),
        ("max_num_batched_tokens", spec.token_budget),
        ("max_model_len", spec.token_budget),
        ("temperature", spec.temperature),
        ("val_temperature", spec.temperature),
        ("top_p", 1.0),
        ("top_k", -1),
        ("val_do_sample", True),
        ("val_n", 1),
        ("reward_manager", "dapo"),
        ("overlong_enable", spec.overlong_buffer),
        ("overlong_len", spec.effective_overlong_buffer_len),
        ("overlong_penalty", spec.overlong_penalty_factor),
        ("overlong_log", False),
        ("max_resp_len", spec.max_response_length),
    ]
    if spec.algorithm == "grpo":  # as verl's own GRPO example scripts (profiles/algorithms.py)
        grpo = dict(GRPO_KNOBS)
        knobs = [(knob, grpo.pop(knob, value)) for knob, value in knobs if knob not in GRPO_DROPS]
        knobs += list(grpo.items())
    knobs += feature_knobs(spec, states) + trainer_knobs(spec)
    if spec.mode == "fully-async":  # its rollouter asserts train_batch_size 0 and gen_batch_size 1
        knobs = [(k, 0 if k == "train_batch_size" else v) for k, v in knobs if k != "gen_batch_size"]
        knobs += fully_async_knobs(spec)
    if spec.mode in ("one-step-off", "fully-async"):
        knobs += [
            ("hybrid_engine", False),
            ("rollout_pool_nnodes", spec.nnodes),
            ("rollout_pool_gpus", spec.rollout_gpus),
        ]
    if v1:
        knobs += v1_knobs(spec, kind)
    return knobs + declared_knobs(spec, {knob for knob, _ in knobs})


def feature_knobs(spec: RunSpec, states: list[feature_registry.FeatureState]) -> list[tuple[str, Any]]:
    """What the features that are on set, with how the recompute feature recomputes (the spec says)."""
    knobs = feature_registry.knob_values(states)
    if knobs.get("recompute_granularity") == "full":  # how it recomputes is the spec's
        knobs.update(recompute_method=spec.recompute_method, recompute_num_layers=spec.recompute_num_layers)
    settings = list(knobs.items())
    if "remove_padding" in knobs:  # Megatron's model key follows the feature (profiles/base.py)
        settings += [("model_remove_padding", knobs["remove_padding"])]
    if spec.device == "npu":  # verl's NPU scripts: torch.compile off for the actor and the reference
        settings += [("use_torch_compile", False)]
    return settings


def trainer_knobs(spec: RunSpec) -> list[tuple[str, Any]]:
    """The trainer: trackers, names, nodes and devices, steps, checkpoints and validation."""
    return [
        ("logger", spec.loggers),
        ("project_name", spec.project_name),
        ("experiment_name", spec.effective_experiment_name),
        ("nnodes", spec.nnodes),
        ("n_gpus_per_node", spec.trainer_devices),
        ("total_training_steps", spec.train_steps),
        ("total_epochs", 1000),
        ("save_freq", spec.save_freq),
        ("test_freq", spec.test_freq),
        ("val_before_train", spec.val_before_train),
        ("resume_mode", "auto"),
        ("default_local_dir", spec.effective_ckpts_dir),
        ("max_ckpt_to_keep", spec.max_ckpt_to_keep),
        ("device", "npu" if spec.device == "npu" else "cuda"),
    ]


def fully_async_knobs(spec: RunSpec) -> list[tuple[str, Any]]:
    """verl.experimental.fully_async_policy's own settings (its rollouter asserts gen_batch_size 1)."""
    return [
        ("gen_batch_size", 1),
        ("staleness_threshold", spec.staleness_threshold),
        ("trigger_parameter_sync_step", spec.effective_parameter_sync_step),
        ("require_batches", 1),
        ("partial_rollout", spec.partial_rollout),
        # null: the rollouter counts total_epochs x its loader (fully_async_rollouter.py)
        ("total_rollout_steps", spec.train_steps * spec.batch_size if spec.train_steps else None),
    ]


def declared_knobs(spec: RunSpec, placed: set[str]) -> list[tuple[str, Any]]:
    """The fields that declare their knob (spec.py `knob=`) and the recipe above does not place: their values
    as they are, after the others (so adding such a field moves no override of an existing script)."""
    return [(meta.knob, getattr(spec, name)) for name, meta in DECLARED.items() if meta.knob and meta.knob not in placed]


def v1_knobs(spec: RunSpec, kind: str) -> list[tuple[str, Any]]:
    """verl 0.9's V1 trainer: its mode, and each async mode's own settings (verl/trainer/ppo/v1/)."""
    knobs: list[tuple[str, Any]] = [("use_v1", True), ("trainer_mode", modes.V1_MODES.get(kind, "sync"))]
    if kind == "colocate-async":
        knobs += [("colocate_warmup", spec.warmup_batches)]
    if kind == "separate-async":
        knobs += [
            ("separate_warmup", spec.warmup_batches),
            ("parameter_sync_step", spec.effective_parameter_sync_step),
            ("v1_rollout_nnodes", spec.nnodes),
            ("v1_rollout_gpus", spec.rollout_gpus),
            ("checkpoint_engine", modes.CHECKPOINT_ENGINE[spec.device]),
        ]
    if kind in modes.V1_MODES:
        knobs += [("max_off_policy", spec.max_off_policy), ("off_policy_strategy", spec.off_policy_strategy)]
    return knobs


def split_user_override(text: str) -> tuple[str, str, str | None]:
    """`++a.b=c` -> ("++", "a.b", "c"); `~a.b` -> ("~", "a.b", None). Parsed by Hydra's own parser."""
    parsed = parse_override(text)
    return parsed.prefix, parsed.key, parsed.value


def compile_plan(spec: RunSpec, profile: Profile) -> Plan:
    """Build the plan. Assumes the spec passed the checks that make this well-defined."""
    states, feature_findings = feature_registry.resolve(
        framework=spec.framework, device=spec.device, mask=spec.mask, user_features=spec.features,
        no_default_features=spec.no_default_features, oom_features=spec.oom_features,
        estimate_features=spec.estimate_features,
    )
    overrides, variables = keyed_overrides(spec, profile, knob_settings(spec, states))
    overrides, superseded = with_user_overrides(overrides, spec.overrides)
    platform = PLATFORMS[spec.device]
    ordered_vars = sorted(variables, key=lambda v: GROUPS.index(v.group))
    entry_module, config_name = profile.entry(modes.mechanism(spec), spec.framework)
    return Plan(
        spec=spec, profile=profile, entry_module=entry_module, config_name=config_name,
        overrides=overrides, variables=ordered_vars, env=device_env(spec, platform),
        platform=platform, features=states, feature_findings=feature_findings, superseded=superseded,
    )


def without_effect(spec: RunSpec, profile: Profile, states) -> list[Finding]:
    """A feature the user turned on that sends no key on this release (verl 0.9 dropped Megatron's
    grad_offload): said, not shown as on while verl never hears of it."""
    found: list[Finding] = []
    for state in states:
        feature = feature_registry.BY_NAME.get(state.name)
        if feature is None or not state.on or state.why not in ("user", "mask"):
            continue
        sent = [k for knob in feature.on for k in _keys_or_none(profile, knob, spec)]
        if not sent:
            found.append(warning("features", f"{state.name} has no effect on verl {spec.verl_version} "
                                 f"({spec.framework}): this release has no key for it",
                                 f"drop it from --features{'; ' + feature.note if feature.note else ''}"))
    return found


def _keys_or_none(profile: Profile, knob: str, spec: RunSpec) -> tuple:
    try:
        return profile.keys_for(knob, spec.framework, spec.device, modes.mechanism(spec))
    except KeyError:
        return ()


def keyed_overrides(spec: RunSpec, profile: Profile,
                    knobs: list[tuple[str, Any]]) -> tuple[list[Override], list[Variable]]:
    """Each knob as the profile's verl keys; a knob with a run_training.sh variable is sent through it."""
    overrides: list[Override] = []
    variables: dict[str, Variable] = {}
    derived = derived_expressions(spec)
    for knob, value in knobs:
        var_name, group = VARIABLES.get(knob, (None, ""))
        for profile_key in profile.keys_for(knob, spec.framework, spec.device, modes.mechanism(spec)):
            transformed = profile_key.values is not None
            use_var = var_name if (var_name and not transformed) else None
            if use_var and use_var not in variables:
                variables[use_var] = _variable(use_var, value, group, derived, variables)
            overrides.append(Override(profile_key.path, profile_key.value_for(value), "+" if profile_key.plus else "",
                                      use_var, knob))
    return overrides, list(variables.values())


def _variable(name: str, value: Any, group: str, derived: dict[str, tuple[str, tuple[str, ...]]],
              variables: dict[str, Variable]) -> Variable:
    """A variable at the top of run_training.sh: bash arithmetic over the variables above it where the spec
    derives the value from them, else the literal value."""
    expr, reads = derived.get(name, (None, ()))
    if expr and not all(other in variables for other in reads):
        expr = None  # what it reads is not a variable here: the literal value
    return Variable(name, value, group, expr)


def with_user_overrides(overrides: list[Override], texts: list[str]) -> tuple[list[Override], dict[str, str]]:
    """The user's --override texts after ours: each replaces (or deletes) the keys it covers. Returns the
    overrides and knob -> the user's override that replaced what the knob set (Hydra keeps the last)."""
    replaced_by: dict[str, str] = {}  # knob -> the user key that replaced (or deleted) what it set
    last_text: dict[str, str] = {}  # user key -> its last --override
    for text in texts:
        prefix, key, raw = split_user_override(text)
        covered = [o for o in overrides if o.key == key or o.key.startswith(key + ".")]  # a node covers its keys
        for replaced in covered:
            if replaced.origin != "--override":
                replaced_by[replaced.origin] = key
        overrides = [o for o in overrides if not any(o is c for c in covered)]
        if prefix == "" and any(c.key == key and c.prefix == "+" for c in covered):
            prefix = "+"  # the key is one verl's config lacks and the launch adds: the user's value is added the same way
        overrides.append(Override(key, raw, prefix, None, "--override", raw=raw))
        last_text[key] = text
    return overrides, {knob: last_text[key] for knob, key in replaced_by.items()}


def device_env(spec: RunSpec, platform: Platform) -> list[tuple[str, str]]:
    """Environment for start_verl.sh: visible devices, network interface, platform defaults."""
    env = [(platform.visible_devices_var, ",".join(str(d) for d in spec.devices))]
    if spec.socket_ifname:
        env += [(name, spec.socket_ifname) for name in platform.ifname_vars]
    env += list(platform.env)
    return env
