"""Batch-size assertions verl makes when it splits a step into mini- and micro-batches, per worker implementation
and trainer (the legacy RayPPOTrainer and the recipes balance the batch as it is; verl 0.9's V1 trainer pads it)."""

from __future__ import annotations

from verl_deploy.findings import Finding, error, info, warning
from verl_deploy.rules.context import RuleContext


def mini_batch_divides_batch(ctx: RuleContext) -> list[Finding]:
    """train_batch_size % ppo_mini_batch_size. The engine workers iterate with tensordict_utils.make_iterator,
    which asserts it; the legacy FSDP actor splits with DataProto.split and runs a smaller last mini-batch; the V1
    trainer pads the step's batch to a multiple of mini x n first. (Legacy Megatron: legacy_megatron_mini_batch.)"""
    batch, mini = ctx.step_batch, ctx.mini
    if mini <= 0 or batch < mini or batch % mini == 0:
        return []
    what = "batch size" if batch == ctx.batch else "generation batch (filter_groups off: each step trains on it)"
    fix = f"use a mini-batch size that divides the {what} {batch} (e.g. {largest_divisor(batch, mini)})"
    if ctx.v1:
        padding = ctx.step_rows - batch * ctx.n
        return [info("mini_batch_size", f"batch {batch} is not a multiple of the mini-batch {mini}: verl "
                     f"{ctx.spec.verl_version}'s V1 trainer pads each step with {padding} no-op samples (they train "
                     "nothing and cost their compute)", fix)]
    if ctx.engine_workers:
        return [error("mini_batch_size", f"{what} {batch} is not a multiple of the mini-batch size {mini}: "
                      f"verl {ctx.spec.verl_version}'s engine workers assert it "
                      "(tensordict_utils.make_iterator)", fix)]
    if ctx.framework == "fsdp":
        return [warning("mini_batch_size", f"batch size {batch} is not a multiple of the mini-batch size {mini}: "
                        "the last mini-batch of each step is smaller", fix)]
    return []


def mini_batch_within_batch(ctx: RuleContext) -> list[Finding]:
    """A mini-batch above the step's batch. With fixed micro-batches, ActorConfig.validate (from validate_config)
    raises 'train_batch_size must be >= ppo_mini_batch_size'; the engine workers' make_iterator asserts the rows
    divide by the mini-batch; the legacy Megatron worker's iterator asserts the same (legacy_megatron_mini_batch).
    The V1 trainer pads the step to a multiple of mini x n and trains one mini-batch; the legacy FSDP actor
    trains the whole batch as one smaller mini-batch."""
    batch, mini = ctx.step_batch, ctx.mini
    if batch >= mini or ctx.spec.mode == "fully-async":  # fully-async trains require_batches x mini (no batch)
        return []
    fix = f"make --mini-batch-size at most {batch} (the batch size)"
    if ctx.validate_config_runs and not ctx.dynamic:
        return [error("mini_batch_size", f"batch {ctx.batch} is smaller than the mini-batch {mini}: verl "
                      f"{ctx.spec.verl_version}'s ActorConfig.validate raises 'train_batch_size must be >= "
                      "ppo_mini_batch_size' with fixed micro-batches", fix)]
    if ctx.v1:
        padding = ctx.step_rows - batch * ctx.n
        return [warning("mini_batch_size", f"batch {batch} is smaller than the mini-batch {mini}: verl "
                        f"{ctx.spec.verl_version}'s V1 trainer pads each step with {padding} no-op samples up to one "
                        "mini-batch (they train nothing and cost their compute)", fix)]
    if ctx.engine_workers:
        return [error("mini_batch_size", f"batch {batch} is smaller than the mini-batch {mini}: verl "
                      f"{ctx.spec.verl_version}'s engine workers assert the batch divides into mini-batches "
                      "(tensordict_utils.make_iterator)", fix)]
    if ctx.framework == "fsdp":
        return [warning("mini_batch_size", f"batch {batch} is smaller than the mini-batch {mini}: each step trains "
                        f"as one mini-batch of {batch} prompts", fix)]
    return []  # legacy Megatron: legacy_megatron_mini_batch


def legacy_megatron_mini_batch(ctx: RuleContext) -> list[Finding]:
    """Legacy Megatron worker (0.6.0-0.7.1 outside one-step-off 0.7.1): ppo_mini_batch_size *= n; //= dp (floor),
    then DataProto.make_iterator asserts (batch x n / dp) % that == 0, or divides by zero when it is 0."""
    if ctx.framework != "megatron" or ctx.engine_workers:
        return []
    batch, mini, n, dp = ctx.batch, ctx.mini, ctx.n, ctx.dp
    per_rank_mini = (mini * n) // dp
    per_rank_batch = (batch * n) // dp
    fix = (f"choose a mini-batch size whose mini x {n} responses divides by the data-parallel size {dp} "
           "and divides the batch size")
    if per_rank_mini == 0:
        return [error("mini_batch_size", f"mini-batch {mini} x {n} responses = {mini * n} is smaller than the "
                      f"data-parallel size {dp}: verl {ctx.spec.verl_version}'s Megatron worker floors it to 0 "
                      "per rank and fails with a division by zero", fix)]
    if per_rank_batch % per_rank_mini:
        return [error("mini_batch_size", f"mini-batch {mini} x {n} // DP {dp} = {per_rank_mini} per rank does not "
                      f"divide the {per_rank_batch} samples each rank gets (batch {batch} x {n} / {dp}): verl "
                      f"{ctx.spec.verl_version}'s Megatron worker asserts it", fix)]
    return []


def mini_batch_divides_dp(ctx: RuleContext) -> list[Finding]:
    """ppo_mini_batch_size x n over the data-parallel size. Engine workers assert it divides; the legacy FSDP
    worker floors it and asserts the result is > 0 and a multiple of ppo_micro_batch_size_per_gpu."""
    mini, n, dp = ctx.mini, ctx.n, ctx.dp
    fix = f"choose a mini-batch size (or responses per prompt) so mini x responses divides by {dp}"
    if ctx.engine_workers:
        if (mini * n) % dp:
            return [error("mini_batch_size", f"mini-batch {mini} x {n} responses = {mini * n} does not divide by "
                          f"the data-parallel size {dp}: verl {ctx.spec.verl_version}'s engine workers assert it",
                          fix)]
        return []
    if ctx.framework != "fsdp":
        return []
    per_rank = (mini * n) // dp
    if per_rank == 0:
        return [error("mini_batch_size", f"mini-batch {mini} x {n} responses = {mini * n} is smaller than the "
                      f"data-parallel size {dp}: verl's FSDP worker asserts the per-rank mini-batch is > 0", fix)]
    micro = ctx.number("actor_micro_batch_size", 1)
    if not ctx.dynamic and micro > 0 and per_rank % micro:
        return [error("override", f"per-rank mini-batch {per_rank} is not a multiple of "
                      f"ppo_micro_batch_size_per_gpu {micro}: verl's FSDP worker asserts it",
                      f"set {ctx.key('actor_micro_batch_size')} to a divisor of {per_rank} with --override")]
    if (mini * n) % dp:
        return [warning("mini_batch_size", f"mini-batch {mini} x {n} responses = {mini * n} does not divide by the "
                        f"data-parallel size {dp}: each rank rounds down to {per_rank}", fix)]
    return []


def largest_divisor(number: int, at_most: int) -> int:
    return next(d for d in range(min(at_most, number), 0, -1) if number % d == 0)


def agent_loop_chunks(ctx: RuleContext) -> list[Finding]:
    """0.7.0+: AgentLoopManager.generate_sequences splits the step's prompts x n over rollout.agent.num_workers
    with DataProto.chunk, which asserts an equal split (padding is off there). The V1 trainer's manager
    (v1/agent_loop_tq.py) splits a TensorDict instead, unevenly and without an assert."""
    if ctx.version < (0, 7, 0) or ctx.v1 or str(ctx.get("rollout_mode", "async")) != "async":
        return []
    workers = ctx.number("agent_workers", ctx.default("agent_workers", 8))
    samples = ctx.gen_batch * ctx.n
    return _generation_split(ctx, workers, f"the {workers} agent-loop workers", "DataProto.chunk",
                             f", or --override {ctx.key('agent_workers')}=N with N dividing {samples}")


def sync_rollout_chunks(ctx: RuleContext) -> list[Finding]:
    """0.6.x, rollout mode sync (the in-tree DAPO recipe, main_ppo): the trainer repeats the generation batch n
    times and hands it to the workers' generate_sequences, whose dispatch (make_nd_compute_dataproto_dispatch_fn
    over the rollout mesh) splits it over the rollout's data-parallel groups (devices / rollout TP) with
    DataProto.chunk, which asserts an equal split."""
    if ctx.version >= (0, 7, 0) or str(ctx.get("rollout_mode", "sync")) != "sync" or ctx.spec.mode != "dapo":
        return []
    groups = ctx.trainer_world // max(1, ctx.number("rollout_tp", ctx.spec.rollout_tp))
    return _generation_split(ctx, groups, f"the {groups} rollout groups (devices / rollout TP)",
                             "generate_sequences dispatch")


def _generation_split(ctx: RuleContext, parts: int, over: str, splitter: str, other_fix: str = "") -> list[Finding]:
    """The step's generation batch x n rows split over PARTS with DataProto.chunk, which asserts an equal split."""
    samples = ctx.gen_batch * ctx.n
    if parts <= 0 or samples % parts == 0:
        return []
    return [error("gen_batch_size", f"{ctx.gen_batch} prompts x {ctx.n} responses = {samples} do not split evenly "
                  f"over {over}: verl {ctx.spec.verl_version}'s {splitter} asserts 'only support equal chunk' at the "
                  "first rollout", f"make generation batch x responses a multiple of {parts} (--gen-batch-size / "
                  f"--batch-size / --n-resp-per-prompt){other_fix}")]


def engine_worker_batch_settings(ctx: RuleContext) -> list[Finding]:
    """Engine workers' ActorRolloutRefWorker: the actor's use_dynamic_bsz must equal the rollout's
    log_prob_use_dynamic_bsz (which defaults to it), and the token budgets (dynamic) or the micro-batch sizes
    (fixed) of both must be set: asserts when the worker is built, after the model is loaded."""
    if not ctx.engine_workers:
        return _legacy_megatron_batch_settings(ctx)
    dynamic = ctx.dynamic
    log_prob = ctx.get("log_prob_use_dynamic_bsz", None)
    found: list[Finding] = []
    if log_prob is not None and not isinstance(log_prob, str) and bool(log_prob) != dynamic:
        found.append(error("features", f"actor.use_dynamic_bsz={dynamic} but rollout.log_prob_use_dynamic_bsz="
                           f"{bool(log_prob)}: verl {ctx.spec.verl_version}'s engine worker asserts they are equal",
                           f"drop the --override of {ctx.key('log_prob_use_dynamic_bsz')} (it follows the actor's), "
                           "or turn dynamic_batch on or off with --features"))
    needed = (("log_prob_max_token_len", "actor_max_token_len") if dynamic else
              ("log_prob_micro_batch_size", "actor_micro_batch_size"))
    for knob in needed:
        if ctx.is_null(knob):
            key = ctx.key(knob)
            found.append(error("overrides", f"{key} is null with dynamic batching {'on' if dynamic else 'off'}: "
                               f"verl {ctx.spec.verl_version}'s engine worker asserts it is set",
                               f"give {key} a number (or drop the --override that clears it)"))
    return found


def _legacy_megatron_batch_settings(ctx: RuleContext) -> list[Finding]:
    """The legacy Megatron worker hands the actor its token budget (dynamic) or micro-batch size (fixed) for each
    pass, and MegatronPPOActor asserts it is set; the reference worker asserts a micro-batch size when it starts."""
    if ctx.framework != "megatron":
        return []
    needed = ["log_prob_max_token_len", "actor_max_token_len"] if ctx.dynamic else \
        ["log_prob_micro_batch_size", "actor_micro_batch_size"]
    if ctx.uses_reference and not ctx.get("ref_log_prob_micro_batch_size_global"):
        needed.append("ref_log_prob_micro_batch_size")
    return [error("overrides", f"{ctx.key(knob)} is null: verl {ctx.spec.verl_version}'s Megatron actor asserts it is "
                  f"set (dynamic batching {'on' if ctx.dynamic else 'off'})",
                  f"give {ctx.key(knob)} a number (or drop the --override that clears it)")
            for knob in needed if ctx.is_null(knob)]


def megatron_fixed_micro_batches(ctx: RuleContext) -> list[Finding]:
    """Megatron engine with fixed micro-batches: each rank's mini-batch (mini x n / DP samples) must split into
    whole micro-batches (engine/utils.py prepare_micro_batches asserts), and with virtual pipeline parallel the
    micro-batch count must be a multiple of microbatch_group_size_per_vp_stage, which megatron-core sets to PP
    (engine/megatron/transformer_impl.py forward_backward_batch asserts). Dynamic batching rounds the count up."""
    if not ctx.engine_workers or ctx.framework != "megatron" or ctx.dynamic:
        return []
    per_rank = ctx.mini * ctx.n // ctx.dp
    micro = ctx.number("actor_micro_batch_size", 1)
    if micro <= 0 or per_rank <= 0:
        return []
    if _fixed_split_fails(per_rank, micro, ctx.version):
        return [error("mini_batch_size", f"each rank's mini-batch of {per_rank} samples (mini {ctx.mini} x {ctx.n} / DP "
                      f"{ctx.dp}) does not split into micro-batches of {micro}: verl {ctx.spec.verl_version}'s "
                      "prepare_micro_batches asserts it", "choose a mini-batch size whose mini x responses / DP is a "
                      f"multiple of {micro}, or turn dynamic_batch on (--features dynamic_batch)")]
    vpp = ctx.number("vpp_size", 1) if ctx.get("vpp_size") is not None else 1
    count = per_rank // micro
    if vpp > 1 and ctx.pp > 1 and count % ctx.pp:
        return [error("mini_batch_size", f"virtual pipeline parallel: {count} micro-batches per rank is not a multiple "
                      f"of PP {ctx.pp}: verl {ctx.spec.verl_version}'s Megatron engine asserts it (megatron-core "
                      "groups micro-batches per virtual stage)", f"make mini x responses / DP / micro a multiple of "
                      f"{ctx.pp}, or turn dynamic_batch on, or vpp off")]
    return []


def _fixed_split_fails(rows: int, micro: int, version: tuple[int, int, int]) -> bool:
    """Does prepare_micro_batches fail to split a rank's ROWS into fixed micro-batches of MICRO? 0.7.1+ asserts
    rows % micro == 0; 0.7.0 chunks into rows // micro pieces (tensordict_utils.chunk_tensordict asserts an equal
    split, and a zero count divides by zero)."""
    if version < (0, 7, 1):
        pieces = rows // micro
        return pieces == 0 or rows % pieces != 0
    return rows % micro != 0


def engine_fixed_micro_batches(ctx: RuleContext) -> list[Finding]:
    """Engine workers with fixed micro-batches, every pass: prepare_micro_batches (engine/utils.py) asserts each
    rank's rows divide by the pass's micro-batch size: the FSDP update (mini x n / DP rows per rank, by
    ppo_micro_batch_size_per_gpu; Megatron's: megatron_fixed_micro_batches) and the log-prob passes of the actor
    (rollout.log_prob_micro_batch_size_per_gpu) and of the reference (ref.log_prob_micro_batch_size_per_gpu) over
    the rank's share of the whole step (batch x n / DP, after the V1 trainer's padding)."""
    if not ctx.engine_workers or ctx.dynamic or ctx.dp <= 0:
        return []
    passes = [("log_prob_micro_batch_size", ctx.step_rows // ctx.dp, "the actor's log-prob pass")]
    if ctx.uses_reference:
        passes.append(("ref_log_prob_micro_batch_size", ctx.step_rows // ctx.dp, "the reference's log-prob pass"))
    if ctx.framework == "fsdp" and (ctx.mini * ctx.n) % ctx.dp == 0:
        passes.insert(0, ("actor_micro_batch_size", ctx.mini * ctx.n // ctx.dp, "each update (mini-batch)"))
    for knob, rows, what in passes:
        micro = ctx.number(knob, 1) if ctx.sent(knob) and not ctx.is_null(knob) else 1
        if rows <= 0 or micro <= 0 or not _fixed_split_fails(rows, micro, ctx.version):
            continue
        good = [d for d in range(1, rows + 1) if rows % d == 0]
        return [error("override" if ctx.from_override(knob) else "mini_batch_size",
                      f"{what} gives each of the {ctx.dp} data-parallel ranks {rows} rows, which do not split into "
                      f"micro-batches of {micro} ({ctx.key(knob)}): verl {ctx.spec.verl_version}'s "
                      "prepare_micro_batches asserts it", f"set {ctx.key(knob)} to one of {good[-6:]} with --override, "
                      "or turn dynamic_batch on (--features dynamic_batch)")]
    return []


def balance_batch_splits_evenly(ctx: RuleContext) -> list[Finding]:
    """trainer.balance_batch (on by default) in the legacy RayPPOTrainer and the recipes' trainers: _balance_batch
    splits the step's batch x n rows into equal partitions with seqlen_balancing.get_seqlen_balanced_partitions,
    which asserts the rows divide by the partition count (the actor's DP size; 0.6.x: the worker group's whole
    world size). validate_config checks the same only with fixed micro-batches; the V1 trainer pads instead.
    With balance_batch off, the legacy workers (0.6.x-0.7.x) still split the rows with DataProto.chunk when they
    dispatch them (FSDP: over every worker, Megatron: over DP), which asserts equal chunks (no auto-padding there)."""
    if ctx.v1 or ctx.spec.mode == "fully-async":
        return []
    if ctx.spec.mode == "one-step-off" and ctx.version >= (0, 7, 1):  # its trainer has no _balance_batch call
        return []
    if ctx.validate_config_runs and not ctx.dynamic and (ctx.framework == "fsdp" or ctx.version >= (0, 7, 0)):
        return []  # validate_config's minimal batch (a multiple of these partitions) is refused first
    if not ctx.flag("balance_batch", True):
        return _dispatch_chunks_evenly(ctx)
    rows = ctx.step_batch * ctx.n
    parts = ctx.trainer_world if ctx.version < (0, 7, 0) else ctx.dp
    if parts <= 0 or rows % parts == 0:
        return []
    what = "devices" if ctx.version < (0, 7, 0) else "data-parallel ranks"
    off = "" if not ctx.engine_workers else f", or --override {ctx.key('balance_batch')}=False"
    return [error("batch_size", f"batch {ctx.step_batch} x {ctx.n} responses = {rows} rows do not split evenly over "
                  f"the {parts} {what}: verl {ctx.spec.verl_version}'s trainer balances each step's batch over them "
                  "(trainer.balance_batch) and asserts it",
                  f"make --batch-size x --n-resp-per-prompt a multiple of {parts}{off}")]


def _dispatch_chunks_evenly(ctx: RuleContext) -> list[Finding]:
    """The legacy workers' update_actor / compute_log_prob dispatch (make_nd_compute_dataproto_dispatch_fn over the
    actor's mesh) chunks the step's rows over its data-parallel ranks with _split_args_kwargs_data_proto: no
    auto-padding there, so DataProto.chunk asserts equal chunks. 0.7.0's engine workers get the rows as a
    TensorDict, which the same dispatch splits with tensordict_utils.chunk_tensordict, asserting the same."""
    if ctx.engine_workers and ctx.version >= (0, 7, 1):
        return []
    rows, parts = ctx.step_batch * ctx.n, ctx.dp
    if parts <= 0 or rows % parts == 0:
        return []
    how = "chunk_tensordict, which asserts a length divisible by the chunks" if ctx.engine_workers else \
        "DataProto.chunk, which asserts 'only support equal chunk'"
    return [error("batch_size", f"batch {ctx.step_batch} x {ctx.n} responses = {rows} rows do not split evenly over "
                  f"the {parts} data-parallel ranks: verl {ctx.spec.verl_version}'s workers split each step's rows with "
                  f"{how}", f"make --batch-size x --n-resp-per-prompt a multiple of {parts}")]