"""Held-out layouts for issue #24, written down from verl's, Megatron-core's and vLLM's code BEFORE the rules
that judge them were built (this file's first commit precedes those rules; see `git log` of this file).

Each case: the release and the flags a user gives `plan`, what verl's code does with it ("rejects" at start-up or
in the first step, or "runs"), the line of the release's code that decides it, and how the tests reach that code
on CPU (`ground`): a probe name and its arguments (verl's own function on the launch's numbers), "verify" (verl's
config dataclasses, validate_config and the legacy worker's normalisation on the composed config), "mesh" (torch's
DeviceMesh over real gloo processes), or None where the code is vLLM's and cannot run here (the case is judged
against the cited code only). tests/test_heldout_layouts.py runs every case through `plan` and through `ground`.
"""

from __future__ import annotations

GPU8 = {"device": "gpu", "devices": "0-7"}
MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
LOG_PROB_MICRO = "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
FSDP_SIZE = "actor_rollout_ref.actor.fsdp_config.fsdp_size"
SEQ_PAR = "actor_rollout_ref.actor.megatron.sequence_parallel"

# id: (flags, verl's verdict, where verl decides, ground)
HELD_OUT: dict[str, tuple[dict, str, str, tuple | str | None]] = {
    # the trainer's _balance_batch splits batch x n into DP partitions of equal size (seqlen_balancing.py
    # karmarkar_karp asserts len % k == 0); dynamic batching skips validate_config's minimal-batch check
    "070-fsdp-balance-12-over-8": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "batch_size": 6, "mini_batch_size": 6,
         "n_resp_per_prompt": 2, "gen_batch_size": 8}, "rejects",
        "verl/utils/seqlen_balancing.py:147 (0.7.0), from recipe/dapo/dapo_ray_trainer.py:297 _balance_batch",
        ("balance", {"items": 12, "k": 8})),
    "070-fsdp-balance-16-over-8": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "batch_size": 8, "mini_batch_size": 8,
         "n_resp_per_prompt": 2, "gen_batch_size": 8}, "runs",
        "verl/utils/seqlen_balancing.py:147 (0.7.0)", ("balance", {"items": 16, "k": 8})),
    # 0.6.x balances over the worker group's world size (TP x PP included), not the DP size
    "061-megatron-balance-over-world": (
        {"verl_version": "0.6.1", "framework": "megatron", **GPU8, "train_tp": 2, "train_pp": 1, "batch_size": 6,
         "mini_batch_size": 6, "n_resp_per_prompt": 2, "gen_batch_size": 8}, "rejects",
        "verl/trainer/ppo/ray_trainer.py:910 (0.6.1) world_size = actor_rollout_wg.world_size; "
        "seqlen_balancing.py karmarkar_karp", ("balance", {"items": 12, "k": 8})),
    "071-fsdp-legacy-balance": (
        {"verl_version": "0.7.1", "framework": "fsdp", **GPU8, "batch_size": 6, "mini_batch_size": 6,
         "n_resp_per_prompt": 2, "gen_batch_size": 8}, "rejects",
        "verl/trainer/ppo/ray_trainer.py:1030 (0.7.1) dp_size; seqlen_balancing.py karmarkar_karp",
        ("balance", {"items": 12, "k": 8})),
    "080-recipe-fsdp-balance": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8, "batch_size": 6, "mini_batch_size": 6,
         "n_resp_per_prompt": 2, "gen_batch_size": 8}, "rejects",
        "verl/trainer/ppo/ray_trainer.py:1160 (0.8.0) _balance_batch; engine_workers.py mini x n % DP",
        ("balance", {"items": 12, "k": 8})),
    # fixed micro-batches on the FSDP engine: prepare_micro_batches asserts each rank's rows split into micro-batches
    "091-fsdp-engine-micro-3": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "features": "-dynamic_batch", "batch_size": 16,
         "mini_batch_size": 16, "n_resp_per_prompt": 2, "overrides": [f"{MICRO}=3"]}, "rejects",
        "verl/workers/engine/utils.py:126 (0.9.1) prepare_micro_batches",
        ("micro_batches", {"rows": 4, "micro": 3})),
    "091-fsdp-engine-micro-2": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "features": "-dynamic_batch", "batch_size": 16,
         "mini_batch_size": 16, "n_resp_per_prompt": 2, "overrides": [f"{MICRO}=2"]}, "runs",
        "verl/workers/engine/utils.py:126 (0.9.1)", ("micro_batches", {"rows": 4, "micro": 2})),
    # the log-prob pass (infer) splits each rank's whole batch into log_prob micro-batches the same way
    "091-fsdp-engine-log-prob-micro": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "features": "-dynamic_batch", "batch_size": 12,
         "mini_batch_size": 12, "n_resp_per_prompt": 2, "overrides": [f"{LOG_PROB_MICRO}=2"]}, "rejects",
        "verl/workers/engine/utils.py:126 (0.9.1) via engine_workers infer_micro_batch_size_per_gpu",
        ("micro_batches", {"rows": 3, "micro": 2})),
    "080-fsdp-engine-log-prob-micro-fits": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8, "features": "-dynamic_batch", "batch_size": 16,
         "mini_batch_size": 16, "n_resp_per_prompt": 2, "overrides": [f"{LOG_PROB_MICRO}=2"]}, "runs",
        "verl/workers/engine/utils.py (0.8.0) prepare_micro_batches", ("micro_batches", {"rows": 4, "micro": 2})),
    # FSDP's hybrid shard: create_device_mesh builds (world // fsdp_size, fsdp_size); a size that does not divide
    # the world leaves ranks outside the mesh (torch gives them no group)
    "091-fsdp-size-3-of-8": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{FSDP_SIZE}=3"]}, "rejects",
        "verl/workers/engine/fsdp/utils.py:47-50 (0.9.1) create_device_mesh", ("mesh", {"world": 4, "inner": 3})),
    "091-fsdp-size-4-of-8": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{FSDP_SIZE}=4"]}, "runs",
        "verl/workers/engine/fsdp/utils.py:47-50 (0.9.1)", ("mesh", {"world": 4, "inner": 2})),
    # vLLM's SchedulerConfig: max_num_batched_tokens >= max_num_seqs (verl's default max_num_seqs is 1024 on
    # 0.6.x, 256 on 0.9.x) and, with chunked prefill off, >= max_model_len
    "061-short-lengths-below-max-num-seqs": (
        {"verl_version": "0.6.1", "framework": "fsdp", **GPU8, "max_prompt_length": 256, "max_response_length": 512},
        "rejects", "vllm/config SchedulerConfig: max_num_batched_tokens must be >= max_num_seqs", None),
    "091-short-lengths-above-max-num-seqs": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "max_prompt_length": 256, "max_response_length": 512},
        "runs", "vllm/config SchedulerConfig (verl 0.9.1 max_num_seqs 256)", None),
    "091-batched-tokens-below-model-len": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8,
         "overrides": ["actor_rollout_ref.rollout.max_num_batched_tokens=4096"]}, "rejects",
        "vllm/config SchedulerConfig: max_num_batched_tokens < max_model_len without chunked prefill", None),
    # Ulysses without remove padding: validate_config's ActorConfig.validate raises where validate_config runs
    "070-one-step-off-ulysses-without-rmpad": (
        {"verl_version": "0.7.0", "mode": "one-step-off", "framework": "fsdp", **GPU8, "trainer_gpus": 4,
         "rollout_gpus": 4, "features": "-remove_padding", "overrides": [f"{SP}=2"]}, "rejects",
        "verl/workers/config/actor.py:303 (0.7.0) FSDPActorConfig.validate", "verify"),
    "070-one-step-off-ulysses-with-rmpad": (
        {"verl_version": "0.7.0", "mode": "one-step-off", "framework": "fsdp", **GPU8, "trainer_gpus": 4,
         "rollout_gpus": 4, "overrides": [f"{SP}=2"]}, "runs", "verl/workers/config/actor.py:303 (0.7.0)", "verify"),
    # Megatron engine config: sequence_parallel with TP 1 is turned off by McoreEngineConfig, not refused
    "091-megatron-tp1-sequence-parallel": (
        {"verl_version": "0.9.1", "framework": "megatron", **GPU8, "train_tp": 1, "train_pp": 1,
         "overrides": [f"{SEQ_PAR}=True"]}, "runs", "verl/workers/config/engine.py:239 (0.9.1)", "verify"),
    # agent-loop chunking on 0.8.0 (DataProto.chunk over rollout.agent.num_workers)
    "080-agent-loop-18-over-8": (
        {"verl_version": "0.8.0", **GPU8, "batch_size": 4, "gen_batch_size": 6, "n_resp_per_prompt": 3,
         "mini_batch_size": 2}, "rejects", "verl/protocol.py:875 (0.8.0) chunk",
        ("chunk", {"rows": 18, "workers": 8})),
    # validate_config's minimal batch with fixed micro-batches, GRPO on 0.6.1's main_ppo
    "061-grpo-minimal-batch": (
        {"verl_version": "0.6.1", "algorithm": "grpo", "framework": "fsdp", **GPU8, "features": "-dynamic_batch",
         "batch_size": 3, "mini_batch_size": 3, "n_resp_per_prompt": 2}, "rejects",
        "verl/utils/config.py:110 (0.6.1)", "verify"),
    # good layouts on the V1 trainer and the legacy Megatron worker
    "091-core-dapo-v1-fits": (
        {"verl_version": "0.9.1", "dapo_source": "core", "framework": "fsdp", **GPU8, "batch_size": 12,
         "mini_batch_size": 4, "n_resp_per_prompt": 2}, "runs", "verl/workers/engine_workers.py:267 (0.9.1)",
        ("engine_train_mini_batch", {"rows_per_dp": 3, "mini_batch_size": 8, "dp": 8})),
    "070-npu-megatron-tp2-pp2": (
        {"verl_version": "0.7.0", "framework": "megatron", "device": "npu", "devices": "0-7", "train_tp": 2,
         "train_pp": 2, "batch_size": 6, "mini_batch_size": 3, "n_resp_per_prompt": 4, "gen_batch_size": 8}, "runs",
        "verl/workers/megatron_workers.py:334-335 (0.7.0); verl/protocol.py make_iterator",
        ("legacy_megatron_iterator", {"total_rows": 24, "dp": 2, "normalized_mini": 6})),
}
