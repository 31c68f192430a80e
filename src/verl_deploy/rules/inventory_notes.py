"""Why a configuration check of verl's has no rule: the reviewed reasons the inventory prints beside it.

The inventory (rules/inventory.py) lists every assert/raise on the launch path whose condition reads something
config-like. A check no rule cites is either reached by `--verify` (verl's config dataclasses and
validate_config, built on CPU from the config the launch composes), or its inputs are not configuration a user
sets through verl-deploy (verl's own data structures, a feature verl-deploy never turns on, a code path the
launch does not take), or it is a hole. Each note below matches checks by file, by words of the check's
condition or message, and where it must by the enclosing class (a CriticWorker's copy of an actor's assert) or the
releases it holds for, and says which of those it is and why; what no note matches stays "not covered", the
worklist for the next rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Note:
    path: str  # a file, or a directory ending in /
    words: str  # a regex searched in "condition message"; "" matches every check of the path
    state: str  # "verify" or "not settable"
    reason: str
    scope: str = ""  # a regex searched in the check's enclosing "Class.function"; "" matches any
    releases: tuple[str, ...] = ()  # the releases it holds for; () = every release


VERIFY = "verify"
INTERNAL = "not settable"

NOTES: tuple[Note, ...] = (
    # verify runs these on the composed config before anything starts
    Note("verl/workers/config/", "", VERIFY, "a config dataclass's __post_init__/validate: --verify builds it"),
    Note("verl/trainer/config/", "", VERIFY, "a config dataclass's __post_init__: --verify builds it"),
    Note("verl/utils/config.py", "", VERIFY, "validate_config: --verify runs it"),
    # features verl-deploy never turns on (an --override could; --verify still builds their dataclasses)
    Note("verl/workers/engine/automodel/", "", INTERNAL, "the automodel engine: verl-deploy runs fsdp2 or megatron"),
    Note("verl/workers/engine/veomni/", "", INTERNAL, "the VeOmni engine: verl-deploy runs fsdp2 or megatron"),
    Note("verl/workers/engine/torchtitan/", "", INTERNAL, "the torchtitan engine: verl-deploy runs fsdp2 or megatron"),
    Note("verl/workers/engine/fsdp/fsdp_turbo_impl.py", "", INTERNAL, "FSDP-Turbo: not an engine verl-deploy runs"),
    Note("verl/workers/engine_workers_tinker.py", "", INTERNAL, "the tinker workers: not a mode verl-deploy runs"),
    Note("", r"dynamic_context_parallel|Dynamic CP|dcp_|DCP ", INTERNAL,
         "dynamic context parallel: a feature verl-deploy does not turn on"),
    Note("", r"router_replay|Router replay|routing_replay|\bR2\b|\bR3\b", INTERNAL,
         "router replay: a feature verl-deploy does not turn on"),
    Note("", r"distillation|teacher|Teacher", INTERNAL, "distillation: a feature verl-deploy does not turn on"),
    Note("", r"nsys|nsight|profil|prometheus|PROMETHEUS", INTERNAL, "profiling and metrics servers: not turned on"),
    Note("", r"hdfs", INTERNAL, "HDFS checkpoints: verl-deploy writes to --ckpts-dir"),
    Note("", r"reward_model|RewardModel|GenRM|DisRM|reward_loop_worker", INTERNAL,
         "a reward model: verl-deploy scores with the rule-based DAPO/naive reward managers"),
    Note("", r"lora|LoRA|peft", INTERNAL, "LoRA: a feature verl-deploy does not turn on"),
    Note("", r"images|videos|audios|multimodal|Multimodal|vision|mm_", INTERNAL,
         "multimodal inputs: verl-deploy trains text models"),
    Note("", r"prefix_grouper|PrefixGrouper|force_group_size|forced group", INTERNAL,
         "prefix grouping: a feature verl-deploy does not turn on"),
    Note("", r"\bmtp\b|MTP|speculative", INTERNAL, "multi-token prediction: a feature verl-deploy does not turn on"),
    Note("", r"critic|value_model|Critic", INTERNAL, "a critic: DAPO and GRPO train none"),
    Note("", r"hybrid_rollout|enable_switch", INTERNAL, "V1 hybrid rollout switching: not turned on"),
    Note("", r"sync_refill_failed_groups", INTERNAL, "V1 sync refill: not turned on"),
    Note("verl/workers/rollout/sglang_rollout/", "", INTERNAL,
         "SGLang's server: checks on what the server reports, or on settings verl-deploy leaves at verl's defaults"),
    Note("verl/workers/rollout/trtllm_rollout/", "", INTERNAL, "TensorRT-LLM rollout: not an engine verl-deploy runs"),
    Note("", r"_pd_|prefill_decode|disaggregat|pd_replica", INTERNAL,
         "prefill/decode disaggregation: not turned on"),
    Note("verl/workers/rollout/vllm_rollout/delta_weight_transfer.py", "", INTERNAL,
         "delta weight transfer: its checks are on the tensors verl sends itself"),
    Note("", r"rollout_rs|rollout_is|bypass_mode|rollout_corr|rollout_log_probs", INTERNAL,
         "rollout correction: verl-deploy sends only what the one-step-off / fully-async configs set"),
    # verl's own data structures: the sizes a user sets that reach them are the cited rules (chunk, split,
    # make_iterator, the balance split, prepare_micro_batches)
    Note("verl/protocol.py", "", INTERNAL, "DataProto invariants on the batches verl builds itself; the user's "
         "sizes reach it through chunk/split/make_iterator, which rules cite"),
    Note("verl/utils/tensordict_utils.py", "", INTERNAL, "TensorDict helpers on the batches verl builds itself; "
         "make_iterator's mini-batch split is cited by a rule"),
    Note("verl/utils/seqlen_balancing.py", "", INTERNAL, "balancing helpers on the batch verl builds; the "
         "partition count and token budget a user sets are cited by rules"),
    Note("verl/trainer/ppo/core_algos.py", r"config is not None|isinstance\(config|policy_loss is not None|"
         r"AlgoConfig|ActorConfig", INTERNAL, "verl passes its own config objects to its loss functions"),
    Note("verl/trainer/ppo/core_algos.py", r"dp_size|global_batch|batch_num_tokens|Invalid loss_agg_mode|"
         r"Unsupported|Unknown|not supported|not implemented", INTERNAL,
         "loss helpers called by verl with values its workers compute; loss_agg_mode is checked by a rule"),
    Note("verl/utils/dataset/rl_dataset.py", "", INTERNAL, "the dataset's content: `check` reads the files"),
    Note("", r"pad_mode|DatasetPadMode", INTERNAL, "the padding mode verl's own workers pick"),
    Note("", r"delta_sharded|weight_transfer_config", INTERNAL,
         "the delta_sharded checkpoint engine: verl-deploy sends naive/nccl"),
    Note("", r"async_training", INTERNAL, "fully-async's own config always has async_training"),
    Note("verl/trainer/ppo/v1/", r"gen_batch_size", INTERNAL, "the V1 trainer sets data.gen_batch_size to 1 itself"),
    Note("", r"Unknown strategy|strategy \{|not supported' strategy", INTERNAL,
         "the engine strategy: verl-deploy sends fsdp2 or megatron"),
    Note("verl/workers/rollout/base.py", r"_ROLLOUT_REGISTRY", INTERNAL,
         "the rollout name: --rollout-engine takes only vllm or sglang"),
    Note("verl/workers/rollout/router.py", "", INTERNAL, "a router config file: verl-deploy sends none"),
    Note("verl/trainer/ppo/reward.py", r"source|module_cfg", INTERNAL,
         "a custom reward manager module: verl-deploy uses verl's registered ones"),
    Note("verl/workers/engine_workers.py", r"optimizer_config is None|engine_config is None|forward_only|"
         r"self\.role in|num_mini_batch", INTERNAL, "how verl's trainer calls its own workers"),
    Note("verl/workers/rollout/hf_rollout.py", "", INTERNAL, "the HF rollout: verl-deploy uses vLLM or SGLang"),
    Note("verl/workers/rollout/schemas.py", "", INTERNAL, "request objects verl builds itself"),
    Note("verl/workers/rollout/utils.py", r"max_position_embeddings", INTERNAL,
         "the model's config.json: plan reads it (context-window rule) where the model is readable"),
    Note("", r"disable_log_stats", INTERNAL, "metrics monitoring: not turned on"),
    Note("", r"use_fused_kernels|calculate_per_token_loss", INTERNAL,
         "fused kernels / per-token loss: settings verl-deploy leaves at verl's defaults"),
    Note("", r"len\(self\.workers\)|worker number|worker count", INTERNAL,
         "the worker count verl's replica creates itself"),
    # checks of verl's own roles and call order: no setting reaches them
    Note("", r"self\.role in|self\._is_rollout\b|self\._is_actor\b", INTERNAL,
         "the worker's role, which verl's trainer assigns itself"),
    Note("verl/workers/fsdp_workers.py", "", INTERNAL, "the CriticWorker's batch checks: DAPO and GRPO train no "
         "critic (the actor's copies of these asserts are cited by rules)", scope=r"^CriticWorker\."),
    Note("verl/workers/actor/megatron_actor.py", r"overlap_moe_expert_parallel_comm", INTERNAL,
         "return_schedule_plan is passed only when verl itself turns on the 1F1B overlap"),
    Note("verl/workers/rollout/vllm_rollout/vllm_async_server.py", r"RolloutMode\.HYBRID", INTERNAL,
         "the server's rollout mode, which verl's replica picks itself"),
    Note("verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py", r"raw_prompt_ids", INTERNAL,
         "the batch verl's sharding manager hands the sync rollout"),
    Note("verl/trainer/ppo/metric_utils.py", r"aborted", INTERNAL,
         "the rollout's output (every sample aborted), not a setting"),
    Note("verl/trainer/ppo/rollout_corr_helper.py", r"\.shape", INTERNAL, "tensors verl computes itself"),
    Note("verl/trainer/ppo/reward.py", r"tokenizer is not None", INTERNAL,
         "compute_reward_async: verl's trainer passes its own config and tokenizer"),
    Note("verl/trainer/ppo/ray_trainer.py", r"REMAX", INTERNAL,
         "REMAX without a reward_fn: main_ppo and the DAPO entry always build reward_fn (load_reward_manager)"),
    Note("verl/workers/rollout/vllm_rollout/vllm_pd_replica.py", "", INTERNAL,
         "the prefill/decode disaggregated replica: not turned on"),
    Note("verl/trainer/ppo/rollout_corr_helper.py", r"rollout_token_veto", INTERNAL,
         "rollout correction's token veto: verl-deploy sends only what the one-step-off / fully-async configs set"),
    Note("verl/workers/actor/megatron_actor.py", r"microbatch_group_size_per_vp_stage", INTERNAL,
         "dynamic batching with virtual pipeline: rearrange_micro_batches was given num_batches_divided_by and "
         "rounded the count up to a multiple already"),
    Note("verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py", r"tensor_parallel_size <= ", INTERNAL,
         "rollout TP above the devices: plan's layout check refuses a --gen-tp that does not divide the rollout "
         "devices, and an --override of the key is refused as owned by --gen-tp"),
    Note("", r"nnodes must be > 0 in standalone mode", INTERNAL,
         "the standalone rollout pool's nnodes: the launch sends --nnodes (>= 1), and an --override of it is refused "
         "as owned by --nnodes"),
    # features and paths verl-deploy never takes
    Note("verl/experimental/agent_loop/tool_agent_loop.py", r"interaction", INTERNAL,
         "the tool agent loop's interactions: verl-deploy runs the single-turn agent loop and sends no "
         "interaction config"),
    Note("verl/trainer/main_ppo.py", r"dataloader_num_workers", INTERNAL,
         "the curriculum sampler: verl-deploy sends no data.sampler.class_path"),
    Note("verl/trainer/main_ppo.py", r"custom_cls", INTERNAL, "a custom dataset class: verl-deploy sends none"),
    Note("verl/trainer/main_ppo.py", r"strategy", INTERNAL,
         "the worker class for the actor strategy: verl-deploy sends fsdp2 or megatron"),
    Note("verl/workers/fsdp_workers.py", r"fsdp_strategy|use_tiled_mlp", INTERNAL,
         "the FSDP strategy: verl-deploy sends fsdp2 (tiled MLP is not turned on)"),
    Note("verl/workers/rollout/vllm_rollout/vllm_rollout.py", r"quantization", INTERNAL,
         "rollout quantization: verl-deploy sends none (the key stays at verl's default, null)"),
    Note("verl/workers/engine/", "", INTERNAL, "the engine workers: 0.6.x's main_ppo and recipes build the actor "
         "from fsdp_workers / megatron_workers (the engine path serves only a critic or reward model there)",
         releases=("0.6.0", "0.6.1")),
    Note("verl/workers/megatron_workers.py", r"use_mbridge", INTERNAL,
         "fp16 Megatron training: verl-deploy leaves the dtype at verl's default, bf16"),
    Note("verl/experimental/agent_loop/agent_loop.py", r"rm_micro_batch_size", INTERNAL,
         "a reward model's micro-batches: verl-deploy scores with rule-based reward managers"),
    Note("", r"\bself\.mode in|clip_grad is not None|rollouter is None|set_rollouter|not rollout_samples|"
         r"max_queue_size is None|_target_|\bMISSING\b", INTERNAL, "an invariant of verl's own objects"),
)


def note_for(path: str, condition: str, message: str, scope: str = "", release: str = "") -> Note | None:
    """The first reviewed note matching a check, or None (not covered)."""
    text = f"{condition} {message}"
    for note in NOTES:
        if note.releases and release not in note.releases:
            continue
        if note.path and not (path == note.path or (note.path.endswith("/") and path.startswith(note.path))):
            continue
        if note.scope and not re.search(note.scope, scope):
            continue
        if not note.words or re.search(note.words, text):
            return note
    return None
