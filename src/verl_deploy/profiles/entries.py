"""verl's launch entry modules, as its scripts name them: which mode each runs, its default config
name (the `@hydra.main(config_path="config", config_name=...)` of that module), and the releases
that have it. Read by `import` to tell what a hand-written script runs and with which release."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    module: str
    mode: str | None  # the verl-deploy mode that runs it (None: no mode runs this entry)
    default_config: str
    releases: tuple[str, ...]  # the releases whose tree (or verl-recipe checkout) has this module


RELEASES = ("0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")

ENTRIES: tuple[Entry, ...] = (
    Entry("recipe.dapo.main_dapo", "dapo", "dapo_trainer", RELEASES),
    Entry("recipe.one_step_off_policy.main_ppo", "one-step-off", "one_step_off_ppo_trainer",
          ("0.6.0", "0.6.1", "0.7.0")),
    Entry("verl.experimental.one_step_off_policy.main_ppo", "one-step-off", "one_step_off_ppo_trainer",
          ("0.7.1", "0.8.0", "0.9.0", "0.9.1")),
    Entry("verl.trainer.main_ppo", None, "ppo_trainer", RELEASES),
    Entry("verl.experimental.fully_async_policy.fully_async_main", "fully-async", "fully_async_ppo_trainer",
          ("0.7.1", "0.8.0", "0.9.0", "0.9.1")),
)

# The reward keys tell the release family apart where the entry does not: 0.7.0 and older read
# reward_model.*; 0.7.1 and later moved the reward settings under reward.*.
LEGACY_REWARD_PREFIX = "reward_model."
NEW_REWARD_PREFIX = "reward."
LEGACY_REWARD_RELEASES = ("0.6.0", "0.6.1", "0.7.0")


def entry_of(module: str) -> Entry | None:
    return next((e for e in ENTRIES if e.module == module), None)
