"""verl config keys that moved between releases, read by `migrate` before the key tables' candidates.

Each move is a key prefix in the older layout and where the newer one keeps it, with the first
release of the newer layout. Found in verl's trees: the DAPO recipe's reward_model.overlong_buffer
became the reward loop's reward.reward_kwargs.overlong_buffer_cfg when the reward settings moved
under reward.* (0.7.1); one-step-off's recipe/ entry became verl.experimental's (0.7.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_deploy.verl_release import release_numbers


@dataclass(frozen=True)
class Move:
    old: str  # key (or prefix ending in ".")
    new: str
    since: str  # the first release with the new layout
    why: str


MOVES: tuple[Move, ...] = (
    Move("reward_model.overlong_buffer.", "reward.reward_kwargs.overlong_buffer_cfg.", "0.7.1",
         "the DAPO recipe's overlong buffer is the reward loop's overlong_buffer_cfg"),
    Move("reward_model.reward_kwargs.", "reward.reward_kwargs.", "0.7.1", "the reward settings moved under reward.*"),
    Move("reward_model.reward_manager", "reward.reward_manager.name", "0.7.1",
         "the reward manager is named under reward.reward_manager"),
)

ENTRY_MOVES: tuple[Move, ...] = (
    Move("recipe.one_step_off_policy.main_ppo", "verl.experimental.one_step_off_policy.main_ppo", "0.7.1",
         "one-step-off moved from recipe/ into verl.experimental"),
)



def move_for(key: str, source: str, target: str) -> tuple[str, Move] | None:
    """Where `key` lives in `target` when a known move lies between the two releases."""
    if not (release_numbers(source) < release_numbers(target)):
        return None
    for move in MOVES:
        if not (release_numbers(source) < release_numbers(move.since) <= release_numbers(target)):
            continue
        if move.old.endswith(".") and key.startswith(move.old):
            return move.new + key[len(move.old):], move
        if key == move.old:
            return move.new, move
    return None
