"""verl 0.7.0 (the version in the seeds' image): recipes in the verl tree, legacy reward keys."""

from verl_deploy.profiles.base import (BASE_CONFIGS, Key, Profile, dapo_config_names, filter_groups_overlay,
                                       keys, one_step_off_overlay)
from verl_deploy.profiles.modes import PPO_CONFIG_NAMES, PPO_ENTRY, PPO_OVERLAYS

_LEGACY_OVERLONG = {"enable": False, "len": 0, "penalty_factor": 0.0, "log": False}


def _dapo_overlay() -> dict:
    return {
        "data": {"gen_batch_size": "${data.train_batch_size}"},
        "reward_model": {"reward_manager": "dapo", "overlong_buffer": dict(_LEGACY_OVERLONG)},
        "algorithm": {"filter_groups": filter_groups_overlay()},
        "trainer": {"project_name": "verl-dapo"},
    }


# The legacy DAPO reward manager reads reward_model.overlong_buffer.*; the reward loop (on by
# default in 0.7.0) reads reward_model.reward_kwargs.*, absent from the config (needs `+`).
# DAPO sends both so the overlong penalty applies whichever path computes the reward.
_KWARGS = "reward_model.reward_kwargs."

PROFILE = Profile(
    name="0.7.0",
    matches=("0.7.0",),
    entry_modules={"dapo": "recipe.dapo.main_dapo", "one-step-off": "recipe.one_step_off_policy.main_ppo", **PPO_ENTRY},
    config_names={**dapo_config_names(), **PPO_CONFIG_NAMES},
    base_configs=BASE_CONFIGS,
    recipe_overlays={**PPO_OVERLAYS, 
        ("dapo", "megatron"): _dapo_overlay(),
        ("dapo", "fsdp"): _dapo_overlay(),
        ("one-step-off", "megatron"): one_step_off_overlay(),
        ("one-step-off", "fsdp"): one_step_off_overlay(),
    },
    overrides={
        "reward_manager": keys("reward_model.reward_manager"),
        "overlong_enable@dapo": (Key("reward_model.overlong_buffer.enable"), Key(_KWARGS + "overlong_buffer_cfg.enable", True, mirror="reward_model.overlong_buffer.enable")),
        "overlong_len@dapo": (Key("reward_model.overlong_buffer.len"), Key(_KWARGS + "overlong_buffer_cfg.len", True, mirror="reward_model.overlong_buffer.len")),
        "overlong_penalty@dapo": (Key("reward_model.overlong_buffer.penalty_factor"),
                                  Key(_KWARGS + "overlong_buffer_cfg.penalty_factor", True, mirror="reward_model.overlong_buffer.penalty_factor")),
        "overlong_log@dapo": (Key("reward_model.overlong_buffer.log"), Key(_KWARGS + "overlong_buffer_cfg.log", True, mirror="reward_model.overlong_buffer.log")),
        "overlong_enable": keys(_KWARGS + "overlong_buffer_cfg.enable", plus=True),
        "overlong_len": keys(_KWARGS + "overlong_buffer_cfg.len", plus=True),
        "overlong_penalty": keys(_KWARGS + "overlong_buffer_cfg.penalty_factor", plus=True),
        "overlong_log": keys(_KWARGS + "overlong_buffer_cfg.log", plus=True),
        "max_resp_len": (Key(_KWARGS + "max_resp_len", True, mirror="data.max_response_length"),),
        # the async vLLM server sets max_model_len = max_position_embeddings (vllm_async_server.py:198)
        "max_model_len": (),
    },
    notes=(
        "recipe/ is a plain directory of the verl 0.7.0 tree; the command runs from the verl root",
    ),
)
