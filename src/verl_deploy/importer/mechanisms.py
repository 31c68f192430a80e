"""The trainer a migrated config runs on the target release, when verl's core has taken over the old one.

From verl 0.9.0 DAPO runs in verl's core (verl.trainer.main_ppo, the V1 trainer in sync mode: group filtering
in its replay buffer, the `dapo` reward manager with `reward.reward_kwargs.overlong_buffer_cfg`), and the V1
trainer's separate_async mode is one-step-off's successor (its own rollout pool, weights synced by a
checkpoint engine every parameter_sync_step mini-batches, a bound on how many model versions a trajectory
spans). Both old trainers still ship on 0.9.x, so `migrate` moves a config to the successor and says, in one
line, which one it chose and the flag that keeps the other. What the entries and keys are comes from the
profiles (entry modules, the V1 knobs, the core-vs-recipe table); which of the old config's fields the new
trainer ignores comes from the plan's own option checks (modes.option_findings), each named with what
replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from verl_deploy.profiles import Profile, profile_for
from verl_deploy.profiles.modes import CORE_VS_RECIPE, V1_MODES, V1_SINCE, mechanism
from verl_deploy.verl_release import release_numbers

# one-step-off trains each batch on the rollout made with the weights one step behind: in verl's V1 replay buffer a
# trajectory's span is global_steps - the step it was dispatched at + 1 (verl/trainer/ppo/v1/replay_buffer.py), so
# 1 is on-policy and 2 is one step behind; `wait` is dropless (sampling blocks until the trajectories at the bound
# finish), as one-step-off trains on every trajectory it generates
ONE_STEP_OFF_BOUND = 2
ONE_STEP_OFF_STRATEGY = "wait"


class DapoSource(str, Enum):
    """`--dapo-source` of migrate / import --to: where DAPO's trainer comes from on 0.9.0+."""

    core = "core"
    recipe = "recipe"


class SuccessorMode(str, Enum):
    """`--mode` of migrate / import --to for a one-step-off config on 0.9.0+."""

    separate_async = "separate-async"
    one_step_off = "one-step-off"


class ChoiceProblem(Exception):
    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


@dataclass
class Choice:
    """The target trainer: the fields set for it, one line on the choice, and fields it no longer reads."""

    values: dict[str, Any]
    trainer: list[dict[str, str]] = field(default_factory=list)  # {"old", "new", "why", "other"}
    changed: list[tuple[str, Any, Any, str]] = field(default_factory=list)  # (field, old, new, why)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # ("field=value", what replaces it)


def choose(values: dict[str, Any], source: str, target: str, *, dapo_source: str | None = None,
           mode: str | None = None) -> Choice:
    """The values with the trainer they run on `target` (DAPO from verl's core, one-step-off as separate-async unless
    `dapo_source` / `mode` keep the old one), and what that changes."""
    choice = Choice(dict(values))
    _dapo(choice, source, target, dapo_source)
    _one_step_off(choice, source, target, mode)
    if choice.trainer:
        _drop_ignored(choice, target)
    return choice


def _spec(values: dict[str, Any], version: str, given: set[str] | None = None):
    """The RunSpec of these values on `version` (None when they do not make one); `given` marks fields as set."""
    from pydantic import ValidationError

    from verl_deploy.spec import RunSpec

    fields = {k: v for k, v in values.items() if k in RunSpec.model_fields and k != "overrides"}
    try:
        return RunSpec(**{**fields, "verl_version": version},
                       sources={name: "config" for name in (given or set())})
    except (ValidationError, ValueError, TypeError):
        return None


def _entry(values: dict[str, Any], version: str) -> str:
    profile = profile_for(version)
    spec = _spec(values, version)
    if not isinstance(profile, Profile) or spec is None:
        return "?"
    return profile.entry(mechanism(spec), spec.framework)[0]


def _dapo(choice: Choice, source: str, target: str, asked: str | None) -> None:
    """The DAPO recipe trainer -> DAPO in verl's core, on a target that has both (a config that chose the recipe on a
    release that already had both keeps it)."""
    values = choice.values
    old_spec = _spec(values, source)
    runs_recipe = old_spec is not None and mechanism(old_spec) == "dapo"
    if not runs_recipe or release_numbers(target) < V1_SINCE:
        if asked:
            raise ChoiceProblem(f"--dapo-source {asked}: the config does not run DAPO's recipe trainer moved to a "
                                f"release with DAPO in verl's core (0.9.0 or later)", "drop --dapo-source")
        return
    chose_recipe = release_numbers(source) >= V1_SINCE and values.get("dapo_source") == "recipe"
    chosen = asked or ("recipe" if chose_recipe else "core")
    before = _entry(values, source)
    values["dapo_source"] = chosen
    rows = "; ".join(f"{what}: {core}" for what, core, _ in CORE_VS_RECIPE[1:])
    if chosen == "core":
        why = f"DAPO in verl's core on verl {target} (V1 trainer, sync mode): {rows}"
        other = f"verl {target} still runs the recipe trainer: --dapo-source recipe keeps it"
    else:
        why = "the DAPO recipe trainer, as " + ("asked (--dapo-source recipe)" if asked else "the config chose")
        core = _entry({**values, "dapo_source": "core"}, target)
        other = f"--dapo-source core runs DAPO in verl's core ({core}, V1 sync) on verl {target}"
    choice.trainer.append({"old": before, "new": _entry(values, target), "why": why, "other": other})
    if old_spec.dapo_source != chosen:
        choice.changed.append(("dapo_source", old_spec.dapo_source, chosen, "the DAPO trainer"))
    if chosen == "core":
        choice.dropped += _own_config_settings("dapo", old_spec.framework, values, target)


def _one_step_off(choice: Choice, source: str, target: str, asked: str | None) -> None:
    """one-step-off -> the V1 trainer's separate_async mode (or kept, with --mode one-step-off)."""
    values = choice.values
    if values.get("mode") != "one-step-off" or release_numbers(target) < V1_SINCE:
        if asked:
            raise ChoiceProblem(f"--mode {asked}: only a one-step-off config moved to verl 0.9.0 or later chooses "
                                "between one-step-off and separate-async", "drop --mode")
        return
    spec = _spec(values, target)
    before = _entry(values, source)
    if spec is None:
        return
    mini = spec.effective_mini_batch_size
    if asked == "one-step-off" or (asked is None and spec.batch_size % mini):
        if spec.batch_size % mini and asked is None:
            why = (f"kept: verl {target}'s separate_async trainer asserts train_batch_size == parameter_sync_step x "
                   f"ppo_mini_batch_size, and batch {spec.batch_size} is no multiple of mini-batch {mini}")
            other = "set mini_batch_size in the config to a divisor of batch_size, then migrate it again"
        else:
            why = "kept, as asked (--mode one-step-off)"
            other = "--mode separate-async moves it to the V1 trainer's separate_async mode (its successor)"
        choice.trainer.append({"old": before, "new": _entry(values, target), "why": why, "other": other})
        return
    if spec.batch_size % mini:
        raise ChoiceProblem(f"--mode separate-async: verl {target}'s separate_async trainer asserts train_batch_size "
                            f"== parameter_sync_step x ppo_mini_batch_size; batch {spec.batch_size} is no multiple "
                            f"of mini-batch {mini}", "set mini_batch_size in the config to a divisor of batch_size")
    _to_separate_async(choice, spec, before, target)


def _to_separate_async(choice: Choice, spec, before: str, target: str) -> None:
    from verl_deploy.profiles.modes import CHECKPOINT_ENGINE

    values = choice.values
    sync_step = spec.batch_size // spec.effective_mini_batch_size
    values["mode"] = "separate-async"
    changes = [("mode", "one-step-off", "separate-async", "verl's V1 successor of one-step-off"),
               ("parameter_sync_step", values.get("parameter_sync_step"), sync_step,
                f"batch {spec.batch_size} = {sync_step} x mini-batch {spec.effective_mini_batch_size}: weights sync "
                "once a training step, as one-step-off's")]
    if spec.filter_groups and "filter_groups" not in values:  # the spec's DAPO default; the V1 trainer would use it
        changes.append(("filter_groups", None, False, "one-step-off's trainer has no dynamic sampling; the V1 "
                        "trainer's replay buffer would filter groups"))
    if "max_off_policy" not in values:
        changes.append(("max_off_policy", None, ONE_STEP_OFF_BOUND, "a trajectory spans at most the weights one step "
                        "behind (verl counts the versions it spans: 1 is on-policy)"))
    if "off_policy_strategy" not in values:
        changes.append(("off_policy_strategy", None, ONE_STEP_OFF_STRATEGY, "dropless: one-step-off trains on every "
                        "trajectory it generates"))
    for name, old, new, why in changes:
        values[name] = new
        choice.changed.append((name, old, new, why))
    choice.dropped += _own_config_settings("one-step-off", spec.framework, values, target)
    engine = CHECKPOINT_ENGINE[spec.device]
    choice.trainer.append({
        "old": before, "new": _entry(values, target),
        "why": f"the V1 trainer's {V1_MODES['separate-async']} mode on verl {target}: trainer on {spec.trainer_gpus} "
               f"and its own rollout pool on {spec.rollout_gpus} devices per node ({spec.nnodes} node(s)), weights "
               f"synced by the {engine} checkpoint engine every {sync_step} mini-batches, off-policy bound "
               f"{values['max_off_policy']} ({values['off_policy_strategy']})",
        "other": f"verl {target} still ships one-step-off: --mode one-step-off keeps it"})


def _own_config_settings(old: str, framework: str, values: dict[str, Any], target: str) -> list[tuple[str, str]]:
    """The old trainer's own config settings (the profile's overlay of its yaml: one-step-off's, DAPO's) that
    main_ppo's config holds with another default and the new launch does not send: the new run takes main_ppo's
    (one line each)."""
    from verl_deploy.compiler import compile_plan
    from verl_deploy.importer.compose import flatten
    from verl_deploy.profiles.keytables import key_table

    profile = profile_for(target)
    new_spec = _spec(values, target)
    if not isinstance(profile, Profile) or new_spec is None:
        return []
    plan = compile_plan(new_spec, profile)
    defaults = key_table(target, plan.config_name) or {}
    sent = {o.key for o in plan.overrides}
    own = flatten(dict(profile.recipe_overlays.get((old, framework), {})))
    return [(f"{key}={value}", f"{old}'s own config sets it; {plan.entry_module} runs its config's {defaults[key]}")
            for key, value in own.items() if key in defaults and key not in sent and defaults[key] != value]


def _drop_ignored(choice: Choice, target: str) -> None:
    """Fields the new trainer does not read (the plan's warnings about given fields), dropped with what replaces
    them: verl's V1 trainer fetches one prompt at a time (data.gen_batch_size), its replay buffer has no
    max_num_gen_batches."""
    from verl_deploy.profiles.modes import option_findings

    given = {name for name in choice.values if name != "overrides"}
    spec = _spec(choice.values, target, given)
    if spec is None:
        return
    for finding in option_findings(spec):
        if finding.level == "warning" and finding.field in given and finding.field in choice.values:
            value = choice.values.pop(finding.field)
            choice.dropped.append((f"{finding.field}={value}", finding.message))
