"""verl 0.7.1 and 0.8.x: reward keys under `reward.*`, one-step-off in verl.experimental,
DAPO from the verl-recipe repository checked out as the verl tree's `recipe/` submodule."""

from verl_deploy.profiles.base import (BASE_CONFIGS, Profile, dapo_config_names, filter_groups_overlay,
                                       keys, one_step_off_overlay)
from verl_deploy.profiles.modes import (FULLY_ASYNC_CONFIG_NAMES, FULLY_ASYNC_ENTRY, FULLY_ASYNC_KEYS,
                                        FULLY_ASYNC_OVERLAYS, PPO_CONFIG_NAMES, PPO_ENTRY, PPO_OVERLAYS)


def dapo_overlay() -> dict:
    """verl-recipe's dapo yaml (b0f3bfb and later): the reward-loop layout."""
    return {
        "data": {"gen_batch_size": "${data.train_batch_size}"},
        "reward": {
            "reward_manager": {"name": "dapo"},
            "reward_kwargs": {
                "overlong_buffer_cfg": {"enable": False, "len": 0, "penalty_factor": 0.0, "log": False},
                "max_resp_len": None,
            },
        },
        "algorithm": {"filter_groups": filter_groups_overlay()},
        "trainer": {"project_name": "verl-dapo"},
    }


_KW = "reward.reward_kwargs."
# In DAPO the recipe yaml declares reward_kwargs.*; one-step-off's config does not (needs `+`).
# max_resp_len is mandatory from 0.7.1: the reward loop asserts it whenever overlong_buffer_cfg exists.
REWARD_KEYS = {
    "reward_manager": keys("reward.reward_manager.name"),
    "overlong_enable@dapo": keys(_KW + "overlong_buffer_cfg.enable"),
    "overlong_len@dapo": keys(_KW + "overlong_buffer_cfg.len"),
    "overlong_penalty@dapo": keys(_KW + "overlong_buffer_cfg.penalty_factor"),
    "overlong_log@dapo": keys(_KW + "overlong_buffer_cfg.log"),
    "max_resp_len@dapo": keys(_KW + "max_resp_len"),
    "overlong_enable": keys(_KW + "overlong_buffer_cfg.enable", plus=True),
    "overlong_len": keys(_KW + "overlong_buffer_cfg.len", plus=True),
    "overlong_penalty": keys(_KW + "overlong_buffer_cfg.penalty_factor", plus=True),
    "overlong_log": keys(_KW + "overlong_buffer_cfg.log", plus=True),
    "max_resp_len": keys(_KW + "max_resp_len", plus=True),
}

ENTRY = {"dapo": "recipe.dapo.main_dapo", "one-step-off": "verl.experimental.one_step_off_policy.main_ppo"}
OVERLAYS = {
    ("dapo", "megatron"): dapo_overlay(),
    ("dapo", "fsdp"): dapo_overlay(),
    ("one-step-off", "megatron"): one_step_off_overlay({"checkpoint_engine": {"backend": "nccl"}}),
    ("one-step-off", "fsdp"): one_step_off_overlay({"checkpoint_engine": {"backend": "nccl"}}),
}

PROFILE = Profile(
    name="0.8",
    matches=("0.7.1", "0.8."),
    entry_modules={**ENTRY, **PPO_ENTRY, **FULLY_ASYNC_ENTRY},
    config_names={**dapo_config_names(), **PPO_CONFIG_NAMES, **FULLY_ASYNC_CONFIG_NAMES},
    base_configs=BASE_CONFIGS,
    recipe_overlays={**OVERLAYS, **PPO_OVERLAYS, **FULLY_ASYNC_OVERLAYS},
    overrides={**REWARD_KEYS, **FULLY_ASYNC_KEYS},
    wheel_config_dirs={"one-step-off": "verl/experimental/one_step_off_policy/config"},
    # v0.7.1's verl/experimental/one_step_off_policy/ has main_ppo.py but no __init__.py (0.8.0 adds it)
    wheel_lacks_entry={"0.7.1": ("one-step-off", "fully-async")},
)
