"""verl 0.6.0 and 0.6.1: as 0.7.0 (in-tree recipe/, legacy reward keys, legacy workers), but older keys.

Differences that matter to a launch: no `actor.megatron.use_remove_padding` (the model key alone turns
remove-padding on), the rollout defaults to `mode: sync` (vllm_rollout_spmd, which honours
`rollout.max_model_len`), the one-step-off recipe yaml only declares the rollout pool, and there is
no reward loop (the DAPO reward manager reads `reward_model.overlong_buffer`, one-step-off's the
`reward_model.reward_kwargs` passed to load_reward_manager).
"""

from verl_deploy.profiles.base import A, BASE_CONFIGS, Key, Profile, dapo_config_names, keys
from verl_deploy.profiles.verl_0_7_0 import PROFILE as V070
from verl_deploy.profiles.verl_0_7_0 import _dapo_overlay
from verl_deploy.profiles.modes import PPO_CONFIG_NAMES, PPO_OVERLAYS


def _one_step_off_overlay() -> dict:
    """recipe/one_step_off_policy/config/*.yaml at v0.6.0 and v0.6.1: only the rollout pool."""
    return {"rollout": {"nnodes": 1, "n_gpus_per_node": 8}}


OVERLAYS = {
    ("dapo", "megatron"): _dapo_overlay(),
    ("dapo", "fsdp"): _dapo_overlay(),
    ("one-step-off", "megatron"): _one_step_off_overlay(),
    ("one-step-off", "fsdp"): _one_step_off_overlay(),
}

PROFILE = Profile(
    name="0.6",
    matches=("0.6.0", "0.6.1"),
    entry_modules=V070.entry_modules,
    config_names={**dapo_config_names(), **PPO_CONFIG_NAMES},
    base_configs=BASE_CONFIGS,
    recipe_overlays={**OVERLAYS, **PPO_OVERLAYS},
    overrides={
        **V070.overrides,
        "remove_padding@megatron": (Key(A + "model.use_remove_padding"),),  # no actor.megatron key in 0.6
        "model_remove_padding@megatron": (),
        "max_model_len": keys(A + "rollout.max_model_len"),  # vllm_rollout_spmd uses it (0.7.0 ignores it)
        # recipe/dapo/main_dapo.py passes reward_model.overlong_buffer and data.max_response_length to the
        # reward manager itself and never reads reward_model.reward_kwargs (0.7.0's reward loop did): not sent
        "overlong_enable@dapo": keys("reward_model.overlong_buffer.enable"),
        "overlong_len@dapo": keys("reward_model.overlong_buffer.len"),
        "overlong_penalty@dapo": keys("reward_model.overlong_buffer.penalty_factor"),
        "overlong_log@dapo": keys("reward_model.overlong_buffer.log"),
        "max_resp_len@dapo": (),
    },
    notes=(
        "recipe/ is a plain directory of the verl 0.6 tree; the command runs from the verl root",
        "verl 0.6 rolls out in vLLM's sync mode; one-step-off's own yaml sets only the rollout pool",
    ),
)
