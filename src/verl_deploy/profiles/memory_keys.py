"""The verl keys the memory estimate reads from a plan, and verl's defaults for them.

Same in every supported version (0.7.0 .. 0.9.x, read from verl's `_generated_ppo_*trainer.yaml`
at the tags). A name maps to (FSDP key, Megatron key); one key serves both when they agree.
The estimate only reads; the compiler and the feature registry decide what is set.
"""

from __future__ import annotations

A = "actor_rollout_ref."
MEG = A + "actor.megatron."
TC = MEG + "override_transformer_config."

# name -> ((fsdp key, megatron key), verl's default)
MEMORY_KEYS: dict[str, tuple[tuple[str, str], object]] = {
    "param_offload": ((A + "actor.fsdp_config.param_offload", MEG + "param_offload"), False),
    "optimizer_offload": ((A + "actor.fsdp_config.optimizer_offload", MEG + "optimizer_offload"), False),
    "grad_offload": (("", MEG + "grad_offload"), False),
    "ref_param_offload": ((A + "ref.fsdp_config.param_offload", A + "ref.megatron.param_offload"), False),
    "use_kl_loss": ((A + "actor.use_kl_loss",) * 2, False),
    "use_kl_in_reward": (("algorithm.use_kl_in_reward",) * 2, False),
    "use_dynamic_bsz": ((A + "actor.use_dynamic_bsz",) * 2, False),
    "log_prob_use_dynamic_bsz": ((A + "rollout.log_prob_use_dynamic_bsz",) * 2, None),
    "ppo_max_token_len_per_gpu": ((A + "actor.ppo_max_token_len_per_gpu",) * 2, 16384),
    "log_prob_max_token_len_per_gpu": ((A + "rollout.log_prob_max_token_len_per_gpu",) * 2, None),
    "ref_log_prob_max_token_len_per_gpu": ((A + "ref.log_prob_max_token_len_per_gpu",) * 2, None),
    "ppo_micro_batch_size_per_gpu": ((A + "actor.ppo_micro_batch_size_per_gpu",) * 2, None),
    "log_prob_micro_batch_size_per_gpu": ((A + "rollout.log_prob_micro_batch_size_per_gpu",) * 2, None),
    "ppo_mini_batch_size": ((A + "actor.ppo_mini_batch_size",) * 2, 256),
    "ulysses_sequence_parallel_size": ((A + "actor.ulysses_sequence_parallel_size", ""), 1),
    "fsdp_size": ((A + "actor.fsdp_config.fsdp_size", ""), -1),
    "fsdp_strategy": ((A + "actor.strategy", ""), "fsdp"),
    "gradient_checkpointing": ((A + "model.enable_gradient_checkpointing", ""), False),
    "recompute_granularity": (("", TC + "recompute_granularity"), None),
    "recompute_method": (("", TC + "recompute_method"), None),
    "recompute_num_layers": (("", TC + "recompute_num_layers"), None),
    "recompute_modules": (("", TC + "recompute_modules"), ["core_attn"]),
    "expert_model_parallel_size": (("", MEG + "expert_model_parallel_size"), 1),
    "expert_tensor_parallel_size": (("", MEG + "expert_tensor_parallel_size"), None),
    "use_distributed_optimizer": (("", MEG + "use_distributed_optimizer"), True),
    "optimizer_offload_fraction": ((A + "actor.optim.override_optimizer_config.optimizer_offload_fraction",) * 2, 0.0),
    "optimizer_cpu_offload": ((A + "actor.optim.override_optimizer_config.optimizer_cpu_offload",) * 2, False),
    "entropy_from_logits_with_chunking": ((A + "actor.entropy_from_logits_with_chunking",) * 2, False),
    "entropy_checkpointing": ((A + "actor.entropy_checkpointing",) * 2, False),
    "entropy_coeff": ((A + "actor.entropy_coeff",) * 2, 0),
    "calculate_entropy": ((A + "actor.calculate_entropy",) * 2, False),  # verl 0.9: entropy in the update for metrics
    "remove_padding": ((A + "model.use_remove_padding",) * 2, False),
    "use_fused_kernels": ((A + "model.use_fused_kernels",) * 2, False),
    "rollout_tp": ((A + "rollout.tensor_model_parallel_size",) * 2, 2),
    "rollout_ep": ((A + "rollout.expert_parallel_size",) * 2, 1),
    "gpu_memory_utilization": ((A + "rollout.gpu_memory_utilization",) * 2, 0.5),
    "max_num_batched_tokens": ((A + "rollout.max_num_batched_tokens",) * 2, 8192),
    "max_num_seqs": ((A + "rollout.max_num_seqs",) * 2, 256),
    "max_model_len": ((A + "rollout.max_model_len",) * 2, None),
    "free_cache_engine": ((A + "rollout.free_cache_engine",) * 2, True),
    "enforce_eager": ((A + "rollout.enforce_eager",) * 2, False),
    "rollout_name": ((A + "rollout.name",) * 2, "vllm"),
    "virtual_pipeline_model_parallel_size": (("", MEG + "virtual_pipeline_model_parallel_size"), None),
    # PPO with a critic (verl's default adv_estimator is gae; verl-deploy's plans set grpo): read, never set
    "adv_estimator": (("algorithm.adv_estimator",) * 2, None),
    "critic_param_offload": (("critic.fsdp.param_offload", "critic.megatron.param_offload"), False),
    "critic_optimizer_offload": (("critic.fsdp.optimizer_offload", "critic.megatron.optimizer_offload"), False),
    # verl 0.7 kept the critic's FSDP knobs under critic.model.fsdp_config
    "critic_param_offload_v07": (("critic.model.fsdp_config.param_offload", ""), False),
    "critic_optimizer_offload_v07": (("critic.model.fsdp_config.optimizer_offload", ""), False),
    "critic_ppo_max_token_len_per_gpu": (("critic.ppo_max_token_len_per_gpu",) * 2, 32768),
    "critic_ppo_micro_batch_size_per_gpu": (("critic.ppo_micro_batch_size_per_gpu",) * 2, None),
    "critic_use_dynamic_bsz": (("critic.use_dynamic_bsz",) * 2, None),
    "critic_gradient_checkpointing": (("critic.model.enable_gradient_checkpointing", ""), True),
}


def key_for(name: str, framework: str) -> str:
    """The key a memory input is read from ("" where the framework has none)."""
    (fsdp, megatron), _ = MEMORY_KEYS[name]
    return megatron if framework == "megatron" else fsdp


def default_for(name: str) -> object:
    return MEMORY_KEYS[name][1]
