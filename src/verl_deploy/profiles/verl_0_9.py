"""verl 0.9.x: as 0.8, but `actor.megatron.grad_offload` is gone (param_offload releases gradients)."""

from verl_deploy.profiles.base import BASE_CONFIGS, Profile, dapo_config_names
from verl_deploy.profiles.verl_0_8 import ENTRY, OVERLAYS, REWARD_KEYS

PROFILE = Profile(
    name="0.9",
    matches=("0.9.",),
    entry_modules=ENTRY,
    config_names=dapo_config_names(),
    base_configs=BASE_CONFIGS,
    recipe_overlays=OVERLAYS,
    overrides={**REWARD_KEYS, "grad_offload@megatron": ()},
    wheel_config_dirs={"one-step-off": "verl/experimental/one_step_off_policy/config"},
)
