"""The examiner's layouts: written from verl's, Megatron-core's and vLLM's code at each release, before reading
verl-deploy's rules or the held-out set, and committed before any of them went through `plan`.

Each layout: the flags a user gives `plan` (and the -o overrides a user would write), the model it is planned for,
the verdict verl gives ("runs" or "rejects"), the file:line of the check that decides it, and how the verdict is
confirmed on CPU:
  None                      the deciding code cannot run here (it imports vLLM, or needs devices): judged by the
                            cited code only
  (probe, kwargs)           a probe of tests/test_examiner_layouts.py runs that release's own code; CONFIG in the
                            kwargs is replaced by the config the launch composes (Hydra over the release's files)

About half are ones verl rejects, over kinds of checks (batch arithmetic, parallel sizes against model and
devices, rollout engine settings, async modes, resume, algorithm, data lengths, trackers) and over releases and
modes; the rest are near neighbours, one step away, that verl runs. Models: tests/fixtures' Qwen3-8B (36 layers,
32 heads, 8 KV heads, 40960 positions) and Qwen3-30B-A3B (48 layers, 32 heads, 4 KV heads, 128 experts).
"""

from __future__ import annotations

CONFIG = "<composed config>"

ROLL = "actor_rollout_ref.rollout."
ACTOR = "actor_rollout_ref.actor."
GPU8 = {"device": "gpu", "devices": "0-7"}
NPU8 = {"device": "npu", "devices": "0-7"}
SEP = {"trainer_gpus": 4, "rollout_gpus": 4}
FIXED = ["-dynamic_batch"]  # the feature list without dynamic batching: fixed micro-batches of 1 per device

# name: (flags, model, verdict, where, ground)
EXAMINER: dict[str, tuple[dict, str, str, str, object]] = {
    # -- batch arithmetic ------------------------------------------------------------------------------------
    # 15 trajectories dispatched over 8 FSDP workers (balance off, so no balance split first): DataProto.chunk
    "b01-061-rows-vs-dp-no-balance": (
        {"verl_version": "0.6.1", "framework": "fsdp", **GPU8, "batch_size": 5, "mini_batch_size": 5,
         "n_resp_per_prompt": 3, "overrides": ["trainer.balance_batch=False"]}, "Qwen3-8B", "rejects",
        "verl 0.6.1 verl/protocol.py:882 (DataProto.chunk: only support equal chunk)",
        ("chunk", {"rows": 15, "workers": 8})),
    "b02-061-rows-divide-dp": (
        {"verl_version": "0.6.1", "framework": "fsdp", **GPU8, "batch_size": 8, "mini_batch_size": 8,
         "n_resp_per_prompt": 3, "overrides": ["trainer.balance_batch=False"]}, "Qwen3-8B", "runs",
        "verl 0.6.1 verl/protocol.py:882", ("chunk", {"rows": 24, "workers": 8})),
    # fixed micro-batches, Megatron DP 4: batch x n must be a multiple of DP x micro (validate_config)
    "b03-091-megatron-fixed-micro-vs-dp": (
        {"verl_version": "0.9.1", "framework": "megatron", **GPU8, "train_tp": 2, "train_pp": 1, "features": FIXED,
         "batch_size": 6, "mini_batch_size": 6, "n_resp_per_prompt": 3}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/utils/config.py:124 (real_train_batch_size % minimal_bsz)",
        ("validate_and_actor", {"config_yaml": CONFIG})),
    "b04-091-megatron-fixed-micro-divides": (
        {"verl_version": "0.9.1", "framework": "megatron", **GPU8, "train_tp": 2, "train_pp": 1, "features": FIXED,
         "batch_size": 8, "mini_batch_size": 8, "n_resp_per_prompt": 3}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/utils/config.py:124", ("validate_and_actor", {"config_yaml": CONFIG})),
    # fixed micro-batches: ActorConfig.validate wants train_batch_size >= ppo_mini_batch_size
    "b05-091-fsdp-mini-above-batch-fixed": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "features": FIXED, "batch_size": 8,
         "mini_batch_size": 16}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/workers/config/actor.py:225 (train_batch_size must be >= ppo_mini_batch_size)",
        ("validate_and_actor", {"config_yaml": CONFIG})),
    # the same with dynamic batching: validate skips the check; the V1 trainer pads 64 rows up to lcm(8, 16 x 8)
    # = 128 with no-op samples (trainer_base.py:1589-1621) and the engine trains one mini-batch: it runs
    "b06-091-fsdp-mini-above-batch-dynamic": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "batch_size": 8, "mini_batch_size": 16},
        "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py:1589 (_get_required_batch_multiple) + "
        "verl/workers/engine_workers.py train_mini_batch",
        ("v1_padded_train", {"prompts": 8, "n": 8, "mini": 16, "dp": 8})),
    # VPP with fixed micro-batches on the 0.9 Megatron engine: the micro-batch count per pass must divide by
    # microbatch_group_size_per_vp_stage (= PP 3): 4 prompts x 2 = 8 micro-batches on DP 1
    "b07-091-vpp-fixed-micro-count": (
        {"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-5", "train_tp": 2,
         "train_pp": 3, "features": ["vpp", "-dynamic_batch"], "batch_size": 4, "mini_batch_size": 4,
         "n_resp_per_prompt": 2}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/workers/engine/megatron/transformer_impl.py:915; megatron-core 0.13.1 "
        "pipeline_parallel/schedules.py:822", None),
    "b08-091-vpp-fixed-micro-count-divides": (
        {"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-5", "train_tp": 2,
         "train_pp": 3, "features": ["vpp", "-dynamic_batch"], "batch_size": 4, "mini_batch_size": 4,
         "n_resp_per_prompt": 3}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/workers/engine/megatron/transformer_impl.py:915", None),

    # -- parallel sizes against the model and the devices ------------------------------------------------------
    # rollout TP 8 on nodes of 6 NPUs: a replica's world (8) must divide by min(gpus_per_node, world) = 6
    "p01-070-rollout-tp-over-node": (
        {"verl_version": "0.7.0", "framework": "megatron", "device": "npu", "devices": "0-5", "nnodes": 4, "master_addr": "10.0.0.1",
         "train_tp": 2, "train_pp": 1, "gen_tp": 8, "allow_tp_mismatch": True, "batch_size": 24}, "Qwen3-8B",
        "rejects", "verl 0.7.0 verl/workers/rollout/replica.py:101 (world_size must be divisible by gpus_per_node)",
        ("replica_world", {"tp": 8, "gpus_per_node": 6})),
    "p02-070-rollout-tp-inside-node": (
        {"verl_version": "0.7.0", "framework": "megatron", "device": "npu", "devices": "0-5", "nnodes": 4, "master_addr": "10.0.0.1",
         "train_tp": 2, "train_pp": 1, "gen_tp": 2, "batch_size": 24}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/workers/rollout/replica.py:101", ("replica_world", {"tp": 2, "gpus_per_node": 6})),
    # context parallel 3 with TP 2 on 8 devices: Megatron's world must divide by TP x PP x CP
    "p03-091-cp-vs-devices": (
        {"verl_version": "0.9.1", "framework": "megatron", **GPU8, "train_tp": 2, "train_pp": 1, "train_cp": 3},
        "Qwen3-8B", "rejects", "megatron-core 0.13.1 megatron/core/parallel_state.py:711",
        ("mcore_parallel", {"world": 8, "tp": 2, "pp": 1, "cp": 3})),
    "p04-091-cp-divides-devices": (
        {"verl_version": "0.9.1", "framework": "megatron", **GPU8, "train_tp": 2, "train_pp": 1, "train_cp": 2},
        "Qwen3-8B", "runs", "megatron-core 0.13.1 megatron/core/parallel_state.py:711",
        ("mcore_parallel", {"world": 8, "tp": 2, "pp": 1, "cp": 2})),
    # vLLM expert parallel in the rollout: must equal rollout TP x rollout DP (4 x 1)
    "p05-091-rollout-ep-vs-tp": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ROLL}expert_parallel_size=2"]},
        "Qwen3-30B-A3B", "rejects", "verl 0.9.1 verl/workers/config/rollout.py:296",
        ("rollout_dataclass", {"config_yaml": CONFIG})),
    "p06-091-rollout-ep-equals-tp": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ROLL}expert_parallel_size=4"]},
        "Qwen3-30B-A3B", "runs", "verl 0.9.1 verl/workers/config/rollout.py:296",
        ("rollout_dataclass", {"config_yaml": CONFIG})),
    "p07-080-rollout-pp": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8,
         "overrides": [f"{ROLL}pipeline_model_parallel_size=2"]}, "Qwen3-8B", "rejects",
        "verl 0.8.0 verl/workers/config/rollout.py:327 (vllm: pipeline_model_parallel_size > 1 not implemented)",
        ("rollout_dataclass", {"config_yaml": CONFIG})),
    "p08-080-rollout-pp-one": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8,
         "overrides": [f"{ROLL}pipeline_model_parallel_size=1"]}, "Qwen3-8B", "runs",
        "verl 0.8.0 verl/workers/config/rollout.py:327", ("rollout_dataclass", {"config_yaml": CONFIG})),

    # -- rollout engine settings -------------------------------------------------------------------------------
    "r01-091-rollout-mode-sync": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ROLL}mode=sync"]}, "Qwen3-8B",
        "rejects", "verl 0.9.1 verl/workers/config/rollout.py:283 (rollout mode 'sync' has been removed)",
        ("rollout_dataclass", {"config_yaml": CONFIG})),
    "r02-091-rollout-mode-async": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ROLL}mode=async"]}, "Qwen3-8B",
        "runs", "verl 0.9.1 verl/workers/config/rollout.py:283", ("rollout_dataclass", {"config_yaml": CONFIG})),
    # 0.6.1's sync vLLM rollout refuses a token budget below the context when chunked prefill is ON
    "r03-061-batched-tokens-with-chunked-prefill": (
        {"verl_version": "0.6.1", "framework": "megatron", **NPU8, "features": ["chunked_prefill"],
         "overrides": [f"{ROLL}max_num_batched_tokens=8192"]}, "Qwen3-8B", "rejects",
        "verl 0.6.1 verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:198", None),
    # 0.9.1 passes the budget to vLLM's server; vLLM takes a budget below max_model_len with chunked prefill on
    "r04-091-batched-tokens-with-chunked-prefill": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "features": ["chunked_prefill"],
         "overrides": [f"{ROLL}max_num_batched_tokens=8192"]}, "Qwen3-8B", "runs",
        "vLLM vllm/config/scheduler.py SchedulerConfig._verify_args (only without chunked prefill)", None),
    "r05-091-lora-rank-over-vllm": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": ["actor_rollout_ref.model.lora_rank=1024"]},
        "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/utils/config.py:215 -> verl/workers/rollout/vllm_rollout/utils.py:98",
        ("vllm_lora_rank", {"rank": 1024})),
    "r06-091-lora-rank-in-vllm": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": ["actor_rollout_ref.model.lora_rank=512"]},
        "Qwen3-8B", "runs", "verl 0.9.1 verl/workers/rollout/vllm_rollout/utils.py:98",
        ("vllm_lora_rank", {"rank": 512})),

    # -- asynchronous modes --------------------------------------------------------------------------------------
    "a01-091-separate-sync-step": (
        {"verl_version": "0.9.1", "mode": "separate-async", "framework": "fsdp", **GPU8, **SEP, "batch_size": 32,
         "mini_batch_size": 8, "parameter_sync_step": 2}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/trainer/ppo/v1/trainer_separate_async.py:59",
        ("separate_async_init", {"config_yaml": CONFIG})),
    "a02-091-separate-sync-step-fits": (
        {"verl_version": "0.9.1", "mode": "separate-async", "framework": "fsdp", **GPU8, **SEP, "batch_size": 32,
         "mini_batch_size": 8, "parameter_sync_step": 4}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/v1/trainer_separate_async.py:59",
        ("separate_async_init", {"config_yaml": CONFIG})),
    "a03-091-separate-naive-engine": (
        {"verl_version": "0.9.1", "mode": "separate-async", "framework": "fsdp", **GPU8, **SEP,
         "overrides": [f"{ROLL}checkpoint_engine.backend=naive"]}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/trainer/ppo/v1/trainer_separate_async.py:68",
        ("separate_async_init", {"config_yaml": CONFIG})),
    "a04-091-separate-nccl-engine": (
        {"verl_version": "0.9.1", "mode": "separate-async", "framework": "fsdp", **GPU8, **SEP,
         "overrides": [f"{ROLL}checkpoint_engine.backend=nccl"]}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/v1/trainer_separate_async.py:68",
        ("separate_async_init", {"config_yaml": CONFIG})),
    # colocate-async reads trainer.v1.colocate_async.parameter_sync_step (trainer_base.py:130) and each step
    # asserts the train batch divides by it
    "a05-091-colocate-sync-step": (
        {"verl_version": "0.9.1", "mode": "colocate-async", "framework": "fsdp", **GPU8, "batch_size": 32,
         "mini_batch_size": 8, "overrides": ["+trainer.v1.colocate_async.parameter_sync_step=3"]}, "Qwen3-8B",
        "rejects", "verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py:535",
        ("v1_step", {"config_yaml": CONFIG})),
    "a06-091-colocate-sync-step-divides": (
        {"verl_version": "0.9.1", "mode": "colocate-async", "framework": "fsdp", **GPU8, "batch_size": 32,
         "mini_batch_size": 8, "overrides": ["+trainer.v1.colocate_async.parameter_sync_step=4"]}, "Qwen3-8B",
        "runs", "verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py:535", ("v1_step", {"config_yaml": CONFIG})),
    # DAPO from verl's core, V1 sync: the replay buffer wants a positive in-flight bound when groups are filtered
    "a07-091-inflight-zero-sync": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8,
         "overrides": ["algorithm.filter_groups.max_inflight_gen_batches=0"]}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/trainer/ppo/v1/replay_buffer.py:197", ("replay_buffer", {"config_yaml": CONFIG})),
    # the async replay buffer does not check it (replay_buffer.py:517)
    "a08-091-inflight-zero-colocate": (
        {"verl_version": "0.9.1", "mode": "colocate-async", "framework": "fsdp", **GPU8,
         "overrides": ["algorithm.filter_groups.max_inflight_gen_batches=0"]}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/v1/replay_buffer.py:517", ("replay_buffer", {"config_yaml": CONFIG})),
    # no group filtering: the sync buffer forces the bound to 1 (trainer_base.py _build_replay_buffer)
    "a09-091-inflight-zero-no-filter": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "filter_groups": False,
         "overrides": ["algorithm.filter_groups.max_inflight_gen_batches=0"]}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/v1/replay_buffer.py:197", ("replay_buffer", {"config_yaml": CONFIG})),
    "a10-091-fully-async-no-rollout-logprobs": (
        {"verl_version": "0.9.1", "mode": "fully-async", "framework": "fsdp", **GPU8, **SEP,
         "overrides": [f"{ROLL}calculate_log_probs=False"]}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/experimental/fully_async_policy/fully_async_rollouter.py:733", None),
    "a11-080-fully-async-resume-typo": (
        {"verl_version": "0.8.0", "mode": "fully-async", "framework": "megatron", **GPU8, **SEP, "train_tp": 2,
         "train_pp": 1, "gen_tp": 2, "overrides": ["trainer.resume_mode=latest"]}, "Qwen3-8B", "rejects",
        "verl 0.8.0 verl/experimental/fully_async_policy/fully_async_rollouter.py:663 (Unknown resume_mode)", None),
    "a12-080-fully-async-resume-disable": (
        {"verl_version": "0.8.0", "mode": "fully-async", "framework": "megatron", **GPU8, **SEP, "train_tp": 2,
         "train_pp": 1, "gen_tp": 2, "overrides": ["trainer.resume_mode=disable"]}, "Qwen3-8B", "runs",
        "verl 0.8.0 verl/experimental/fully_async_policy/fully_async_rollouter.py:663", None),

    # -- resume ----------------------------------------------------------------------------------------------------
    "c01-091-resume-path-without-step": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8,
         "overrides": ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/ckpts/run1"]}, "Qwen3-8B",
        "rejects", "verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py:867 (resume ckpt must specify the global_steps)",
        ("v1_load_checkpoint", {"config_yaml": CONFIG})),
    "c02-070-resume-mode-typo": (
        {"verl_version": "0.7.0", "overrides": ["trainer.resume_mode=latest"]}, "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/trainer/ppo/ray_trainer.py:1038 (an unknown mode falls through to None.split)",
        ("legacy_load_checkpoint", {"config_yaml": CONFIG})),
    "c03-070-resume-disable": (
        {"verl_version": "0.7.0", "overrides": ["trainer.resume_mode=disable"]}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/trainer/ppo/ray_trainer.py:1008", ("legacy_load_checkpoint", {"config_yaml": CONFIG})),

    # -- algorithm -------------------------------------------------------------------------------------------------
    "g01-091-dual-clip-c-one": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}clip_ratio_c=1.0"]},
        "Qwen3-8B", "rejects", "verl 0.9.1 verl/trainer/ppo/core_algos.py:1331 (clip_ratio_c > 1.0)",
        ("policy_loss", {"config_yaml": CONFIG})),
    "g02-091-dual-clip-c-three": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}clip_ratio_c=3.0"]},
        "Qwen3-8B", "runs", "verl 0.9.1 verl/trainer/ppo/core_algos.py:1331",
        ("policy_loss", {"config_yaml": CONFIG})),
    "g03-070-dual-clip-c-half": (
        {"verl_version": "0.7.0", "overrides": [f"{ACTOR}clip_ratio_c=0.5"]}, "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/trainer/ppo/core_algos.py:952", ("policy_loss", {"config_yaml": CONFIG})),
    "g04-091-adaptive-kl-horizon-zero": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8,
         "overrides": ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive",
                       "algorithm.kl_ctrl.horizon=0"]}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py:127 -> verl/trainer/ppo/core_algos.py:209",
        ("kl_controller", {"config_yaml": CONFIG})),
    "g05-091-adaptive-kl-horizon": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8,
         "overrides": ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive",
                       "algorithm.kl_ctrl.horizon=10000"]}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/core_algos.py:209", ("kl_controller", {"config_yaml": CONFIG})),
    "g06-091-grpo-kl-loss-full": (
        {"verl_version": "0.9.1", "algorithm": "grpo", "framework": "fsdp", **GPU8,
         "overrides": [f"{ACTOR}kl_loss_type=full"]}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/trainer/ppo/core_algos.py:2249 (kl 'full' not implemented)",
        ("kl_penalty", {"config_yaml": CONFIG})),
    "g07-091-grpo-kl-loss-k3-plus": (
        {"verl_version": "0.9.1", "algorithm": "grpo", "framework": "fsdp", **GPU8,
         "overrides": [f"{ACTOR}kl_loss_type=k3+"]}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/trainer/ppo/core_algos.py:2188", ("kl_penalty", {"config_yaml": CONFIG})),
    "g08-080-token-sum": (
        {"verl_version": "0.8.0", "framework": "megatron", **NPU8, "loss_agg_mode": "token-sum"}, "Qwen3-8B",
        "rejects", "verl 0.8.0 verl/workers/config/actor.py:219 (Invalid loss_agg_mode)",
        ("actor_dataclass", {"config_yaml": CONFIG})),
    "g09-090-token-sum": (
        {"verl_version": "0.9.0", "framework": "fsdp", **GPU8, "loss_agg_mode": "token-sum"}, "Qwen3-8B", "runs",
        "verl 0.9.0 verl/workers/config/actor.py:216", ("actor_dataclass", {"config_yaml": CONFIG})),
    "g10-070-kl-ctrl-linear": (
        {"verl_version": "0.7.0", "overrides": ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=linear"]},
        "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/trainer/ppo/ray_trainer.py:352 -> verl/trainer/ppo/core_algos.py:209",
        ("kl_controller", {"config_yaml": CONFIG})),
    "g11-070-kl-ctrl-fixed": (
        {"verl_version": "0.7.0", "overrides": ["algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=fixed"]},
        "Qwen3-8B", "runs", "verl 0.7.0 verl/trainer/ppo/core_algos.py:203",
        ("kl_controller", {"config_yaml": CONFIG})),

    # -- data lengths ------------------------------------------------------------------------------------------------
    "d01-080-prompt-plus-response-over-context": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8, "max_prompt_length": 8192,
         "max_response_length": 34816}, "Qwen3-8B", "rejects",
        "verl 0.8.0 verl/workers/rollout/vllm_rollout/vllm_async_server.py:816",
        ("vllm_context", {"max_model_len": 43008, "max_position_embeddings": 40960})),
    "d02-080-prompt-plus-response-fits": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8, "max_prompt_length": 6144,
         "max_response_length": 34816}, "Qwen3-8B", "runs",
        "verl 0.8.0 verl/workers/rollout/vllm_rollout/vllm_async_server.py:816",
        ("vllm_context", {"max_model_len": 40960, "max_position_embeddings": 40960})),
    "d03-091-overlong-buffer-over-response": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "max_response_length": 4096,
         "overlong_buffer_len": 6144}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/experimental/reward_loop/reward_manager/dapo.py:43",
        ("dapo_reward_manager", {"config_yaml": CONFIG})),
    "d04-091-overlong-buffer-equals-response": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "max_response_length": 4096,
         "overlong_buffer_len": 4096}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/experimental/reward_loop/reward_manager/dapo.py:43",
        ("dapo_reward_manager", {"config_yaml": CONFIG})),
    "d05-070-overlong-buffer-over-response": (
        {"verl_version": "0.7.0", "max_response_length": 2048, "overlong_buffer_len": 4096}, "Qwen3-8B",
        "rejects", "verl 0.7.0 verl/workers/reward_manager/dapo.py:49",
        ("dapo_reward_manager", {"config_yaml": CONFIG})),

    # -- trackers ------------------------------------------------------------------------------------------------------
    "t01-080-logger-rl-insight": (
        {"verl_version": "0.8.0", "framework": "megatron", **NPU8, "logger": ["console", "rl_insight"]},
        "Qwen3-8B", "rejects", "verl 0.8.0 verl/utils/tracking.py:67 (backend is not supported)",
        ("tracking", {"backends": ["console", "rl_insight"]})),
    "t02-070-logger-file": (
        {"verl_version": "0.7.0", "logger": ["console", "file"]}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/utils/tracking.py:59, :157 (FileLogger)", ("tracking", {"backends": ["console", "file"]})),
    "t03-061-logger-unknown": (
        {"verl_version": "0.6.1", "logger": ["console", "neptune"]}, "Qwen3-8B", "rejects",
        "verl 0.6.1 verl/utils/tracking.py:59", ("tracking", {"backends": ["console", "neptune"]})),
}


# Written after the first measurement, from the same reading of verl's registries and config dataclasses (so they
# prove less than the set above): checks of the same kinds the unseen set may hold, each confirmed by verl's code.
AFTER: dict[str, tuple[dict, str, str, str, object]] = {
    "x01-091-fsdp-scheduler-linear": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}optim.lr_scheduler_type=linear"]},
        "Qwen3-8B", "rejects", "verl 0.9.1 verl/workers/config/optimizer.py:123",
        ("actor_dataclass", {"config_yaml": CONFIG})),
    "x02-091-megatron-decay-linear": (
        {"verl_version": "0.9.1", "framework": "megatron", **GPU8, "overrides": [f"{ACTOR}optim.lr_decay_style=linear"]},
        "Qwen3-8B", "runs", "verl 0.9.1 verl/workers/config/optimizer.py:128 (McoreOptimizerConfig: Megatron's "
        "lr_decay_style, no such assert)",
        ("actor_dataclass", {"config_yaml": CONFIG})),
    "x03-070-fsdp-warmup-style-linear": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}optim.warmup_style=linear"]},
        "Qwen3-8B", "rejects", "verl 0.7.0 verl/workers/config/optimizer.py:107",
        ("actor_dataclass", {"config_yaml": CONFIG})),
    "x04-091-adv-unknown": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": ["algorithm.adv_estimator=grpo_plus"]},
        "Qwen3-8B", "rejects", "verl 0.9.1 verl/trainer/ppo/core_algos.py:149",
        ("adv_estimator", {"config_yaml": CONFIG})),
    "x05-091-adv-rloo": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": ["algorithm.adv_estimator=rloo"]},
        "Qwen3-8B", "runs", "verl 0.9.1 verl/trainer/ppo/core_algos.py:149", ("adv_estimator", {"config_yaml": CONFIG})),
    "x06-070-adv-gdpo-before-its-release": (
        {"verl_version": "0.7.0", "overrides": ["algorithm.adv_estimator=gdpo"]}, "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/trainer/ppo/core_algos.py:146 (gdpo is registered from 0.7.1)",
        ("adv_estimator", {"config_yaml": CONFIG})),
    "x07-091-policy-loss-unknown": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}policy_loss.loss_mode=ppo2"]},
        "Qwen3-8B", "rejects", "verl 0.9.1 verl/trainer/ppo/core_algos.py:82",
        ("policy_loss_fn", {"config_yaml": CONFIG})),
    "x08-091-policy-loss-gspo": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}policy_loss.loss_mode=gspo"]},
        "Qwen3-8B", "runs", "verl 0.9.1 verl/trainer/ppo/core_algos.py:82", ("policy_loss_fn", {"config_yaml": CONFIG})),
    "x09-070-grpo-kl-k3-plus": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "fsdp", **GPU8,
         "overrides": [f"{ACTOR}kl_loss_type=k3+"]}, "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/trainer/ppo/core_algos.py:1649 (the '+' is stripped only from 0.8.0)",
        ("kl_penalty", {"config_yaml": CONFIG})),
    "x10-080-grpo-kl-k3-plus": (
        {"verl_version": "0.8.0", "algorithm": "grpo", "framework": "fsdp", **GPU8,
         "overrides": [f"{ACTOR}kl_loss_type=k3+"]}, "Qwen3-8B", "runs", "verl 0.8.0 verl/trainer/ppo/core_algos.py:2139",
        ("kl_penalty", {"config_yaml": CONFIG})),
    # 0.6.x sync rollout: generation batch x n over the rollout's DP groups (8 devices / rollout TP 4 = 2)
    "x11-061-sync-rollout-chunks": (
        {"verl_version": "0.6.1", "framework": "fsdp", **GPU8, "batch_size": 8, "mini_batch_size": 8,
         "gen_batch_size": 15, "n_resp_per_prompt": 3}, "Qwen3-8B", "rejects",
        "verl 0.6.1 verl/workers/fsdp_workers.py:906 -> verl/protocol.py:882", ("chunk", {"rows": 45, "workers": 2})),
    "x12-061-sync-rollout-chunks-even": (
        {"verl_version": "0.6.1", "framework": "fsdp", **GPU8, "batch_size": 8, "mini_batch_size": 8,
         "gen_batch_size": 12, "n_resp_per_prompt": 3}, "Qwen3-8B", "runs",
        "verl 0.6.1 verl/workers/fsdp_workers.py:906 -> verl/protocol.py:882", ("chunk", {"rows": 36, "workers": 2})),
    # written with the rules for the inventory's last rows (issue 24, item 3): each rejects case beside a neighbour
    # one setting away that verl runs
    # 0.7.0 main_ppo with use_legacy_worker_impl=disable trains with engine_workers.ActorRolloutRefWorker, whose
    # TrainingWorker.train_mini_batch asserts mini x n % DP == 0; the legacy FSDP worker (the default) floors it
    "x13-070-engine-workers-mini-vs-dp": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "fsdp", **GPU8, "batch_size": 8,
         "mini_batch_size": 4, "n_resp_per_prompt": 3, "overrides": ["trainer.use_legacy_worker_impl=disable"]},
        "Qwen3-8B", "rejects", "verl 0.7.0 verl/workers/engine_workers.py:198",
        ("engine_train_mini_batch", {"rows_per_dp": 3, "mini_batch_size": 12, "dp": 8})),
    "x14-070-legacy-workers-mini-vs-dp": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "fsdp", **GPU8, "batch_size": 8,
         "mini_batch_size": 4, "n_resp_per_prompt": 3}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/workers/fsdp_workers.py:244 (ppo_mini_batch_size 12 // 8 = 1 > 0), dp_actor data.split",
        ("legacy_split", {"rows_per_dp": 3, "normalized_mini": 1})),
    # MegatronPPOActor._validate_config: shuffle on needs data_loader_seed, null by default on 0.6.x, 42 from 0.7.0
    "x17-061-megatron-shuffle-without-seed": (
        {"verl_version": "0.6.1", "framework": "megatron", **GPU8, "overrides": [f"{ACTOR}shuffle=True"]},
        "Qwen3-8B", "rejects", "verl 0.6.1 verl/workers/actor/megatron_actor.py:161",
        ("megatron_validate", {"config_yaml": CONFIG})),
    "x18-070-megatron-shuffle-seed-default": (
        {"verl_version": "0.7.0", "framework": "megatron", **GPU8, "overrides": [f"{ACTOR}shuffle=True"]},
        "Qwen3-8B", "runs", "verl 0.7.0 verl/workers/actor/megatron_actor.py:174",
        ("megatron_validate", {"config_yaml": CONFIG})),
    # DataParallelPPOActor._optimizer_step asserts a gradient clip
    "x19-070-fsdp-grad-clip-null": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}grad_clip=null"]},
        "Qwen3-8B", "rejects", "verl 0.7.0 verl/workers/actor/dp_actor.py:310",
        ("fsdp_optimizer_step", {"config_yaml": CONFIG})),
    "x20-070-fsdp-grad-clip-half": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "overrides": [f"{ACTOR}grad_clip=0.5"]},
        "Qwen3-8B", "runs", "verl 0.7.0 verl/workers/actor/dp_actor.py:310",
        ("fsdp_optimizer_step", {"config_yaml": CONFIG})),
    # the legacy Megatron worker hands the actor rollout.log_prob_micro_batch_size_per_gpu; fixed micro-batches
    # assert it is set
    "x23-070-megatron-log-prob-micro-null": (
        {"verl_version": "0.7.0", "framework": "megatron", **GPU8, "features": FIXED,
         "overrides": [f"{ROLL}log_prob_micro_batch_size_per_gpu=null"]}, "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/workers/actor/megatron_actor.py:209", ("megatron_log_prob", {"config_yaml": CONFIG})),
    "x24-070-megatron-log-prob-micro-set": (
        {"verl_version": "0.7.0", "framework": "megatron", **GPU8, "features": FIXED,
         "overrides": [f"{ROLL}log_prob_micro_batch_size_per_gpu=2"]}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/workers/actor/megatron_actor.py:209", ("megatron_log_prob", {"config_yaml": CONFIG})),
    # fixed micro-batches on the engine workers' log-prob pass, 6 rows per rank (16 x 3 / 8): 0.7.0 chunks them
    # into 6 // micro pieces (one piece of 6 for micro 4; none for micro 8, a division by zero); 0.7.1 asserts
    # 6 % micro == 0
    "x25-070-engine-log-prob-micro-one-piece": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "fsdp", **GPU8, "features": FIXED, "batch_size": 16,
         "mini_batch_size": 16, "n_resp_per_prompt": 3,
         "overrides": ["trainer.use_legacy_worker_impl=disable", f"{ROLL}log_prob_micro_batch_size_per_gpu=4"]},
        "Qwen3-8B", "runs", "verl 0.7.0 verl/workers/engine/utils.py:88 -> verl/utils/tensordict_utils.py:299",
        ("micro_batches", {"rows": 6, "micro": 4})),
    "x26-070-engine-log-prob-micro-above-rows": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "fsdp", **GPU8, "features": FIXED, "batch_size": 16,
         "mini_batch_size": 16, "n_resp_per_prompt": 3,
         "overrides": ["trainer.use_legacy_worker_impl=disable", f"{ROLL}log_prob_micro_batch_size_per_gpu=8"]},
        "Qwen3-8B", "rejects", "verl 0.7.0 verl/workers/engine/utils.py:88 -> verl/utils/tensordict_utils.py:299",
        ("micro_batches", {"rows": 6, "micro": 8})),
    "x27-071-engine-log-prob-micro-uneven": (
        {"verl_version": "0.7.1", "algorithm": "grpo", "framework": "fsdp", **GPU8, "features": FIXED, "batch_size": 16,
         "mini_batch_size": 16, "n_resp_per_prompt": 3,
         "overrides": ["trainer.use_legacy_worker_impl=disable", f"{ROLL}log_prob_micro_batch_size_per_gpu=4"]},
        "Qwen3-8B", "rejects", "verl 0.7.1 verl/workers/engine/utils.py:92", ("micro_batches", {"rows": 6, "micro": 4})),
}

# Written with AFTER's last rows, for checks whose code cannot run here (it imports vLLM, or builds the Megatron
# engine's process groups first): judged by plan against the cited code only.
UNPROBED: dict[str, tuple[dict, str, str, str, object]] = {
    "u01-070-engine-workers-megatron-no-mbridge": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "megatron", **GPU8,
         "overrides": ["trainer.use_legacy_worker_impl=disable", f"{ACTOR}megatron.use_mbridge=False"]},
        "Qwen3-8B", "rejects", "verl 0.7.0 verl/workers/engine/megatron/transformer_impl.py:77", None),
    "u02-070-legacy-megatron-no-mbridge": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "megatron", **GPU8,
         "overrides": [f"{ACTOR}megatron.use_mbridge=False"]}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/workers/megatron_workers.py:164 (only fp16 needs mbridge there)", None),
    # 4 nodes x 8: a rollout replica of TP 16 x DP 2 spans 4 nodes; each node's server gets gpus_per_node 8,
    # which TP 16 does not divide; TP 8 x DP 4 does
    "u03-091-vllm-tp-above-node-with-dp": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "nnodes": 4, "master_addr": "10.0.0.1", "gen_tp": 16,
         "overrides": [f"{ROLL}data_parallel_size=2"]}, "Qwen3-8B", "rejects",
        "verl 0.9.1 verl/workers/rollout/vllm_rollout/vllm_async_server.py:385", None),
    "u04-091-vllm-tp-node-with-dp": (
        {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "nnodes": 4, "master_addr": "10.0.0.1", "gen_tp": 8,
         "overrides": [f"{ROLL}data_parallel_size=4"]}, "Qwen3-8B", "runs",
        "verl 0.9.1 verl/workers/rollout/vllm_rollout/vllm_async_server.py:385", None),
    # to 0.7.1 the server checks it only with expert parallel on (RolloutConfig makes EP = TP x DP)
    "u05-070-vllm-tp-above-node-no-ep": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "nnodes": 4, "master_addr": "10.0.0.1", "gen_tp": 16,
         "overrides": [f"{ROLL}data_parallel_size=2"]}, "Qwen3-30B-A3B", "runs",
        "verl 0.7.0 verl/workers/rollout/vllm_rollout/vllm_async_server.py:327 (if expert_parallel_size > 1)", None),
    "u06-070-vllm-tp-above-node-with-ep": (
        {"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "nnodes": 4, "master_addr": "10.0.0.1", "gen_tp": 16,
         "overrides": [f"{ROLL}data_parallel_size=2", f"{ROLL}expert_parallel_size=32"]}, "Qwen3-30B-A3B", "rejects",
        "verl 0.7.0 verl/workers/rollout/vllm_rollout/vllm_async_server.py:328", None),
    # GRPO's KL loss builds a reference worker; the legacy Megatron one asserts its load_weight matches the actor's
    # (in _build_model_optimizer, after Megatron's process groups are up)
    "u07-070-megatron-ref-load-weight-differs": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "megatron", **GPU8,
         "overrides": [f"{ACTOR}load_weight=False"]}, "Qwen3-8B", "rejects",
        "verl 0.7.0 verl/workers/megatron_workers.py:441", None),
    "u08-070-megatron-ref-load-weight-both-off": (
        {"verl_version": "0.7.0", "algorithm": "grpo", "framework": "megatron", **GPU8,
         "overrides": [f"{ACTOR}load_weight=False", "actor_rollout_ref.ref.load_weight=False"]}, "Qwen3-8B", "runs",
        "verl 0.7.0 verl/workers/megatron_workers.py:440 (checked only when ref.load_weight)", None),
    # 0.7.1's vLLM weight sender (legacy workers, colocated): every tensor must fit the 2048 MB bucket; the FSDP actor
    # holds fp32 weights, so Qwen3-8B's embedding (151936 x 4096 x 4 bytes = 2374 MB) does not (verl issue 5952:
    # the same shape, Qwen3-VL-8B, on 0.7.1); a 2560 MB bucket, or bf16 weights, fit it
    "u09-071-fsdp-embedding-above-bucket": (
        {"verl_version": "0.7.1", "framework": "fsdp", **GPU8}, "Qwen3-8B", "rejects",
        "verl 0.7.1 verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py:136", None),
    "u10-071-fsdp-embedding-bucket-raised": (
        {"verl_version": "0.7.1", "framework": "fsdp", **GPU8,
         "overrides": [f"{ROLL}checkpoint_engine.update_weights_bucket_megabytes=2560"]}, "Qwen3-8B", "runs",
        "verl 0.7.1 verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py:136", None),
    "u11-071-megatron-embedding-bf16": (
        {"verl_version": "0.7.1", "framework": "megatron", **GPU8}, "Qwen3-8B", "runs",
        "verl 0.7.1 verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py:136 (bf16: 1187 MB)", None),
    "u12-080-fsdp-embedding-sent-alone": (
        {"verl_version": "0.8.0", "framework": "fsdp", **GPU8}, "Qwen3-8B", "runs",
        "verl 0.8.0 verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py:136 (asserts only with shm)", None),
}
