"""What each `--mode` becomes in verl, per release: one meaning per mode, named by `plan`.

A mode is what the user asks for (colocated DAPO, one-step-off, an async trainer); the *mechanism* is
the verl entry that runs it on the chosen release, and the key under which a profile holds its entry
module, config name and overlay:

- ``dapo``: the DAPO recipe trainer (recipe/dapo in the tree <= 0.7.0, verl-recipe from 0.7.1);
- ``ppo``: verl.trainer.main_ppo on its base config: the legacy RayPPOTrainer <= 0.8, the V1 trainer in
  `sync` mode from 0.9.0 (trainer.use_v1, verl/trainer/ppo/v1/trainer_sync.py); GRPO runs here on every
  release, and DAPO from verl's core on >= 0.9.0 (`--dapo-source core`: algorithm.filter_groups in the V1
  replay buffer, the `dapo` reward manager of the reward loop);
- ``one-step-off``: recipe/one_step_off_policy (<= 0.7.0), verl.experimental.one_step_off_policy (0.7.1+);
- ``colocate-async`` / ``separate-async``: main_ppo with trainer.v1.trainer_mode colocate_async /
  separate_async (verl/trainer/ppo/v1/, 0.9.0+).
"""

from __future__ import annotations

from typing import Any

from verl_deploy.findings import Finding, error
from verl_deploy.profiles.base import A, keys
from verl_deploy.verl_release import release_numbers

# the first release whose code has the mode (checked at the tags: verl/trainer/ppo/v1/ appears in v0.9.0)
FIRST_RELEASE = {"dapo": "0.6.0", "one-step-off": "0.6.0", "colocate-async": "0.9.0", "separate-async": "0.9.0",
                 "fully-async": "0.7.1"}
V1_MODES = {"colocate-async": "colocate_async", "separate-async": "separate_async"}
V1_SINCE = (0, 9, 0)

# knobs of verl's V1 trainer (verl/trainer/config/ppo_trainer.yaml trainer.v1.*, 0.9.0+) and its rollout pool
V1_KEYS = {
    "use_v1": keys("trainer.use_v1"),
    "trainer_mode": keys("trainer.v1.trainer_mode"),
    "colocate_warmup": keys("trainer.v1.colocate_async.num_warmup_batches"),
    "separate_warmup": keys("trainer.v1.separate_async.num_warmup_batches"),
    "parameter_sync_step": keys("trainer.v1.separate_async.parameter_sync_step"),
    # PPOTrainer.__init__ reads trainer.v1.<mode>.parameter_sync_step for every mode, 1 when absent
    # (verl/trainer/ppo/v1/trainer_base.py:130 at 0.9.1); only separate_async's config has the key
    "sync_parameter_sync_step": keys("trainer.v1.sync.parameter_sync_step"),
    "colocate_parameter_sync_step": keys("trainer.v1.colocate_async.parameter_sync_step"),
    "max_off_policy": keys("trainer.v1.sampler.max_off_policy_threshold"),
    "off_policy_strategy": keys("trainer.v1.sampler.max_off_policy_strategy"),
    "v1_rollout_nnodes": keys(A + "rollout.nnodes"),
    "v1_rollout_gpus": keys(A + "rollout.n_gpus_per_node"),
    "checkpoint_engine": keys(A + "rollout.checkpoint_engine.backend"),
}
# main_ppo runs on each framework's base config
PPO_CONFIG_NAMES = {("ppo", "megatron"): "ppo_megatron_trainer", ("ppo", "fsdp"): "ppo_trainer"}
PPO_ENTRY = {"ppo": "verl.trainer.main_ppo"}
PPO_OVERLAYS: dict[tuple[str, str], dict[str, Any]] = {("ppo", "megatron"): {}, ("ppo", "fsdp"): {}}
V1_ENTRY = {mode: "verl.trainer.main_ppo" for mode in V1_MODES}
V1_CONFIG_NAMES = {(mode, fw): name for mode in V1_MODES for (_, fw), name in PPO_CONFIG_NAMES.items()}
V1_OVERLAYS: dict[tuple[str, str], dict[str, Any]] = {(mode, fw): {} for mode in V1_MODES for fw in ("megatron", "fsdp")}

# verl.experimental.fully_async_policy (0.7.1+): its own entry and configs, and the keys those configs add
FULLY_ASYNC_ENTRY = {"fully-async": "verl.experimental.fully_async_policy.fully_async_main"}
FULLY_ASYNC_CONFIG_NAMES = {("fully-async", "megatron"): "fully_async_ppo_megatron_trainer",
                            ("fully-async", "fsdp"): "fully_async_ppo_trainer"}
FULLY_ASYNC_KEYS = {
    "staleness_threshold": keys("async_training.staleness_threshold"),
    "trigger_parameter_sync_step": keys("async_training.trigger_parameter_sync_step"),
    "require_batches": keys("async_training.require_batches"),
    "partial_rollout": keys("async_training.partial_rollout"),
    "total_rollout_steps": keys("rollout.total_rollout_steps"),
}


def fully_async_overlay(legacy_worker_key: bool = False) -> dict[str, Any]:
    """verl/experimental/fully_async_policy/config/fully_async_ppo_*trainer.yaml's own keys (0.7.1-0.9.1; 0.7.1
    also sets trainer.use_legacy_worker_impl: disable)."""
    overlay: dict[str, Any] = {
        "async_training": {"staleness_threshold": 0.1, "trigger_parameter_sync_step": 4, "require_batches": 1,
                           "partial_rollout": True, "use_trainer_do_validate": False},
        "rollout": {"nnodes": 1, "n_gpus_per_node": 8, "n": 4, "total_rollout_steps": 100},
        "data": {"gen_batch_size": 1},
        "actor_rollout_ref": {"rollout": {"calculate_log_probs": True, "checkpoint_engine": {"backend": "nccl"}},
                              "actor": {"use_rollout_log_probs": True}, "model": {"use_remove_padding": True}},
        "algorithm": {"rollout_correction": {"bypass_mode": True}},
    }
    if legacy_worker_key:
        overlay["trainer"] = {"use_legacy_worker_impl": "disable"}
    return overlay


FULLY_ASYNC_OVERLAYS = {("fully-async", fw): fully_async_overlay() for fw in ("megatron", "fsdp")}

# checkpoint engine for the weight sync to the separate rollout: verl 0.9's registry names both the GPU
# (nccl_checkpoint_engine.py) and the Ascend (hccl_checkpoint_engine.py) engine "nccl"; `naive` is refused
CHECKPOINT_ENGINE = {"gpu": "nccl", "npu": "nccl"}


def dapo_source_for(spec) -> str:
    """core | recipe: where DAPO's trainer comes from. verl 0.9.0+ has DAPO in its core trainer (the V1 replay
    buffer's algorithm.filter_groups, the dapo reward manager's overlong buffer), and that is the default there;
    `--dapo-source recipe` keeps the verl-recipe trainer for users who pinned it. Below 0.9.0: the recipe only."""
    if spec.dapo_source:
        return spec.dapo_source
    return "core" if release_numbers(spec.verl_version) >= V1_SINCE else "recipe"


def mechanism(spec) -> str:
    """The profile key of the verl entry this spec runs (see the module docstring)."""
    if spec.mode == "dapo":
        if spec.algorithm == "grpo" or dapo_source_for(spec) == "core":
            return "ppo"
        return "dapo"
    return spec.mode


def is_v1(spec) -> bool:
    """Does the run go through verl's V1 trainer (main_ppo on >= 0.9.0)?"""
    return mechanism(spec) in ("ppo", *V1_MODES) and release_numbers(spec.verl_version) >= V1_SINCE


def refusal(spec) -> Finding | None:
    """One line when the chosen release lacks the mode (or the DAPO source) asked for."""
    version = release_numbers(spec.verl_version)
    first = FIRST_RELEASE.get(spec.mode, "0.6.0")
    if version < release_numbers(first):
        what = "verl's V1 trainer (verl/trainer/ppo/v1)" if spec.mode in V1_MODES else \
            "verl.experimental.fully_async_policy"
        return error("mode", f"--mode {spec.mode} needs {what}, first in verl {first}; verl {spec.verl_version} "
                     "does not have it", f"pass --verl-version {first} or later, or --mode one-step-off "
                     "(separate trainer and rollout devices on this release)")
    if spec.dapo_source == "core" and version < V1_SINCE:
        return error("dapo_source", f"--dapo-source core needs DAPO in verl's core trainer (V1 replay buffer with "
                     f"algorithm.filter_groups), first in verl 0.9.0; verl {spec.verl_version} has DAPO only as a recipe",
                     "drop --dapo-source (the recipe trainer runs), or pass --verl-version 0.9.0 or later")
    if spec.dapo_source == "recipe" and spec.mode != "dapo":
        return error("dapo_source", f"--dapo-source recipe picks the DAPO recipe trainer, but --mode {spec.mode} "
                     "runs another trainer", "drop --dapo-source, or use --mode dapo")
    return None


def what_runs(spec, plan) -> str:
    """One line for `plan`: the verl mechanism this mode becomes on this release."""
    kind = mechanism(spec)
    version = spec.verl_version
    algo = spec.algorithm.upper()
    if kind == "dapo":
        return f"{algo} (colocated, synchronous) runs the DAPO recipe trainer {plan.entry_module} on verl {version}"
    if kind == "ppo":
        if is_v1(spec):
            return (f"{algo} (colocated, synchronous) runs verl's core trainer {plan.entry_module} with the V1 "
                    f"trainer in sync mode (trainer.use_v1, trainer.v1.trainer_mode=sync) on verl {version}")
        return f"{algo} (colocated, synchronous) runs verl's core trainer {plan.entry_module} (RayPPOTrainer) on verl {version}"
    if kind in V1_MODES:
        how = ("trainer and rollout share the devices; rollout of the next batches overlaps training"
               if kind == "colocate-async" else
               "trainer and a standalone rollout pool on their own devices, weights synced every "
               f"{spec.effective_parameter_sync_step} mini-batches")
        return (f"{algo} {kind} runs {plan.entry_module} with the V1 trainer in {V1_MODES[kind]} mode on verl "
                f"{version} ({how})")
    if kind == "one-step-off":
        successor = (" — on 0.9.x verl's successor is the V1 trainer's separate_async mode (--mode separate-async)"
                     if release_numbers(version) >= V1_SINCE else "")
        return f"{algo} one-step-off runs {plan.entry_module} on verl {version}{successor}"
    if kind == "fully-async":
        return (f"{algo} fully-async runs {plan.entry_module} (verl.experimental, bounded staleness "
                f"{spec.staleness_threshold:g}) on verl {version}: it takes no train batch (data.train_batch_size=0, "
                f"as its rollouter asserts); each trainer step takes mini-batch {spec.effective_mini_batch_size} "
                f"prompts, weights sync every {spec.effective_parameter_sync_step} steps, i.e. every "
                f"{spec.effective_mini_batch_size * spec.effective_parameter_sync_step} prompts "
                f"(--batch-size {spec.batch_size}); {_rollout_total(spec)} (rollout.total_rollout_steps); no dynamic "
                "sampling (verl's fully-async code has no "
                "group filtering)")
    return f"{algo} {kind} runs {plan.entry_module} on verl {version}"


def _rollout_total(spec) -> str:
    if spec.train_steps is None:
        return "total_epochs x the loader's batches in all"
    return f"{spec.train_steps} syncs = {spec.train_steps * spec.batch_size} prompts in all"


def modes_of(version: str) -> list[str]:
    """The modes this verl-deploy plans on a release (for `features` and --help)."""
    release = release_numbers(version)
    return [mode for mode, first in FIRST_RELEASE.items() if release >= release_numbers(first)]


# DAPO from verl's core (main_ppo, V1 sync) beside the verl-recipe trainer, on 0.9.x: (what, core, recipe)
CORE_VS_RECIPE: tuple[tuple[str, str, str], ...] = (
    ("entry", "verl.trainer.main_ppo (V1 trainer, from the wheel)",
     "recipe.dapo.main_dapo (verl tree + verl-recipe checkout)"),
    ("dynamic sampling", "V1 replay buffer refills filtered groups one prompt at a time (data.gen_batch_size "
     "forced to 1; algorithm.filter_groups.max_inflight_gen_batches bounds what is in flight)",
     "generates data.gen_batch_size prompts per round until the train batch is full"),
    ("max_num_gen_batches", "ignored (V1 logs a warning)", "raises 'Generated too many' at the cap"),
    ("overlong buffer", "+reward.reward_kwargs.* into the dapo reward manager (not in the base config)",
     "reward.reward_kwargs.* declared by the recipe yaml, same dapo reward manager"),
)


def comparison_findings(spec) -> list[Finding]:
    """What `plan` shows beside the launch: GRPO against DAPO, DAPO's core trainer against the recipe."""
    from verl_deploy.findings import info
    from verl_deploy.profiles.algorithms import GRPO_VS_DAPO

    found: list[Finding] = []
    if spec.algorithm == "grpo":
        found.append(info("algorithm", "GRPO differs from DAPO: " + "; ".join(GRPO_VS_DAPO),
                          "pass --algorithm dapo for DAPO, or change one setting with --override", area="dapo"))
    if spec.mode == "dapo" and spec.algorithm == "dapo" and release_numbers(spec.verl_version) >= V1_SINCE:
        chosen = dapo_source_for(spec)
        rows = "; ".join(f"{what}: core = {core} | recipe = {recipe}" for what, core, recipe in CORE_VS_RECIPE)
        other = "recipe" if chosen == "core" else "core"
        found.append(info("dapo_source", f"DAPO from {chosen} (--dapo-source {other} for the other): {rows}",
                          f"pass --dapo-source {other} to run the other", area="dapo"))
    return found


def ignored_settings(spec) -> dict[str, str]:
    """Settings the chosen trainer does not use, field -> what it does instead: the views show this beside
    the value, so a derived gen_batch_size of 96 is not read as what verl generates per round."""
    ignored: dict[str, str] = {}
    if spec.mode == "fully-async":  # fully_async_rollouter.py asserts data.gen_batch_size == 1
        ignored["gen_batch_size"] = "fully-async's rollouter takes one prompt at a time (data.gen_batch_size=1)"
        ignored["filter_groups"] = "verl's fully-async code has no group filtering"
        ignored["max_num_gen_batches"] = "verl's fully-async code has no group filtering"
    elif is_v1(spec):  # trainer/ppo/v1/trainer_base.py: one prompt at a time, the replay buffer refills groups
        ignored["gen_batch_size"] = "the V1 trainer fetches one prompt at a time (data.gen_batch_size=1)"
        ignored["max_num_gen_batches"] = ("the V1 replay buffer bounds generation with "
                                          "algorithm.filter_groups.max_inflight_gen_batches instead")
    elif mechanism(spec) == "ppo" and spec.filter_groups:
        ignored["filter_groups"] = f"verl {spec.verl_version}'s main_ppo trainer has no dynamic sampling"
    if not spec.filter_groups:
        ignored.setdefault("max_num_gen_batches", "dynamic sampling is off (--filter-groups no)")
    return ignored


def option_findings(spec) -> list[Finding]:
    """Settings the chosen trainer ignores or replaces: said, never silently accepted."""
    from verl_deploy.findings import warning

    found: list[Finding] = []
    given = lambda name: spec.sources.get(name, "default") not in ("default", "derived")  # noqa: E731
    v1 = is_v1(spec)
    if spec.mode == "fully-async" and given("gen_batch_size"):
        found.append(warning("gen_batch_size", f"--gen-batch-size {spec.gen_batch_size}: verl's fully-async rollouter "
                             "asserts data.gen_batch_size == 1 (one prompt at a time); the launch sends 1",
                             "drop --gen-batch-size"))
    if spec.mode == "fully-async" and spec.batch_size % spec.effective_mini_batch_size:
        found.append(error("batch_size", f"fully-async syncs weights every parameter_sync_step x mini-batch prompts: "
                           f"--batch-size {spec.batch_size} is not a multiple of the mini-batch "
                           f"{spec.effective_mini_batch_size}", "choose --batch-size = mini-batch x N"))
    if v1 and given("gen_batch_size"):
        found.append(warning("gen_batch_size", f"--gen-batch-size {spec.gen_batch_size}: verl {spec.verl_version}'s "
                             "V1 trainer fetches one prompt at a time in this run and overrides data.gen_batch_size "
                             "to 1 (verl/trainer/ppo/v1/trainer_base.py)", "drop --gen-batch-size"))
    if v1 and spec.filter_groups and given("max_num_gen_batches"):
        found.append(warning("max_num_gen_batches", "the V1 replay buffer ignores max_num_gen_batches (it bounds "
                             "generation with algorithm.filter_groups.max_inflight_gen_batches)",
                             "drop --max-num-gen-batches, or --dapo-source recipe for the recipe's cap"))
    if mechanism(spec) == "ppo" and not v1 and spec.filter_groups:
        found.append(warning("filter_groups", f"verl {spec.verl_version}'s main_ppo trainer has no dynamic sampling: "
                             "algorithm.filter_groups is not sent", "drop --filter-groups, or --algorithm dapo"))
    return found + settings_without_effect(spec, given)


def settings_without_effect(spec, given) -> list[Finding]:
    """A field the user set that means nothing in this run (its declared `when`/`since` do not hold:
    --parameter-sync-step with --mode dapo, --dapo-source with GRPO or below 0.9.0): a warning, never silence."""
    from verl_deploy.findings import warning
    from verl_deploy.spec import DECLARED

    found: list[Finding] = []
    for name, meta in DECLARED.items():
        if not (meta.when or meta.since) or not given(name) or spec.applies(name):
            continue
        shown = meta.flag or f"{name} (config file, run section)"
        fixes = [f"drop {shown}"] + [f"{DECLARED[key].flag} {allowed[0]}" for key, allowed in meta.when.items()
                                     if str(getattr(spec, key)) not in allowed]
        if meta.since and release_numbers(spec.verl_version) < release_numbers(meta.since):
            fixes.append(f"--verl-version {meta.since} or later")
        found.append(warning(name, f"{shown} {getattr(spec, name)} has no effect in this run ({meta.condition()})",
                             " or ".join(fixes)))
    return found


RELEASES = ("0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")


def what_verl_runs(mode: str, version: str) -> str:
    """Short cell of the mode x release table (`features`, README): the verl entry, or '-' (refused)."""
    from verl_deploy.profiles import Profile, profile_for

    profile = profile_for(version)
    release = release_numbers(version)
    if not isinstance(profile, Profile) or release < release_numbers(FIRST_RELEASE.get(mode, "0.6.0")):
        return "-"
    if mode in V1_MODES:
        return f"main_ppo V1 {V1_MODES[mode]}"
    if mode == "grpo":
        return "main_ppo V1 sync" if release >= V1_SINCE else "main_ppo (RayPPOTrainer)"
    if mode == "dapo" and release >= V1_SINCE:  # DAPO from verl's core is the default there
        return "main_ppo V1 sync; recipe: " + profile.entry_modules[mode]
    entry = profile.entry_modules[mode]
    text = entry.replace("verl.experimental.", "experimental.")
    if mode in profile.wheel_lacks_entry.get(version, ()):
        text += " (source checkout)"
    return text


def mode_table() -> list[dict[str, Any]]:
    """Every mode (and --algorithm grpo in the dapo mode) x release."""
    rows = []
    for mode in (*FIRST_RELEASE, "grpo"):
        rows.append({"mode": mode if mode != "grpo" else "dapo --algorithm grpo",
                     "releases": {version: what_verl_runs(mode, version) for version in RELEASES}})
    return rows
