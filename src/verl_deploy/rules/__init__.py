"""verl's, Megatron's and vLLM's runtime assertions as rules, checked before launch.

Each rule is one function (``RuleContext -> findings``) in batch.py, layout.py, model.py, lengths.py,
rollout.py, algorithm.py or async_modes.py.
An assertion verl (or a library it drives) makes at run time is an error here exactly where
that release's code asserts it, and at most a warning where verl runs anyway. ``RULES`` is
the table: the rule, and the file:line it comes from in each release (verl wheels 0.6.0-0.9.1,
megatron-core 0.13.1, vLLM). Tests run those real functions on the same inputs
(tests/test_runtime_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from verl_deploy.compiler import Plan
from verl_deploy.findings import Finding, error, info, warning
from verl_deploy.rules import algorithm, async_modes, batch, layout, legacy_actor, lengths, model, rollout
from verl_deploy.rules.context import RuleContext, WrongType, plan_values, release


@dataclass(frozen=True)
class Rule:
    check: Callable[[RuleContext], list[Finding]]
    # release(s) -> where the assertion lives
    source: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.check.__name__


RULES: tuple[Rule, ...] = (
    Rule(batch.mini_batch_divides_batch, {
        "0.8.0-0.9.1 (engine workers)": "verl/utils/tensordict_utils.py:588 make_iterator, called from "
                                        "verl/workers/engine_workers.py:264 (0.8.0), 272 (0.9.0), 273 (0.9.1)",
        "0.7.1 one-step-off (engine workers)": "verl/utils/tensordict_utils.py:556, engine_workers.py:245",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable (engine workers)": "verl/utils/tensordict_utils.py:523 "
                                                                          "make_iterator, called from "
                                                                          "verl/workers/engine_workers.py:204",
        "0.6.0-0.7.1 legacy FSDP (runs)": "verl/workers/actor/dp_actor.py:388 (0.6.0), 404 (0.6.1), 430 (0.7.0), "
                                          "548 (0.7.1) data.split(ppo_mini_batch_size): uneven last mini-batch",
    }),
    Rule(batch.legacy_megatron_mini_batch, {
        "0.6.0": "verl/workers/megatron_workers.py:266-267 ppo_mini_batch_size *= n, //= dp; verl/protocol.py:823 "
                 "make_iterator assert",
        "0.6.1": "verl/workers/megatron_workers.py:273-274, verl/protocol.py:823",
        "0.7.0": "verl/workers/megatron_workers.py:334-335, verl/protocol.py:827",
        "0.7.1 DAPO": "verl/workers/megatron_workers.py:355-356, verl/protocol.py:815",
    }),
    Rule(batch.mini_batch_divides_dp, {
        "0.7.1-0.9.1 (engine workers)": "verl/workers/engine_workers.py:239 (0.7.1), 258 (0.8.0), 266 (0.9.0), "
                                        "267 (0.9.1) assert mini_batch_size % dp == 0",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable": "verl/workers/engine_workers.py:198 assert mini_batch_size "
                                                          "% dp == 0",
        "0.6.0-0.7.1 legacy FSDP": "verl/workers/fsdp_workers.py:236 (0.6.0), 237 (0.6.1), 244 (0.7.0), 251 (0.7.1) "
                                   "assert ppo_mini_batch_size > 0 after normalization, then % micro at "
                                   "verl/workers/fsdp_workers.py:248-252 (0.6.0), 249-253 (0.6.1), 256-260 (0.7.0), "
                                   "263-267 (0.7.1)",
    }),
    Rule(lengths.validation_temperature, {
        "0.6.0-0.9.1 where validate_config runs": "verl/utils/config.py:193 (0.6.x), 197 (0.7.0), 186 (0.7.1-0.9.0), "
                                                  "201 (0.9.1); not called by recipe/dapo/main_dapo.py <= 0.7.0",
    }),
    Rule(lengths.rollout_context_fits_model, {
        "0.6.0-0.6.1 (mode sync)": "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:141 (0.6.0), 177 (0.6.1); "
                                   "with a rope factor verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:150-151 "
                                   "(0.6.0), 186-187 (0.6.1)",
        "0.7.0 (ignores max_model_len)": "verl/workers/rollout/vllm_rollout/vllm_async_server.py:198",
        "0.7.1-0.9.1": "verl/workers/rollout/vllm_rollout/vllm_async_server.py:117 (0.7.1), 816 (0.8.0), "
                       "957 (0.9.0), 1107 (0.9.1) raise ValueError",
    }),
    Rule(lengths.dynamic_batch_token_budget, {
        "0.6.0-0.9.1": "verl/utils/seqlen_balancing.py:285 (0.6.0), 295 (0.6.1), 382 (0.7.0), 384 (0.7.1-0.9.1)",
    }),
    Rule(algorithm.loss_agg_mode_in_release, {
        "0.6.0-0.8.0": "verl/workers/config/actor.py:141-148 (0.6.0-0.6.1), 189-196 (0.7.0), 203-210 (0.7.1), "
                       "212-219 (0.8.0) valid_loss_agg_modes without token-sum, raise ValueError",
        "0.9.0-0.9.1": "verl/workers/config/actor.py:216-224 (0.9.0), 212-220 (0.9.1) valid_loss_agg_modes with "
                       "token-sum, raise ValueError",
    }),
    Rule(batch.agent_loop_chunks, {
        "0.7.0-0.9.1 (rollout mode async)": "verl/experimental/agent_loop/agent_loop.py:949 (0.7.0), 1040 (0.7.1), "
                                            "1111 (0.8.0), 1240 (0.9.0), 1247 (0.9.1) prompts.chunk; "
                                            "verl/protocol.py:886 (0.7.0), 874 (0.7.1), 875 (0.8.0-0.9.0), 872 (0.9.1)",
    }),
    Rule(batch.sync_rollout_chunks, {
        "0.6.0-0.6.1 (rollout mode sync)": "verl/workers/fsdp_workers.py:891 (0.6.0), 906 (0.6.1), "
                                           "verl/workers/megatron_workers.py:657 (0.6.0), 667 (0.6.1) generate_sequences "
                                           "make_nd_compute_dataproto_dispatch_fn; verl/protocol.py:880-882 "
                                           "(0.6.0-0.6.1) DataProto.chunk assert",
    }),
    Rule(batch.engine_worker_batch_settings, {
        "0.8.0-0.9.1 (engine workers)": "verl/workers/engine_workers.py:557-578 (0.8.0), 610-631 (0.9.0), "
                                        "616-637 (0.9.1) assert use_dynamic_bsz == log_prob_use_dynamic_bsz, "
                                        "token budgets / micro-batch sizes not None",
        "0.7.1 (engine workers)": "verl/workers/engine_workers.py:515-536",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable": "verl/workers/engine_workers.py:451-472",
        "0.6.0-0.7.1 legacy Megatron": "verl/workers/actor/megatron_actor.py:190-193 (0.6.0-0.6.1), 206-209 (0.7.0), "
                                       "227-230 (0.7.1) compute_log_prob; verl/workers/actor/megatron_actor.py:379 "
                                       "(0.6.0), 396 (0.6.0), 382 (0.6.1), 399 (0.6.1), 420 (0.7.0), 437 (0.7.0), "
                                       "441 (0.7.1), 462 (0.7.1) forward_backward_batch assert max_token_len / "
                                       "micro_batch_size is not None; verl/workers/megatron_workers.py:282 (0.6.0), "
                                       "289 (0.6.1), 350 (0.7.0), 371 (0.7.1) the reference's micro-batch size",
    }),
    Rule(batch.megatron_fixed_micro_batches, {
        "0.7.1-0.9.1 (engine workers)": "verl/workers/engine/utils.py:93 (0.7.1), 92 (0.8.0), 126 (0.9.0-0.9.1) "
                                        "prepare_micro_batches assert; verl/workers/engine/megatron/transformer_impl.py:"
                                        "556 (0.7.1), 630 (0.8.0), 906 (0.9.0), 915 (0.9.1) num_batches_divided_by",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable": "verl/workers/engine/utils.py:88 chunk_tensordict; "
                                                          "verl/utils/tensordict_utils.py:299 assert equal chunks; "
                                                          "verl/workers/engine/megatron/transformer_impl.py:495 "
                                                          "num_batches_divided_by",
    }),
    Rule(algorithm.resume_path_is_given, {
        "0.6.0-0.9.1": "verl/trainer/ppo/ray_trainer.py:847 (0.6.0), 861 (0.6.1), 1028 (0.7.0), 944 (0.7.1), "
                       "1064 (0.8.0), 1073 (0.9.0-0.9.1) _load_checkpoint asserts resume_from_path",
        "0.9.0-0.9.1 (V1)": "verl/trainer/ppo/v1/trainer_base.py:805-806 (0.9.0), 866-867 (0.9.1) assert "
                            "resume_from_path",
        "0.8.0-0.9.1 (fully-async)": "verl/experimental/fully_async_policy/fully_async_trainer.py:718-719 (0.8.0), "
                                     "1000-1001 (0.9.0-0.9.1) assert resume_from_path; "
                                     "verl/experimental/fully_async_policy/fully_async_rollouter.py:652-663 (0.8.0), "
                                     "695-706 (0.9.0-0.9.1) assert resume_from_path, raise Unknown resume_mode",
    }),
    Rule(algorithm.resume_mode_known, {
        "0.6.0-0.9.1 (legacy trainer)": "verl/trainer/ppo/ray_trainer.py:857 (0.6.0), 871 (0.6.1), 1038 (0.7.0), "
                                        "954 (0.7.1), 1074 (0.8.0), 1083 (0.9.0-0.9.1) global_step_folder.split on "
                                        "the None an unknown resume_mode leaves on a fresh run",
        "0.9.0-0.9.1 (V1)": "verl/trainer/ppo/v1/trainer_base.py:815 (0.9.0), 876 (0.9.1) global_step_folder "
                            "unbound after logger.exception Unknown resume mode",
    }),
    Rule(algorithm.dual_clip_bound, {
        "0.6.0-0.9.1": "verl/trainer/ppo/core_algos.py:930 (0.6.0), 933 (0.6.1), 952 (0.7.0), 1322 (0.7.1), "
                       "1324 (0.8.0), 1331 (0.9.0-0.9.1) compute_policy_loss_vanilla assert clip_ratio_c > 1.0",
    }),
    Rule(algorithm.kl_controller_known, {
        "0.6.0-0.9.1": "verl/trainer/ppo/core_algos.py:206-209 (0.6.0-0.7.0), 209-212 (0.7.1-0.9.1) "
                       "get_kl_controller assert horizon > 0, raise NotImplementedError; called from "
                       "verl/trainer/ppo/ray_trainer.py:340 (0.6.0), 342 (0.6.1), 352 (0.7.0), 303 (0.7.1), "
                       "365 (0.8.0-0.9.1) and verl/trainer/ppo/v1/trainer_base.py:127 (0.9.1)",
    }),
    Rule(algorithm.kl_estimators_known, {
        "0.6.0-0.9.1": "verl/trainer/ppo/core_algos.py:1452 (0.6.0), 1473 (0.6.1), 1649 (0.7.0), 2185 (0.7.1), "
                       "2189 (0.8.0), 2250 (0.9.0), 2251 (0.9.1) kl_penalty_forward raise NotImplementedError",
    }),
    Rule(algorithm.registered_names, {
        "0.6.0-0.9.1": "verl/trainer/ppo/core_algos.py:146 (0.6.0-0.7.0), 149 (0.7.1-0.9.1) get_adv_estimator_fn "
                       "raise ValueError Unknown advantage estimator; verl/trainer/ppo/core_algos.py:82 get_policy_loss_fn "
                       "raise ValueError",
    }),
    Rule(algorithm.fsdp_lr_scheduler, {
        "0.6.0-0.9.1": "verl/workers/config/optimizer.py:78-83 (0.6.0), 84-89 (0.6.1), 107-112 (0.7.0), 117-122 "
                       "(0.7.1), 118-123 (0.8.0-0.9.1) FSDPOptimizerConfig assert warmup_style, lr_scheduler_type",
    }),
    Rule(algorithm.ulysses_needs_remove_padding, {
        "0.8.0-0.9.1": "verl/workers/engine/fsdp/transformer_impl.py:127 (0.8.0), 129 (0.9.0), 148 (0.9.1) "
                       "raise ValueError use_remove_padding",
        "0.6.0-0.9.1 where validate_config runs": "verl/workers/config/actor.py:244-246 (0.6.0), 246-248 (0.6.1), "
                                                  "301-303 (0.7.0), 318-320 (0.7.1), 330-332 (0.8.0), 342-344 "
                                                  "(0.9.0), 338-340 (0.9.1) FSDPActorConfig.validate raise ValueError",
    }),
    Rule(async_modes.separate_async_batch_is_sync_steps_of_mini_batches, {
        "0.9.0-0.9.1 (V1 separate_async)": "verl/trainer/ppo/v1/trainer_separate_async.py:50 (0.9.0), 59 (0.9.1) "
                                           "assert train_batch_size == parameter_sync_step * ppo_mini_batch_size",
    }),
    Rule(async_modes.separate_async_rollout_pool, {
        "0.9.0-0.9.1 (V1 separate_async)": "verl/trainer/ppo/v1/trainer_separate_async.py:55-59 (0.9.0), 64-68 "
                                           "(0.9.1) assert rollout nnodes, n_gpus_per_node > 0, checkpoint_engine "
                                           "backend != naive; verl/workers/rollout/llm_server.py:500 (0.9.0), 389 "
                                           "(0.9.1) assert nnodes > 0 in standalone mode",
    }),
    Rule(async_modes.v1_batch_divides_by_sync_step, {
        "0.9.0-0.9.1 (V1)": "verl/trainer/ppo/v1/trainer_base.py:511 (0.9.0), 535 (0.9.1) assert train_batch_size % "
                            "parameter_sync_step == 0; parameter_sync_step read per mode at "
                            "verl/trainer/ppo/v1/trainer_base.py:134 (0.9.0), 130 (0.9.1)",
    }),
    Rule(async_modes.v1_inflight_gen_batches, {
        "0.9.0-0.9.1 (V1 sync replay buffer)": "verl/trainer/ppo/v1/replay_buffer.py:184 (0.9.0), 197 (0.9.1) raise "
                                               "ValueError max_inflight_gen_batches must be a positive integer",
    }),
    Rule(async_modes.v1_off_policy_bound, {
        "0.9.0-0.9.1 (V1 replay buffer)": "verl/trainer/ppo/v1/replay_buffer.py:159-162 (0.9.0), 166-175 (0.9.1) "
                                          "assert max_off_policy_threshold > 0, max_off_policy_strategy drop|wait",
    }),
    Rule(async_modes.v1_filter_groups_metric, {
        "0.9.0-0.9.1 (V1)": "verl/trainer/ppo/v1/trainer_base.py:199 (0.9.0), 196 (0.9.1) raise ValueError "
                            "filter_groups.metric must be set",
    }),
    Rule(algorithm.recipe_filter_groups_metric, {
        # recipe/ is not in verl's wheels (the inventory reads those): cited without `:line`, the lines are
        # checked against tests/fixtures/recipes by tests/test_recipe_rules.py
        "0.6.0-0.7.0 (recipe/dapo in the tree)": "recipe/dapo/dapo_ray_trainer.py lines 211-225 (0.6.0), 233-247 "
                                                 "(0.7.0) metric_name = filter_groups.metric; "
                                                 "new_batch.non_tensor_batch[metric_name]",
        "0.7.1-0.9.1 (verl-recipe dapo)": "verl-recipe dapo/dapo_ray_trainer.py lines 244-258 (e7f8895), the same "
                                          "lookup",
    }),
    Rule(async_modes.fully_async_rollouter_settings, {
        "0.8.0-0.9.1 (fully-async)": "verl/experimental/fully_async_policy/fully_async_rollouter.py:413-417 (0.8.0), "
                                     "350-354 (0.9.0), 350-354 (0.9.1) assert not hybrid_engine, "
                                     "train_batch_size == 0, gen_batch_size == 1, trigger_parameter_sync_step >= 1; "
                                     "verl/experimental/fully_async_policy/fully_async_rollouter.py:690 (0.8.0), "
                                     "733 (0.9.0-0.9.1) assert calculate_log_probs",
        "0.7.1 (fully-async, source checkout)": "the same asserts at lines 66-70 of fully_async_rollouter.py at tag "
                                                "v0.7.1 (its wheel packages no .py file of fully_async_policy)",
    }),
    Rule(model.megatron_tp_divides_heads, {
        "megatron-core 0.13.1": "megatron/core/transformer/transformer_config.py:646 (heads), 661 (query groups)",
    }),
    Rule(model.megatron_pp_divides_layers, {
        "megatron-core 0.13.1": "megatron/core/transformer/transformer_block.py:140-142",
    }),
    Rule(model.rollout_tp_divides_heads, {
        "vLLM": "vllm/config ModelConfig.verify_with_parallel_config: 'Total number of attention heads must be "
                "divisible by tensor parallel size'; vllm/model_executor/layers/linear.py QKVParallelLinear "
                "divide(kv heads, tp) or divide(tp, kv heads)",
    }),
    Rule(model.moe_ep_divides_experts, {
        "megatron-core 0.13.1": "megatron/core/transformer/moe/moe_layer.py:64; transformer_config.py:704 "
                                "(EP needs num_moe_experts)",
    }),
    Rule(layout.ulysses_sp_fits_model, {
        "0.6.0-0.7.1 legacy FSDP": "verl/workers/fsdp_workers.py:166-167 (0.6.0), 167-168 (0.6.1), 174-175 (0.7.0), "
                                   "181-182 (0.7.1) init_device_mesh mesh_shape=(dp, ulysses_sequence_parallel_size)",
        "0.8.0-0.9.1 (engine workers)": "verl/workers/engine/fsdp/transformer_impl.py:223 (0.8.0), 228 (0.9.0), "
                                        "247 (0.9.1) init_device_mesh",
        "0.6.0-0.9.1": "verl/models/transformers/monkey_patch.py:273-276 (0.6.0-0.6.1), 291-294 (0.7.0), "
                       "333-336 (0.7.1), 338-341 (0.8.0), 340-343 (0.9.0), 343-346 (0.9.1) apply_monkey_patch asserts",
    }),
    Rule(batch.mini_batch_within_batch, {
        "0.6.0-0.9.1 where validate_config runs": "verl/workers/config/actor.py:153 (0.6.0-0.6.1), 201 (0.7.0), "
                                                  "215 (0.7.1), 224 (0.8.0), 229 (0.9.0), 225 (0.9.1) "
                                                  "ActorConfig.validate raise ValueError",
        "0.9.0-0.9.1 (V1, runs)": "verl/trainer/ppo/v1/trainer_base.py:1620-1621 (0.9.1) upsample_batch_to_divisible_"
                                  "size to _get_required_batch_multiple",
    }),
    Rule(layout.validate_config_minimal_batch, {
        "0.6.0-0.9.1 where validate_config runs": "verl/utils/config.py:110 (0.6.0-0.9.0), 124 (0.9.1) "
                                                  "real_train_batch_size % minimal_bsz",
    }),
    Rule(layout.megatron_expert_layout_fits_world, {
        "megatron-core 0.13.1": "megatron/core/parallel_state.py:786-789 initialize_model_parallel raise RuntimeError",
    }),
    Rule(layout.moe_tensor_parallel_needs_sequence_parallel, {
        "megatron-core 0.13.1": "megatron/core/model_parallel_config.py:385-390 raise ValueError",
    }),
    Rule(layout.megatron_virtual_pipeline_fits, {
        "megatron-core 0.13.1": "megatron/core/parallel_state.py:722-726 (PP > 1); "
                                "megatron/core/transformer/transformer_block.py:161-163 (layers per stage % VPP)",
    }),
    Rule(layout.rollout_replicas_tile_world, {
        "0.6.0-0.7.1 legacy workers": "verl/workers/fsdp_workers.py:577-578 (0.6.0), 592-593 (0.6.1), 618-619 (0.7.0), "
                                      "699-700 (0.7.1); verl/workers/megatron_workers.py:403-404 (0.6.0), "
                                      "412-413 (0.6.1), 505-506 (0.7.0), 520-521 (0.7.1)",
        "0.7.0-0.9.1 (engine workers)": "verl/workers/engine_workers.py:491-492 (0.7.0), 554-555 (0.7.1), "
                                        "600-601 (0.8.0), 653-654 (0.9.0), 659-660 (0.9.1)",
    }),
    Rule(layout.megatron_engine_needs_mbridge, {
        "0.7.1-0.9.1 (engine workers)": "verl/workers/engine/megatron/transformer_impl.py:83 (0.7.1), 90 (0.8.0), "
                                        "191 (0.9.0-0.9.1) assert use_mbridge",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable": "verl/workers/engine/megatron/transformer_impl.py:77 assert "
                                                          "use_mbridge",
    }),
    Rule(batch.engine_fixed_micro_batches, {
        "0.7.1-0.9.1 (engine workers)": "verl/workers/engine/utils.py:92 (0.7.1), 91 (0.8.0), 125 (0.9.0-0.9.1) "
                                        "prepare_micro_batches assert total_data_size % micro_batch_size_per_gpu",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable": "verl/workers/engine/utils.py:88 prepare_micro_batches "
                                                          "chunk_tensordict(data, len // micro); "
                                                          "verl/utils/tensordict_utils.py:299 assert equal chunks",
    }),
    Rule(batch.balance_batch_splits_evenly, {
        "0.6.0-0.7.1 (legacy workers, balance_batch off)": "verl/protocol.py:880-882 (0.6.0-0.6.1), 885 (0.7.0), 873 (0.7.1) "
                                                           "DataProto.chunk assert only support equal chunk, from "
                                                           "verl/single_controller/base/decorator.py:256 (0.6.0), 259 (0.6.1), "
                                                           "273 (0.7.0), 249 (0.7.1) "
                                                           "dispatch_nd_compute_dataproto",
        "0.7.0 main_ppo, use_legacy_worker_impl=disable, balance_batch off": "verl/utils/tensordict_utils.py:299 "
                                                                            "chunk_tensordict assert, from "
                                                                            "verl/single_controller/base/decorator.py:81"
                                                                            " _split_args_kwargs_data_proto",
        "0.6.0-0.9.1 (legacy trainer, recipes)": "verl/utils/seqlen_balancing.py:103 (0.6.0), 113 (0.6.1), "
                                                 "147 (0.7.0-0.9.1) karmarkar_karp assert len % k_partitions; "
                                                 "get_seqlen_balanced_partitions called from "
                                                 "verl/trainer/ppo/ray_trainer.py:911 (0.6.0), 940 (0.6.1), 1129 "
                                                 "(0.7.0), 1071 (0.7.1), 1201 (0.8.0), 1210 (0.9.0), 1235 (0.9.1)",
    }),
    Rule(layout.fsdp_size_tiles_world, {
        "0.6.0-0.9.1": "verl/workers/engine/fsdp/utils.py:35 (0.6.0-0.7.0), 54 (0.7.1), 56 (0.8.0), 51 "
                       "(0.9.0-0.9.1) init_device_mesh mesh_shape=(world_size // fsdp_size, fsdp_size); called from "
                       "verl/workers/engine/fsdp/transformer_impl.py:173 (0.6.0-0.6.1), 185 (0.7.0), 202 (0.7.1), "
                       "217 (0.8.0), 222 (0.9.0), 241 (0.9.1) create_device_mesh",
        "0.6.0-0.7.1 legacy FSDP": "verl/workers/fsdp_workers.py:103 (0.6.0), 104 (0.6.1-0.7.0), 106 (0.7.1) "
                                   "init_device_mesh; 159 (0.6.0), 160 (0.6.1), 167 (0.7.0), 174 (0.7.1) "
                                   "create_device_mesh",
    }),
    Rule(rollout.rollout_expert_parallel_is_tp_times_dp, {
        "0.6.0-0.9.1": "verl/workers/config/rollout.py:184 (0.6.0), 204 (0.6.1), 239 (0.7.0), 265 (0.7.1), "
                       "301 (0.8.0), 293 (0.9.0), 295 (0.9.1) RolloutConfig assert expert_parallel_size == "
                       "tensor_model_parallel_size * data_parallel_size",
    }),
    Rule(rollout.rollout_pipeline_parallel_unsupported, {
        "0.6.0-0.9.1": "verl/workers/config/rollout.py:190 (0.6.0), 210 (0.6.1), 245 (0.7.0), 291 (0.7.1), "
                       "327 (0.8.0), 319 (0.9.0), 321 (0.9.1) RolloutConfig raise NotImplementedError",
    }),
    Rule(rollout.rollout_replica_fits_nodes, {
        "0.6.0-0.9.1 (async rollout)": "verl/workers/rollout/replica.py:94 (0.6.0), 97 (0.6.1), 101 (0.7.0), "
                                       "112 (0.7.1), 114 (0.8.0-0.9.1) RolloutReplica assert world_size % "
                                       "gpus_per_node",
    }),
    Rule(rollout.vllm_lora_rank, {
        "0.6.1-0.9.1": "verl/workers/rollout/vllm_rollout/utils.py:34 (0.6.1-0.7.0), 82 (0.7.1), 83 (0.8.0), "
                       "96 (0.9.0), 98 (0.9.1) get_vllm_max_lora_rank raise ValueError; called from "
                       "verl/utils/config.py:200 (0.7.1-0.9.0), 215 (0.9.1)",
    }),
    Rule(rollout.vllm_rollout_tp_divides_node, {
        "0.6.0-0.9.1 (vLLM server)": "verl/workers/rollout/vllm_rollout/vllm_async_server.py:227 (0.6.0), 250 (0.6.1), "
                                     "328 (0.7.0), 355 (0.7.1), 305 (0.8.0), 338 (0.9.0), 385 (0.9.1) assert "
                                     "gpus_per_node % tensor_model_parallel_size (under expert_parallel_size > 1 "
                                     "to 0.7.1, data_parallel_size > 1 from 0.8.0)",
    }),
    Rule(rollout.vllm_weight_bucket_fits_embedding, {
        "0.7.1 legacy workers, vLLM": "verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py:136 "
                                      "async_send_weights assert offset + weight.nbytes <= bucket_size; "
                                      "verl/workers/rollout/vllm_rollout/vllm_rollout.py:166-167 bucket_size_mb "
                                      "from checkpoint_engine.update_weights_bucket_megabytes",
    }),
    Rule(legacy_actor.legacy_fsdp_grad_clip, {
        "0.6.0-0.7.1 legacy FSDP": "verl/workers/actor/dp_actor.py:276 (0.6.0), 284 (0.6.1), 310 (0.7.0), 392 (0.7.1) "
                                   "_optimizer_step assert grad_clip is not None",
    }),
    Rule(legacy_actor.legacy_megatron_actor_settings, {
        "0.6.0-0.7.1 legacy Megatron": "verl/workers/actor/megatron_actor.py:161 (0.6.0-0.6.1), 174 (0.7.0), 195 "
                                       "(0.7.1) _validate_config assert data_loader_seed with shuffle; "
                                       "verl/workers/megatron_workers.py:358 (0.6.0), 365 (0.6.1), 441 (0.7.0), "
                                       "463 (0.7.1) assert actor.load_weight == ref.load_weight",
    }),
    Rule(lengths.rollout_batched_tokens_fit, {
        "0.6.0-0.6.1 (mode sync, chunked prefill on)": "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:162 "
                                                       "(0.6.0), 198 (0.6.1) raise ValueError Enable chunked prefill",
        "vLLM": "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len (earlier releases: "
                "SchedulerConfig._verify_args): raise ValueError max_num_batched_tokens < max_num_seqs; "
                "max_num_batched_tokens < max_model_len and not enable_chunked_prefill",
    }),
    Rule(algorithm.rollout_mode_sync_removed, {
        "0.7.0-0.9.1": "verl/workers/config/rollout.py:226 (0.7.0), 252 (0.7.1), 288 (0.8.0), 280 (0.9.0), "
                       "282 (0.9.1) raise ValueError",
        "0.8.0-0.9.1 (one-step-off, fully-async)": "verl/experimental/one_step_off_policy/ray_trainer.py:181 (0.8.0), "
                                                   "180 (0.9.0-0.9.1) assert rollout mode async; "
                                                   "verl/experimental/fully_async_policy/fully_async_rollouter.py:798 "
                                                   "(0.8.0), 842 (0.9.0-0.9.1) the same assert",
    }),
)


def run_rules(plan: Plan, facts) -> list[Finding]:
    """Every runtime rule on the plan's resolved values."""
    ctx = RuleContext(plan, plan_values(plan), facts)
    found: list[Finding] = []
    wrong: dict[str, WrongType] = {}
    for rule in RULES:
        try:
            found += rule.check(ctx)
        except WrongType as exc:  # one error per key, however many rules read it
            wrong.setdefault(exc.key, exc)
        except Exception as exc:  # a fault in a rule must not stop plan: say which check did not run
            found.append(warning("overrides", f"the {rule.name} check could not run on these values "
                                 f"({type(exc).__name__}: {exc})", "check the --override values it reads"))
    for bad in wrong.values():
        found.append(error("overrides", f"{bad.key}={bad.value!r} is not {bad.expected}, and verl reads it as one",
                           f"give {bad.key} {bad.expected} in --override"))
    if facts.num_attention_heads is None and not facts.model_config_error:
        found.append(info("model_path", "the model's config.json is not readable here, so TP/PP/EP against its "
                          "heads, layers and experts and the context window were not checked",
                          "run plan where the model directory is readable (or inside the container)"))
    return found


__all__ = ["RULES", "Rule", "RuleContext", "release", "run_rules"]
