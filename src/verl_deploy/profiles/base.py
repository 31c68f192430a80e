"""What a verl version profile holds, and the keys all supported versions share.

A profile is the only code that knows verl's config keys. The compiler asks it for
*knobs* (``train_tp``, ``param_offload``) and gets back the real keys, with the Hydra
``+`` prefix where the key is absent from that version's config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

A = "actor_rollout_ref."


@dataclass(frozen=True)
class Key:
    """One verl config key a knob sets. `plus` marks keys absent from the config (Hydra `+`)."""

    path: str
    plus: bool = False
    # Maps the knob's value to the value this key takes (e.g. flash_attn True -> "flash").
    values: Mapping[Any, Any] | None = None
    # a `+` key verl's code reads with a default when the config lacks it (`.get(key, default)`): a config
    # without the key behaves as one with this value (ABSENT: no such default)
    absent: Any = None
    has_absent: bool = False
    # a `+` key sent as a copy of another key's value so a second code path reads the same setting (e.g.
    # verl 0.7.0's reward loop reads reward_kwargs.overlong_buffer_cfg, the recipe's reward_model.overlong_buffer)
    mirror: str | None = None
    # verl reads one value here as the list of that value
    one_is_list: bool = False

    def value_for(self, value: Any) -> Any:
        if self.values is None:
            return value
        return self.values[value]


def keys(*paths: str, plus: bool = False) -> tuple[Key, ...]:
    return tuple(Key(p, plus) for p in paths)


# knob -> keys, the same for both frameworks and all supported versions.
COMMON: dict[str, tuple[Key, ...]] = {
    # data
    "train_files": keys("data.train_files"),
    "val_files": keys("data.val_files"),
    "prompt_key": keys("data.prompt_key"),
    "max_prompt_length": keys("data.max_prompt_length"),
    "max_response_length": keys("data.max_response_length"),
    "train_batch_size": keys("data.train_batch_size"),
    "gen_batch_size": keys("data.gen_batch_size"),
    "truncation": keys("data.truncation"),
    "filter_overlong_prompts": keys("data.filter_overlong_prompts"),
    # algorithm
    "adv_estimator": keys("algorithm.adv_estimator"),
    "use_kl_in_reward": keys("algorithm.use_kl_in_reward"),
    "kl_coef": keys("algorithm.kl_ctrl.kl_coef"),
    "filter_groups_enable": keys("algorithm.filter_groups.enable"),
    "filter_groups_metric": keys("algorithm.filter_groups.metric"),
    "max_num_gen_batches": keys("algorithm.filter_groups.max_num_gen_batches"),
    # model and actor
    "model_path": keys(A + "model.path"),
    "lr": keys(A + "actor.optim.lr"),
    "lr_warmup_steps": keys(A + "actor.optim.lr_warmup_steps"),
    "weight_decay": keys(A + "actor.optim.weight_decay"),
    "use_torch_compile": keys(A + "actor.use_torch_compile", A + "ref.use_torch_compile"),
    "mini_batch_size": keys(A + "actor.ppo_mini_batch_size"),
    "micro_batch_size": keys(
        A + "actor.ppo_micro_batch_size_per_gpu",
        A + "ref.log_prob_micro_batch_size_per_gpu",
        A + "rollout.log_prob_micro_batch_size_per_gpu",
    ),
    "use_kl_loss": keys(A + "actor.use_kl_loss"),
    "kl_loss_coef": keys(A + "actor.kl_loss_coef"),
    "kl_loss_type": keys(A + "actor.kl_loss_type"),
    "clip_ratio_low": keys(A + "actor.clip_ratio_low"),
    "clip_ratio_high": keys(A + "actor.clip_ratio_high"),
    "clip_ratio_c": keys(A + "actor.clip_ratio_c"),
    "loss_agg_mode": keys(A + "actor.loss_agg_mode"),
    "entropy_coeff": keys(A + "actor.entropy_coeff"),
    "use_dynamic_bsz": keys(
        A + "actor.use_dynamic_bsz",
        A + "ref.log_prob_use_dynamic_bsz",
        A + "rollout.log_prob_use_dynamic_bsz",
    ),
    "max_token_len": keys(
        A + "actor.ppo_max_token_len_per_gpu",
        A + "ref.log_prob_max_token_len_per_gpu",
        A + "rollout.log_prob_max_token_len_per_gpu",
    ),
    # rollout
    "rollout_name": keys(A + "rollout.name"),
    "rollout_n": keys(A + "rollout.n"),
    "rollout_tp": keys(A + "rollout.tensor_model_parallel_size"),
    "gpu_memory_utilization": keys(A + "rollout.gpu_memory_utilization"),
    "max_num_batched_tokens": keys(A + "rollout.max_num_batched_tokens"),
    "max_model_len": keys(A + "rollout.max_model_len"),
    "temperature": keys(A + "rollout.temperature"),
    # validation samples at the rollout's temperature unless an --override says otherwise (verl's default is 0)
    "val_temperature": keys(A + "rollout.val_kwargs.temperature"),
    "top_p": keys(A + "rollout.top_p", A + "rollout.val_kwargs.top_p"),
    "top_k": keys(A + "rollout.top_k", A + "rollout.val_kwargs.top_k"),
    "val_do_sample": keys(A + "rollout.val_kwargs.do_sample"),
    "val_n": keys(A + "rollout.val_kwargs.n"),
    "prefix_caching": keys(A + "rollout.enable_prefix_caching"),
    "chunked_prefill": keys(A + "rollout.enable_chunked_prefill"),
    # trainer
    # verl's Tracking takes one name as a list of it (verl/utils/tracking.py, every supported tag)
    "logger": (Key("trainer.logger", one_is_list=True),),
    "project_name": keys("trainer.project_name"),
    "experiment_name": keys("trainer.experiment_name"),
    "n_gpus_per_node": keys("trainer.n_gpus_per_node"),
    "nnodes": keys("trainer.nnodes"),
    "total_training_steps": keys("trainer.total_training_steps"),
    "total_epochs": keys("trainer.total_epochs"),
    "save_freq": keys("trainer.save_freq"),
    "test_freq": keys("trainer.test_freq"),
    "val_before_train": keys("trainer.val_before_train"),
    "resume_mode": keys("trainer.resume_mode"),
    "resume_from_path": keys("trainer.resume_from_path"),
    "default_local_dir": keys("trainer.default_local_dir"),
    "max_ckpt_to_keep": keys("trainer.max_actor_ckpt_to_keep"),
    "device": keys("trainer.device"),
    # one-step-off pools
    "hybrid_engine": keys(A + "hybrid_engine"),
    "rollout_pool_nnodes": keys("rollout.nnodes"),
    "rollout_pool_gpus": keys("rollout.n_gpus_per_node"),
}

MEGATRON: dict[str, tuple[Key, ...]] = {
    "train_tp": keys(A + "actor.megatron.tensor_model_parallel_size"),
    "train_pp": keys(A + "actor.megatron.pipeline_model_parallel_size"),
    "train_cp": keys(A + "actor.megatron.context_parallel_size"),
    "param_offload": keys(A + "actor.megatron.param_offload"),
    "ref_param_offload": keys(A + "ref.megatron.param_offload"),
    "grad_offload": keys(A + "actor.megatron.grad_offload"),
    "optimizer_offload": keys(A + "actor.megatron.optimizer_offload"),
    # the Megatron actor and engine read actor.megatron.use_remove_padding (thd vs bshd, megatron_actor.py,
    # engine/megatron/transformer_impl.py); model.use_remove_padding follows the feature but is a key of
    # its own (verl's own default pairs model false with megatron true), so an --override may set it
    "remove_padding": keys(A + "actor.megatron.use_remove_padding"),
    "model_remove_padding": keys(A + "model.use_remove_padding"),
    "recompute_granularity": keys(A + "actor.megatron.override_transformer_config.recompute_granularity"),
    "recompute_method": keys(A + "actor.megatron.override_transformer_config.recompute_method"),
    "recompute_num_layers": keys(A + "actor.megatron.override_transformer_config.recompute_num_layers"),
    "swap_optimizer": keys(A + "actor.megatron.override_transformer_config.swap_optimizer", plus=True),
    "vpp_size": keys(A + "actor.megatron.virtual_pipeline_model_parallel_size"),
    "flash_attn@npu": keys(A + "actor.megatron.override_transformer_config.use_flash_attn", plus=True),
    "flash_attn@gpu": (Key(A + "actor.megatron.override_transformer_config.attention_backend",
                           values={True: "flash", False: "fused"}),),
}

FSDP: dict[str, tuple[Key, ...]] = {
    "param_offload": keys(A + "actor.fsdp_config.param_offload"),
    "ref_param_offload": keys(A + "ref.fsdp_config.param_offload"),
    "optimizer_offload": keys(A + "actor.fsdp_config.optimizer_offload"),
    "grad_offload": (),  # FSDP has no gradient offload key
    "remove_padding": keys(A + "model.use_remove_padding"),
    "model_remove_padding": (),  # FSDP: the feature's own key
    "gradient_checkpointing": keys(A + "model.enable_gradient_checkpointing"),
    # verl reads override_config.get("attn_implementation", "flash_attention_2") at every supported tag
    # (verl/workers/config/model.py, fsdp_workers.py): no key is flash attention
    "flash_attn": (Key(A + "model.override_config.attn_implementation", plus=True,
                       values={True: "flash_attention_2", False: "sdpa"}, absent="flash_attention_2", has_absent=True),),
    "strategy": keys(A + "actor.strategy", "critic.strategy"),
}


# Keys the rules read but the launch never sets: a rule asks the profile for the key of a value
# (Profile.keys_for) and reads what the launch sends there (the profile's value, or a user's --override), so
# no rule spells a verl key. Some knobs above set several keys at once (micro_batch_size sets the actor's, the
# reference's and the rollout's); a rule that needs one of them asks for it by its name here. `@fsdp` /
# `@megatron` marks a key only that framework has.
_MEG = A + "actor.megatron."

READ_KEYS: dict[str, tuple[Key, ...]] = {
    # the actor's, the rollout's (log-prob pass) and the reference's batch settings, one key each
    "actor_micro_batch_size": keys(A + "actor.ppo_micro_batch_size_per_gpu"),
    "log_prob_micro_batch_size": keys(A + "rollout.log_prob_micro_batch_size_per_gpu"),
    "ref_log_prob_micro_batch_size": keys(A + "ref.log_prob_micro_batch_size_per_gpu"),
    "actor_max_token_len": keys(A + "actor.ppo_max_token_len_per_gpu"),
    "log_prob_max_token_len": keys(A + "rollout.log_prob_max_token_len_per_gpu"),
    "ref_log_prob_max_token_len": keys(A + "ref.log_prob_max_token_len_per_gpu"),
    "actor_use_dynamic_bsz": keys(A + "actor.use_dynamic_bsz"),
    "ref_log_prob_micro_batch_size_global": keys(A + "ref.log_prob_micro_batch_size"),
    # the legacy actors' own settings (dp_actor, megatron_actor)
    "actor_grad_clip": keys(A + "actor.grad_clip"),
    "actor_shuffle": keys(A + "actor.shuffle"),
    "actor_data_loader_seed": keys(A + "actor.data_loader_seed"),
    "actor_load_weight": keys(A + "actor.load_weight"),
    "ref_load_weight": keys(A + "ref.load_weight"),
    "log_prob_use_dynamic_bsz": keys(A + "rollout.log_prob_use_dynamic_bsz"),
    # layout
    "ulysses_sp@fsdp": keys(A + "actor.ulysses_sequence_parallel_size"),
    "fsdp_size@fsdp": keys(A + "actor.fsdp_config.fsdp_size"),
    "expert_parallel@megatron": keys(_MEG + "expert_model_parallel_size"),
    "expert_tensor_parallel@megatron": keys(_MEG + "expert_tensor_parallel_size"),
    "sequence_parallel@megatron": keys(_MEG + "sequence_parallel"),
    "use_mbridge@megatron": keys(_MEG + "use_mbridge"),
    "first_stage_layers@megatron": keys(_MEG + "override_transformer_config.num_layers_in_first_pipeline_stage"),
    "last_stage_layers@megatron": keys(_MEG + "override_transformer_config.num_layers_in_last_pipeline_stage"),
    # rollout
    "rollout_mode": keys(A + "rollout.mode"),
    "rollout_dp": keys(A + "rollout.data_parallel_size"),
    "rollout_pp": keys(A + "rollout.pipeline_model_parallel_size"),
    "agent_workers": keys(A + "rollout.agent.num_workers"),
    "max_num_seqs": keys(A + "rollout.max_num_seqs"),
    "calculate_log_probs": keys(A + "rollout.calculate_log_probs"),
    "weights_bucket_mb": keys(A + "rollout.checkpoint_engine.update_weights_bucket_megabytes"),
    "model_dtype@fsdp": keys(A + "actor.fsdp_config.model_dtype"),
    "rollout_ep": keys(A + "rollout.expert_parallel_size"),
    "lora_rank": keys(A + "model.lora_rank"),
    "lora_rank_new": keys(A + "model.lora.rank"),  # 0.9's validate_config reads it first, lora_rank if it is <= 0
    "lora_merge": keys(A + "model.lora.merge"),
    # algorithm: the policy loss, the KL controller and the KL estimators
    "policy_loss_mode": keys(A + "actor.policy_loss.loss_mode"),
    "kl_ctrl_type": keys("algorithm.kl_ctrl.type"),
    "kl_ctrl_horizon": keys("algorithm.kl_ctrl.horizon"),
    "kl_in_reward_type": keys("algorithm.kl_penalty"),
    "max_inflight_gen_batches": keys("algorithm.filter_groups.max_inflight_gen_batches"),
    "lr_scheduler_type@fsdp": keys(A + "actor.optim.lr_scheduler_type"),
    "warmup_style@fsdp": keys(A + "actor.optim.warmup_style"),
    # trainer
    "use_legacy_worker_impl": keys("trainer.use_legacy_worker_impl"),
    "balance_batch": keys("trainer.balance_batch"),
}


def read_key(knob: str, framework: str) -> tuple[Key, ...] | None:
    """The keys of a knob only rules read, for this framework (None: not one of them)."""
    for name in (f"{knob}@{framework}", knob):
        if name in READ_KEYS:
            return READ_KEYS[name]
    if any(name.startswith(knob + "@") for name in READ_KEYS):
        return ()  # the other framework's key: this framework has none
    return None


# Sections verl builds into dataclasses straight from the composed config when it starts (verify builds them the
# same way; sections without `_target_` in a release are skipped). Not here: `ref` and `reward.reward_manager`, which
# verl's workers first rewrite (engine_workers.py maps ref's log_prob_* keys) or read as plain DictConfig, and
# `model`, whose dataclass loads the model's files.
DATACLASS_SECTIONS: tuple[str, ...] = (A + "actor", A + "rollout", A + "rollout.checkpoint_engine", "algorithm",
                                       "critic")


# Dict-typed sections where verl accepts keys of its own choosing, even below a `_target_`
# section (reference verl-keys.md §0): new keys there are fine with `+`. FSDP's mixed_precision is
# `Optional[dict[str, Any]]` in FSDPEngineConfig (verl/workers/config/engine.py, 0.6.1-0.9.1; verl's own
# Ascend GRPO scripts add +fsdp_config.mixed_precision.param_dtype/reduce_dtype/buffer_dtype).
OPEN_SECTIONS: tuple[str, ...] = (
    ".override_transformer_config", ".override_ddp_config", "model.override_config", ".engine_kwargs",
    "reward_kwargs", "ray_kwargs.ray_init", "data.", ".fsdp_config.mixed_precision.",
)


@dataclass(frozen=True)
class Profile:
    """Everything version-specific about verl that verl-deploy relies on."""

    name: str
    # versions this profile serves: exact "0.7.0" or a prefix like "0.9."
    matches: tuple[str, ...]
    entry_modules: Mapping[str, str]  # mode -> python module
    config_names: Mapping[tuple[str, str], str]  # (mode, framework) -> config name
    base_configs: Mapping[str, str]  # framework -> base config name in verl/trainer/config
    # (mode, framework) -> the recipe yaml's own keys, for versions whose wheel lacks the recipe
    recipe_overlays: Mapping[tuple[str, str], Mapping[str, Any]]
    # knob -> keys specific to this version, overriding COMMON/MEGATRON/FSDP (empty tuple = no key)
    overrides: Mapping[str, tuple[Key, ...]] = field(default_factory=dict)
    # the wheel carries this mode's config (relative dir in the wheel), else the overlay is used
    wheel_config_dirs: Mapping[str, str] = field(default_factory=dict)
    needs_device_key: bool = False
    fsdp_strategy: str = "fsdp2"
    strategy_sets_critic: bool = True
    notes: tuple[str, ...] = ()
    # release -> modes whose entry module that release's wheel leaves out (its directory has no
    # __init__.py at the tag, so only the yaml is packaged): such a run needs a verl source checkout
    wheel_lacks_entry: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    open_sections: tuple[str, ...] = OPEN_SECTIONS
    dataclass_sections: tuple[str, ...] = DATACLASS_SECTIONS

    def is_open(self, key: str) -> bool:
        """May a new key be added here with `+` although its section is a dataclass?"""
        return any(section in key for section in self.open_sections)

    def serves(self, version: str) -> bool:
        return any(version == m or (m.endswith(".") and version.startswith(m)) for m in self.matches)

    def keys_for(self, knob: str, framework: str, device: str, mode: str = "dapo") -> tuple[Key, ...]:
        """The verl keys one knob sets for this framework, device and mode (empty: not in this version)."""
        for name in (f"{knob}@{mode}", f"{knob}@{framework}@{device}", f"{knob}@{framework}", knob):
            if name in self.overrides:
                return self.overrides[name]
        table = MEGATRON if framework == "megatron" else FSDP
        for name in (f"{knob}@{device}", knob):
            if name in table:
                return table[name]
        if knob in COMMON:
            return COMMON[knob]
        found = read_key(knob, framework)
        if found is not None:
            return found
        raise KeyError(f"profile {self.name} has no key for knob {knob!r} ({framework}, {device})")

    def entry(self, mode: str, framework: str) -> tuple[str, str]:
        return self.entry_modules[mode], self.config_names[(mode, framework)]

    def is_recipe_entry(self, mode: str) -> bool:
        """Recipe modules live in the verl source tree (or its verl-recipe submodule), never in a wheel."""
        return self.entry_modules[mode].startswith("recipe.")


def dapo_config_names() -> dict[tuple[str, str], str]:
    return {
        ("dapo", "megatron"): "dapo_megatron_trainer",
        ("dapo", "fsdp"): "dapo_trainer",
        ("one-step-off", "megatron"): "one_step_off_ppo_megatron_trainer",
        ("one-step-off", "fsdp"): "one_step_off_ppo_trainer",
    }


BASE_CONFIGS = {"megatron": "ppo_megatron_trainer", "fsdp": "ppo_trainer"}


def one_step_off_overlay(extra_rollout: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The one-step-off recipe yaml's own keys (same layout in every supported version)."""
    rollout: dict[str, Any] = {"free_cache_engine": False, "calculate_log_probs": True}
    rollout.update(extra_rollout or {})
    return {
        "rollout": {"nnodes": 1, "n_gpus_per_node": 8},
        "actor_rollout_ref": {"rollout": rollout},
        "algorithm": {"rollout_correction": {"bypass_mode": True}},
    }


def filter_groups_overlay() -> dict[str, Any]:
    return {
        "_target_": "verl.trainer.config.FilterGroupsConfig",
        "enable": False,
        "metric": None,
        "max_num_gen_batches": 0,
    }


# Where the launch deliberately differs from verl's own DAPO and one-step-off scripts for Qwen3-8B (v0.6.0-v0.7.0
# recipe/dapo/run_dapo_qwen3_8b_base_npu.sh, test_dapo_7b_math*.sh; verl-recipe dapo/ at 6d8d5c1,
# e7f8895, ac8b84f; one_step_off_policy grpo_qwen3_8b_gsm8k_fsdp2_8_8_npu.sh, dapo_7b_math_*). Matched: weight_decay 0.1, clip ratios 0.2/0.28/10, token-mean, lr 1e-6 with 10
# warm-up steps, grpo without KL, n=16-style sampling at temperature 1 / top_p 1 / top_k -1, val
# do_sample n=1, overlong buffer, chunked prefill off, max_num_batched_tokens = prompt + response,
# use_torch_compile False on NPU. Shown by `plan` as one line.
DAPO_SCRIPT_DIFFERENCES: tuple[str, ...] = (
    "algorithm.filter_groups.enable stays on (the NPU scripts turn DAPO's dynamic sampling off)",
    "no Ulysses sequence parallel (the FSDP NPU scripts use sp=2 and token budgets / 2)",
    "data.shuffle stays on; entropy_checkpointing and fsdp forward_prefetch are left at verl's defaults",
    "no model.override_config dropout overrides (Qwen3's config already has attention_dropout 0)",
    "actor_rollout_ref.nccl_timeout stays at verl's default (the NPU one-step-off script raises it to 14400 s)",
)
# the same, as few words as `plan` prints them on one line (the reasons are above)
DAPO_SCRIPT_DIFFERENCES_SHORT: tuple[str, ...] = (
    "filter_groups on", "no Ulysses SP", "shuffle, entropy_checkpointing, forward_prefetch as verl's defaults",
    "no dropout overrides", "nccl_timeout as verl's default",
)
