"""verl 0.9.x: as 0.8, but `actor.megatron.grad_offload` is gone (param_offload releases gradients)."""

from verl_deploy.profiles.base import BASE_CONFIGS, Profile, dapo_config_names
from verl_deploy.profiles.modes import (FULLY_ASYNC_CONFIG_NAMES, FULLY_ASYNC_ENTRY, FULLY_ASYNC_KEYS,
                                        FULLY_ASYNC_OVERLAYS, PPO_CONFIG_NAMES, PPO_ENTRY, PPO_OVERLAYS,
                                        V1_CONFIG_NAMES, V1_ENTRY, V1_KEYS, V1_OVERLAYS)
from verl_deploy.profiles.verl_0_8 import ENTRY, OVERLAYS, REWARD_KEYS

PROFILE = Profile(
    name="0.9",
    matches=("0.9.",),
    entry_modules={**ENTRY, **PPO_ENTRY, **V1_ENTRY, **FULLY_ASYNC_ENTRY},
    config_names={**dapo_config_names(), **PPO_CONFIG_NAMES, **V1_CONFIG_NAMES, **FULLY_ASYNC_CONFIG_NAMES},
    base_configs=BASE_CONFIGS,
    recipe_overlays={**OVERLAYS, **PPO_OVERLAYS, **V1_OVERLAYS, **FULLY_ASYNC_OVERLAYS},
    overrides={**REWARD_KEYS, "grad_offload@megatron": (), **V1_KEYS, **FULLY_ASYNC_KEYS},
    wheel_config_dirs={"one-step-off": "verl/experimental/one_step_off_policy/config",
                       "fully-async": "verl/experimental/fully_async_policy/config"},
)
