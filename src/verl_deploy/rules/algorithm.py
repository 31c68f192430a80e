"""Algorithm settings verl's config dataclasses validate per release."""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.rules.context import RuleContext

# ActorConfig.__post_init__ valid_loss_agg_modes (verl/workers/config/actor.py) at each tag
LOSS_AGG_MODES_BEFORE_0_9 = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LOSS_AGG_MODES_FROM_0_9 = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                           "seq-mean-token-sum-norm")


def loss_agg_mode_in_release(ctx: RuleContext) -> list[Finding]:
    """ActorConfig raises `Invalid loss_agg_mode` for a mode its release does not list (token-sum came in 0.9.0)."""
    mode = str(ctx.get("loss_agg_mode", ctx.spec.loss_agg_mode))
    valid = LOSS_AGG_MODES_FROM_0_9 if ctx.version >= (0, 9, 0) else LOSS_AGG_MODES_BEFORE_0_9
    if mode in valid:
        return []
    since = " (token-sum is in verl 0.9.0 and later)" if mode in LOSS_AGG_MODES_FROM_0_9 else ""
    return [error("loss_agg_mode", f"loss_agg_mode {mode!r}: verl {ctx.spec.verl_version}'s ActorConfig raises "
                  f"'Invalid loss_agg_mode'{since}", f"use --loss-agg-mode with one of {', '.join(valid)}")]


def resume_path_is_given(ctx: RuleContext) -> list[Finding]:
    """RayPPOTrainer._load_checkpoint: resume_mode=resume_path asserts resume_from_path is a str holding
    'global_step_' (after the model is loaded)."""
    mode = str(ctx.get("resume_mode", "auto"))
    if ctx.spec.mode == "fully-async" and mode not in ("auto", "disable", "resume_path"):
        return [error("overrides", f"{ctx.key('resume_mode')}={mode}: verl {ctx.spec.verl_version}'s fully-async "
                      "rollouter raises 'Unknown resume_mode'", f"use {ctx.key('resume_mode')}=auto, disable or "
                      "resume_path (or drop the --override: verl-deploy resumes from the newest checkpoint)")]
    if mode != "resume_path":
        return []
    path = ctx.get("resume_from_path", None)
    if isinstance(path, str) and "global_step_" in path:
        return []
    return [error("overrides", f"{ctx.key('resume_mode')}=resume_path with resume_from_path {path!r}: verl "
                  f"{ctx.spec.verl_version}'s trainer asserts a path to a global_step_N directory",
                  f"add --override {ctx.key('resume_from_path')}=CKPTS_DIR/global_step_N, or drop resume_mode "
                  "(verl-deploy resumes from the newest checkpoint itself)")]


def ulysses_needs_remove_padding(ctx: RuleContext) -> list[Finding]:
    """Ulysses sequence parallel > 1 without model.use_remove_padding: validate_config's FSDPActorConfig.validate
    raises (every release, where validate_config runs), and so does the 0.8.0+ FSDP engine when it is built
    (verl/workers/engine/fsdp/transformer_impl.py). The 0.6.x/0.7.0 in-tree DAPO recipe runs neither check."""
    if ctx.framework != "fsdp" or ctx.sp <= 1 or not (ctx.engine_workers or ctx.validate_config_runs):
        return []
    if ctx.flag("remove_padding", False):
        return []
    where = "FSDP engine" if ctx.engine_workers and not ctx.validate_config_runs else "validate_config"
    return [error("features", f"Ulysses sequence parallel {ctx.sp} without remove-padding: verl "
                  f"{ctx.spec.verl_version}'s {where} raises 'you must enable `use_remove_padding`'",
                  "turn remove_padding on (--features remove_padding), or drop the Ulysses override")]


def rollout_mode_sync_removed(ctx: RuleContext) -> list[Finding]:
    """0.7.0+: RolloutConfig.__post_init__ raises for rollout.mode=sync (the agent loop is the only rollout); 0.6.x
    scripts still pass it."""
    key = ctx.key("rollout_mode")
    if ctx.version < (0, 7, 0) or str(ctx.get("rollout_mode", "async")) != "sync":
        return []
    return [error("override", f"{key}=sync: verl {ctx.spec.verl_version} removed the sync rollout and its "
                  "RolloutConfig raises 'Rollout mode 'sync' has been removed'",
                  f"drop the --override of {key} (async is the only mode since 0.7.0)")]


def recipe_filter_groups_metric(ctx: RuleContext) -> list[Finding]:
    """RayDAPOTrainer.fit: group filtering reads `new_batch.non_tensor_batch[metric]`: a null metric fails
    at the first step (KeyError: None), after the model loaded."""
    if not ctx.plan.entry_module.endswith("dapo.main_dapo") or not ctx.flag("filter_groups_enable", False):
        return []
    if ctx.get("filter_groups_metric", None):
        return []
    return [error("filter_groups_metric", f"{ctx.key('filter_groups_enable')} with no metric: the DAPO recipe trainer "
                  "looks the metric up by name in each batch and fails at its first step (KeyError: None)",
                  "give --filter-groups-metric (acc, score, seq_reward or seq_final_reward)")]


RESUME_MODES = ("auto", "disable", "resume_path")


def resume_mode_known(ctx: RuleContext) -> list[Finding]:
    """_load_checkpoint of the legacy trainer (RayPPOTrainer, the recipes, one-step-off) and of the V1 trainer
    knows auto, disable and resume_path. Another name falls through: the V1 trainer logs it and fails on an unbound
    global_step_folder; the legacy one reads the newest checkpoint as `auto` does and, on a fresh run (none yet),
    fails on None.split. (fully-async's rollouter raises 'Unknown resume_mode' itself: resume_path_is_given.)"""
    mode = str(ctx.get("resume_mode", "auto"))
    if mode in RESUME_MODES or ctx.spec.mode == "fully-async":
        return []
    return [error("overrides", f"{ctx.key('resume_mode')}={mode}: verl {ctx.spec.verl_version}'s trainer knows only "
                  f"{', '.join(RESUME_MODES)} and fails when it starts from scratch with another mode",
                  f"use {ctx.key('resume_mode')}=auto (resume from the newest checkpoint, as verl-deploy does), "
                  "disable or resume_path")]


def dual_clip_bound(ctx: RuleContext) -> list[Finding]:
    """compute_policy_loss_vanilla (the default policy loss, core_algos.py) asserts clip_ratio_c > 1.0, the lower
    bound of dual-clip PPO, at the first update."""
    if str(ctx.get("policy_loss_mode", "vanilla")) != "vanilla":
        return []
    bound = ctx.real("clip_ratio_c", 3.0)
    if bound > 1.0:
        return []
    return [error("override", f"{ctx.key('clip_ratio_c')}={bound:g}: verl {ctx.spec.verl_version}'s PPO loss "
                  "asserts the dual-clip bound clip_ratio_c > 1.0 at the first update",
                  f"--override {ctx.key('clip_ratio_c')}=3.0 (verl's default; DAPO's scripts use 10.0)")]


def kl_controller_known(ctx: RuleContext) -> list[Finding]:
    """get_kl_controller (core_algos.py), built in the trainer's __init__ when algorithm.use_kl_in_reward is on:
    type fixed or adaptive (NotImplementedError otherwise), adaptive asserts horizon > 0."""
    if not ctx.flag("use_kl_in_reward", False):
        return []
    kind = str(ctx.get("kl_ctrl_type", "fixed"))
    if kind not in ("fixed", "adaptive"):
        return [error("override", f"{ctx.key('kl_ctrl_type')}={kind}: verl {ctx.spec.verl_version}'s "
                      "get_kl_controller raises NotImplementedError (it knows fixed and adaptive)",
                      f"--override {ctx.key('kl_ctrl_type')}=fixed (or adaptive with a horizon > 0)")]
    if kind == "adaptive" and ctx.real("kl_ctrl_horizon", 10000) <= 0:
        return [error("override", f"{ctx.key('kl_ctrl_horizon')}={ctx.get('kl_ctrl_horizon')}: verl "
                      f"{ctx.spec.verl_version}'s adaptive KL controller asserts horizon > 0",
                      f"--override {ctx.key('kl_ctrl_horizon')}=10000 (verl's default)")]
    return []


# kl_penalty_forward (core_algos.py): the estimators it computes ('full' is named there but not implemented)
KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def _kl_estimator_problem(name: str, version: tuple[int, int, int]) -> str | None:
    base = name[:-1] if name.endswith("+") and version >= (0, 8, 0) else name  # 0.8.0+ strips the '+'
    if base in KL_ESTIMATORS:
        return None
    if name.endswith("+"):
        return "kl_penalty passes the '+' suffix on to kl_penalty_forward (stripped only from verl 0.8.0), which raises NotImplementedError"
    return "kl_penalty_forward raises NotImplementedError for it"


def kl_estimators_known(ctx: RuleContext) -> list[Finding]:
    """kl_penalty (core_algos.py): the KL loss (actor.use_kl_loss, actor.kl_loss_type) and the in-reward KL
    (algorithm.use_kl_in_reward, algorithm.kl_penalty) raise NotImplementedError at the first step for an
    estimator kl_penalty_forward does not compute."""
    found: list[Finding] = []
    for switch, knob, default in (("use_kl_loss", "kl_loss_type", "low_var_kl"),
                                  ("use_kl_in_reward", "kl_in_reward_type", "kl")):
        if not ctx.flag(switch, False):
            continue
        name = str(ctx.get(knob, default))
        problem = _kl_estimator_problem(name, ctx.version)
        if problem:
            plus = ", or a '+' form from 0.8.0" if ctx.version >= (0, 8, 0) else ""
            found.append(error("override", f"{ctx.key(knob)}={name}: in verl {ctx.spec.verl_version} {problem}",
                               f"--override {ctx.key(knob)}=low_var_kl (one of {', '.join(KL_ESTIMATORS)}{plus})"))
    return found


# the names in verl's registries at each release (core_algos.ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY), read
# from the installed releases' own modules
_ADV_06 = ("gae", "gpg", "grpo", "grpo_passk", "grpo_vectorized", "opo", "reinforce_plus_plus",
           "reinforce_plus_plus_baseline", "remax", "rloo", "rloo_vectorized")
_ADV_071 = (*_ADV_06, "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline")
_LOSS_060 = ("clip_cov", "geo_mean", "gpg", "gspo", "kl_cov", "vanilla")
_LOSS_070 = (*_LOSS_060, "bypass_mode", "cispo", "sapo")
_LOSS_071 = (*_LOSS_070, "dppo_kl", "dppo_tv")


def _adv_estimators(version: tuple[int, int, int]) -> tuple[str, ...]:
    return _ADV_071 if version >= (0, 7, 1) else _ADV_06


def _policy_losses(version: tuple[int, int, int]) -> tuple[str, ...]:
    if version >= (0, 9, 0):
        return (*_LOSS_071, "dro")
    if version >= (0, 7, 1):
        return _LOSS_071
    if version >= (0, 7, 0):
        return _LOSS_070
    return (*_LOSS_060, "rollout_correction") if version >= (0, 6, 1) else _LOSS_060


def registered_names(ctx: RuleContext) -> list[Finding]:
    """get_adv_estimator_fn and get_policy_loss_fn (core_algos.py) raise ValueError at the first step for a name
    their release's registry does not hold."""
    found: list[Finding] = []
    for knob, names, what, default in (("adv_estimator", _adv_estimators(ctx.version), "advantage estimator", "grpo"),
                                       ("policy_loss_mode", _policy_losses(ctx.version), "policy loss", "vanilla")):
        name = str(ctx.get(knob, default))
        if name not in names:
            found.append(error("override", f"{ctx.key(knob)}={name}: verl {ctx.spec.verl_version} has no {what} of "
                               "that name and raises ValueError at the first step",
                               f"--override {ctx.key(knob)}={default} (verl {ctx.spec.verl_version} has "
                               f"{', '.join(names)})"))
    return found


FSDP_SCHEDULERS = ("constant", "cosine")


def fsdp_lr_scheduler(ctx: RuleContext) -> list[Finding]:
    """FSDPOptimizerConfig.__post_init__ asserts warmup_style (when set) and lr_scheduler_type are constant or
    cosine (Megatron's optimizer config takes linear and inverse-square-root as well)."""
    if ctx.framework != "fsdp":
        return []
    for knob in ("warmup_style", "lr_scheduler_type"):
        value = ctx.get(knob)
        if value is not None and str(value) not in FSDP_SCHEDULERS:
            return [error("override", f"{ctx.key(knob)}={value}: verl {ctx.spec.verl_version}'s FSDP optimizer config "
                          "asserts constant or cosine", f"--override {ctx.key(knob)}=cosine (or constant)")]
    return []
