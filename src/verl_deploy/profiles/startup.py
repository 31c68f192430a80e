"""What verl does to the composed config when a run starts, before its code reads it: `import --check`
compares two launches as verl reads them, not only as Hydra composed them.

verl/experimental/reward_loop/reward_loop.py `migrate_legacy_reward_impl` (0.7.1+) replaces
`reward.reward_kwargs` whole with `reward_model.reward_kwargs` when a script sets the latter (`if
config.reward_model.get("reward_kwargs") is not None: config.reward["reward_kwargs"] = ...`). The entries
whose `main` calls it, read at the tags: verl.trainer.main_ppo 0.7.1-0.8.x (0.9's V1 main_ppo does not),
fully_async_main 0.8.0+, and verl-recipe's dapo main_dapo at every commit verl-deploy pins (6d8d5c1,
e7f8895, ac8b84f). The one-step-off main_ppo of 0.8.0 calls run_ppo directly and does not.

The reward loop's dapo reward manager (verl/experimental/reward_loop/reward_manager/dapo.py, 0.7.1+) reads
`reward.reward_kwargs.overlong_buffer_cfg` and `max_resp_len` only behind `overlong_buffer_cfg is not None and
overlong_buffer_cfg.enable` from 0.9.0 (0.7.1-0.8.x assert `max_resp_len >= overlong_buffer_cfg.len` whenever
the section exists): a section with enable False reads as no section, where those asserts hold.
"""

from __future__ import annotations

from typing import Any

from verl_deploy.verl_release import release_numbers

LEGACY_REWARD_KWARGS = "reward_model.reward_kwargs"
REWARD_KWARGS = "reward.reward_kwargs"
# entry module -> (first release, first release without) of migrate_legacy_reward_impl at its start
REPLACES_REWARD_KWARGS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "verl.trainer.main_ppo": ((0, 7, 1), (0, 9, 0)),
    "recipe.dapo.main_dapo": ((0, 7, 1), (99,)),
    "verl.experimental.fully_async_policy.fully_async_main": ((0, 8, 0), (99,)),
}


OVERLONG = REWARD_KWARGS + ".overlong_buffer_cfg"
MAX_RESP_LEN = REWARD_KWARGS + ".max_resp_len"
OVERLONG_BEHIND_ENABLE = (0, 9, 0)  # the reward loop's asserts moved behind `enable`
REWARD_LOOP = (0, 7, 1)


def as_verl_reads(flat: dict[str, Any], entry: str, version: str) -> dict[str, Any]:
    """A flat composed config (path -> value) after the start-up steps of `entry` on `version` that move keys."""
    return _after_start_up(flat, entry, version)


def without_unread_overlong(flat: dict[str, Any], version: str) -> dict[str, Any]:
    """The config without the overlong buffer keys the dapo reward manager of `version` does not read: a section
    with enable False (where 0.7.1-0.8.x's asserts hold) and max_resp_len with it, or max_resp_len alone."""
    release = release_numbers(version)
    enable = flat.get(OVERLONG + ".enable")
    section = [path for path in flat if path == OVERLONG or path.startswith(OVERLONG + ".")]
    if release < REWARD_LOOP or (section and enable is not False):
        return flat
    length, most = flat.get(OVERLONG + ".len"), flat.get(MAX_RESP_LEN)
    if section and release < OVERLONG_BEHIND_ENABLE and \
            not (isinstance(most, int) and isinstance(length, int) and most >= length):
        return flat  # 0.7.1-0.8.x assert these whenever the section exists: not the same as no section
    unread = set(section) | {MAX_RESP_LEN}
    if not unread & set(flat):
        return flat
    return {path: value for path, value in flat.items() if path not in unread}


def _after_start_up(flat: dict[str, Any], entry: str, version: str) -> dict[str, Any]:
    first, past = REPLACES_REWARD_KWARGS.get(entry, ((99,), (99,)))
    if not first <= release_numbers(version) < past:
        return flat
    prefix = LEGACY_REWARD_KWARGS + "."
    legacy = {path[len(prefix):]: value for path, value in flat.items() if path.startswith(prefix)}
    if not legacy and flat.get(LEGACY_REWARD_KWARGS) is None:
        return flat
    kept = {path: value for path, value in flat.items()
            if path != REWARD_KWARGS and not path.startswith(REWARD_KWARGS + ".")}
    kept.update({f"{REWARD_KWARGS}.{path}": value for path, value in legacy.items()} or {REWARD_KWARGS: {}})
    return kept
