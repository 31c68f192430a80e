"""What `--algorithm grpo` changes from DAPO, as verl's own GRPO example scripts set it.

verl's GRPO examples at every supported tag (v0.6.0-v0.7.1 examples/grpo_trainer/run_qwen3-8b.sh and
run_qwen3-8b_npu.sh; v0.8.0-v0.9.0 run_qwen3_8b_fsdp.sh / run_qwen3_8b_megatron.sh) run
verl.trainer.main_ppo with algorithm.adv_estimator=grpo, algorithm.use_kl_in_reward=False,
actor.use_kl_loss=True, kl_loss_coef=0.001, kl_loss_type=low_var_kl, entropy_coeff=0, and leave the rest at
the config's defaults (same at every tag): clip_ratio_low = clip_ratio_high = 0.2, clip_ratio_c 3.0,
loss_agg_mode token-mean, optim weight_decay 0.01, lr_warmup_steps -1, reward manager `naive`; no
algorithm.filter_groups (off by default) and no overlong buffer.
"""

from __future__ import annotations

from typing import Any

# RunSpec fields GRPO defaults differently (a value the user gives still wins)
GRPO_SPEC_DEFAULTS: dict[str, Any] = {
    "filter_groups": False,
    "overlong_buffer": False,
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "loss_agg_mode": "token-mean",
}

# knob -> value for GRPO where DAPO's launch sets another (compiler.knob_settings)
GRPO_KNOBS: dict[str, Any] = {
    "use_kl_loss": True,
    "kl_loss_coef": 0.001,
    "kl_loss_type": "low_var_kl",
    "clip_ratio_c": 3.0,
    "weight_decay": 0.01,
    "lr_warmup_steps": -1,
    "reward_manager": "naive",
}
# DAPO knobs GRPO does not send at all (the overlong buffer belongs to the dapo reward manager)
GRPO_DROPS: tuple[str, ...] = ("overlong_enable", "overlong_len", "overlong_penalty", "overlong_log", "max_resp_len")

# what `plan` says GRPO changes from DAPO (one line)
GRPO_VS_DAPO: tuple[str, ...] = (
    "no dynamic sampling (algorithm.filter_groups off)",
    "no overlong buffer (reward manager naive instead of dapo)",
    "symmetric clip 0.2/0.2 (DAPO: clip-higher 0.2/0.28), clip_ratio_c 3.0 (DAPO 10)",
    "KL loss on: kl_loss_coef 0.001, low_var_kl (DAPO: off)",
    "weight_decay 0.01 and no lr warm-up, verl's defaults (DAPO: 0.1 and 10 steps)",
)
