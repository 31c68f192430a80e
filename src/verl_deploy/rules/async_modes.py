"""The asserts of verl 0.9's V1 trainer (verl/trainer/ppo/v1/) for its async modes, checked before launch.

They fire when the trainer is built or at its first step, after Ray and the model are up: here they are
one line each, on the values the launch sends (the profile's keys and any --override).
"""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.rules.context import RuleContext


def _v1_mode(ctx: RuleContext) -> str | None:
    """The V1 trainer mode this run builds, or None when the run does not go through the V1 trainer."""
    if ctx.version < (0, 9, 0) or ctx.plan.entry_module != "verl.trainer.main_ppo":
        return None
    if not ctx.flag("use_v1", True):
        return None
    return str(ctx.get("trainer_mode", "sync"))


def separate_async_batch_is_sync_steps_of_mini_batches(ctx: RuleContext) -> list[Finding]:
    """PPOTrainerSeparateAsync.__init__: train_batch_size == parameter_sync_step x ppo_mini_batch_size."""
    if _v1_mode(ctx) != "separate_async":
        return []
    batch, mini = ctx.batch, ctx.mini
    step = ctx.number("parameter_sync_step", 4)
    if batch == step * mini:
        return []
    fix = (f"use --parameter-sync-step {batch // mini}" if mini and batch % mini == 0 else
           "choose --mini-batch-size dividing --batch-size, and --parameter-sync-step = batch / mini-batch")
    return [error("parameter_sync_step", f"batch {batch} != parameter_sync_step {step} x mini-batch {mini}: verl "
                  f"{ctx.spec.verl_version}'s separate_async trainer asserts train_batch_size == "
                  "parameter_sync_step * ppo_mini_batch_size", fix)]


def separate_async_rollout_pool(ctx: RuleContext) -> list[Finding]:
    """PPOTrainerSeparateAsync.__init__: the standalone rollout pool has nodes and devices, and the weight sync
    to it is not the `naive` checkpoint engine (which only reaches colocated replicas)."""
    if _v1_mode(ctx) != "separate_async":
        return []
    found: list[Finding] = []
    for knob, what in (("v1_rollout_nnodes", "nodes"), ("v1_rollout_gpus", "devices per node")):
        if ctx.number(knob, 0) <= 0:
            found.append(error("rollout_gpus", f"{ctx.key(knob)} is {ctx.get(knob, 0)}: verl {ctx.spec.verl_version}'s "
                               f"separate_async trainer asserts the rollout pool has {what} (> 0)",
                               "give the rollout pool devices with --rollout-gpus (and drop the --override)"))
    backend = str(ctx.get("checkpoint_engine", "naive"))
    if backend == "naive":
        found.append(error("overrides", f"{ctx.key('checkpoint_engine')}=naive: verl {ctx.spec.verl_version}'s "
                           "separate_async trainer asserts another backend (nccl, nixl, mooncake, ...)",
                           "drop the --override (the launch sends nccl, which is HCCL on Ascend)"))
    return found


# the key PPOTrainer.__init__ reads parameter_sync_step from in each V1 mode (trainer.v1.<mode>.parameter_sync_step,
# 1 when absent; only separate_async's config has it, 4)
_SYNC_STEP = {"sync": ("sync_parameter_sync_step", 1), "colocate_async": ("colocate_parameter_sync_step", 1),
              "separate_async": ("parameter_sync_step", 4)}


def v1_batch_divides_by_sync_step(ctx: RuleContext) -> list[Finding]:
    """PPOTrainer.step (V1): train_batch_size % parameter_sync_step == 0, asserted at every step, in every mode
    (PPOTrainer.__init__ reads the mode's own parameter_sync_step)."""
    mode = _v1_mode(ctx)
    if mode not in _SYNC_STEP:
        return []
    knob, default = _SYNC_STEP[mode]
    batch = ctx.batch
    step = ctx.number(knob, default)
    if step > 0 and batch % step == 0:
        return []
    near = max([d for d in range(1, max(1, step) + 1) if batch % d == 0] or [1])  # the nearest divisor below
    fix = ("choose --parameter-sync-step dividing --batch-size" if mode == "separate_async" else
           f"--override {ctx.key(knob)}={near} (a divisor of --batch-size {batch}; or drop the --override: 1)")
    return [error("parameter_sync_step" if mode == "separate_async" else "override",
                  f"batch {batch} does not divide by parameter_sync_step {step}: verl {ctx.spec.verl_version}'s V1 "
                  "trainer asserts it at the first step", fix)]


def v1_inflight_gen_batches(ctx: RuleContext) -> list[Finding]:
    """ReplayBuffer._validate_mode_config (V1 sync mode, DAPO's group filtering on): max_inflight_gen_batches must
    be a positive integer. The async modes' buffer (ReplayBufferAsync) does not check it; without filtering the
    trainer passes 1."""
    if _v1_mode(ctx) != "sync" or not ctx.flag("filter_groups_enable", False) or not ctx.get("filter_groups_metric"):
        return []
    bound = ctx.get("max_inflight_gen_batches", 1)
    if isinstance(bound, int) and not isinstance(bound, bool) and bound > 0:
        return []
    return [error("override", f"{ctx.key('max_inflight_gen_batches')}={bound!r}: verl {ctx.spec.verl_version}'s "
                  "replay buffer raises 'max_inflight_gen_batches must be a positive integer' with group filtering on",
                  f"--override {ctx.key('max_inflight_gen_batches')}=1 (verl's default) or more")]


def v1_off_policy_bound(ctx: RuleContext) -> list[Finding]:
    """ReplayBuffer.__init__ (V1): max_off_policy_threshold a positive int, max_off_policy_strategy drop|wait."""
    if _v1_mode(ctx) is None:
        return []
    found: list[Finding] = []
    threshold = ctx.get("max_off_policy", 8)
    if not (isinstance(threshold, int) and not isinstance(threshold, bool) and threshold > 0):
        found.append(error("max_off_policy", f"{ctx.key('max_off_policy')}={threshold!r}: verl "
                           f"{ctx.spec.verl_version}'s replay buffer asserts an integer > 0",
                           "use --max-off-policy N with N >= 1"))
    strategy = ctx.get("off_policy_strategy", "drop")
    if strategy not in ("drop", "wait"):
        found.append(error("off_policy_strategy", f"{ctx.key('off_policy_strategy')}={strategy!r}: verl "
                           f"{ctx.spec.verl_version}'s replay buffer asserts drop or wait",
                           "use --off-policy-strategy drop or wait"))
    return found


def v1_filter_groups_metric(ctx: RuleContext) -> list[Finding]:
    """PPOTrainer._resolve_filter_groups_metric (V1): group filtering on needs a metric."""
    if _v1_mode(ctx) is None or not ctx.flag("filter_groups_enable", False):
        return []
    if ctx.get("filter_groups_metric", None):
        return []
    return [error("filter_groups_metric", f"{ctx.key('filter_groups_enable')} with no metric: verl "
                  f"{ctx.spec.verl_version}'s V1 trainer raises 'algorithm.filter_groups.metric must be set'",
                  "give --filter-groups-metric (acc, score, seq_reward, ...)")]


def fully_async_rollouter_settings(ctx: RuleContext) -> list[Finding]:
    """FullyAsyncRollouter.__init__: no hybrid engine, data.train_batch_size == 0, data.gen_batch_size == 1,
    staleness_threshold >= 0, trigger_parameter_sync_step >= 1 (the launch sends these; an --override may not)."""
    if not ctx.plan.entry_module.startswith("verl.experimental.fully_async_policy"):
        return []
    checks = (
        (not ctx.flag("hybrid_engine", True), f"{ctx.key('hybrid_engine')} must be False"),
        (ctx.number("train_batch_size", 0) == 0, f"{ctx.key('train_batch_size')} must be 0 (the trainer takes "
                                                 "mini-batch x require_batches prompts a step instead)"),
        (ctx.number("gen_batch_size", 1) == 1, f"{ctx.key('gen_batch_size')} must be 1"),
        (ctx.real("staleness_threshold", 0.1) >= 0, "staleness_threshold must be >= 0"),
        (ctx.number("trigger_parameter_sync_step", 4) >= 1, "trigger_parameter_sync_step must be >= 1"),
        (ctx.flag("calculate_log_probs", True), f"{ctx.key('calculate_log_probs')} must be True"),
    )
    return [error("overrides", f"{what}: verl {ctx.spec.verl_version}'s fully-async rollouter asserts it",
                  "drop the --override of it (the launch sends what verl asserts)") for ok, what in checks if not ok]
