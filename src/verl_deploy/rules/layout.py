"""Rules on the device layout that verl, Megatron-core or the HF models' Ulysses patch assert when the
workers start: process groups that must tile the world, sequence parallel against the heads, virtual
pipeline stages against the layers, the smallest batch validate_config allows."""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.rules.context import RuleContext


def _divisors(number: int, limit: int = 64) -> list[int]:
    return [d for d in range(1, min(number, limit) + 1) if number % d == 0]


def ulysses_sp_fits_model(ctx: RuleContext) -> list[Finding]:
    """FSDP Ulysses sequence parallel: the workers build a (world // SP, SP) device mesh and take its "sp"
    group, which torch cannot give the ranks the mesh leaves out (world % SP of them); apply_monkey_patch
    asserts the attention heads divide by SP and the KV heads divide by SP or SP by them
    (verl/models/transformers/monkey_patch.py)."""
    if ctx.framework != "fsdp" or ctx.sp <= 1:
        return []
    sp, world = ctx.sp, ctx.trainer_world
    if world % sp:
        return [error("override", f"Ulysses sequence parallel {sp} does not divide the {world} trainer devices: "
                      f"verl's FSDP workers build a (devices // SP, SP) device mesh that leaves {world % sp} device(s) out, "
                      "and torch's DeviceMesh cannot give those ranks the 'sp' group verl takes when the workers start",
                      f"set {ctx.key('ulysses_sp')} to one of {_divisors(world)}")]
    heads = ctx.facts.num_attention_heads
    if heads is None:
        return []
    kv = ctx.facts.num_key_value_heads or heads
    good = [d for d in _divisors(world) if heads % d == 0 and (kv % d == 0 or d % kv == 0)]
    if heads % sp:
        return [error("override", f"Ulysses sequence parallel {sp} does not divide the model's {heads} attention "
                      f"heads: verl {ctx.spec.verl_version}'s apply_monkey_patch asserts it when the model loads",
                      f"set {ctx.key('ulysses_sp')} to one of {good}")]
    if kv % sp and sp % kv:
        return [error("override", f"Ulysses sequence parallel {sp} neither divides nor is a multiple of the model's "
                      f"{kv} KV heads: verl {ctx.spec.verl_version}'s apply_monkey_patch asserts it",
                      f"set {ctx.key('ulysses_sp')} to one of {good}")]
    return []


def megatron_expert_layout_fits_world(ctx: RuleContext) -> list[Finding]:
    """Megatron-core initialize_model_parallel: the world must divide by expert TP x EP x PP (expert TP is
    the dense TP unless expert_tensor_parallel_size is set), or it raises before any weight loads."""
    if ctx.framework != "megatron":
        return []
    ep = ctx.number("expert_parallel", 1)
    if ep <= 1 and ctx.get("expert_tensor_parallel") is None:
        return []
    etp = ctx.number("expert_tensor_parallel", ctx.tp)
    world, size = ctx.trainer_world, etp * ep * ctx.pp
    if size <= 0 or world % (ctx.tp * ctx.pp * ctx.cp) or world % size == 0:
        return []  # the dense layout's own rule names a world that does not tile first
    return [error("override", f"{world} trainer devices do not divide by expert TP x EP x PP = {etp} x {ep} x "
                  f"{ctx.pp} = {size}: Megatron-core's initialize_model_parallel raises 'decoder world_size "
                  "is not divisible by expert_tensor_model_pipeline_parallel size'",
                  f"choose {ctx.key('expert_parallel')} (and {ctx.key('expert_tensor_parallel')}) so expert TP x EP x "
                  f"PP divides {world}, e.g. EP {max(d for d in _divisors(world) if world % (etp * d * ctx.pp) == 0)}"
                  if any(world % (etp * d * ctx.pp) == 0 for d in _divisors(world)) else
                  f"choose an expert TP and EP whose product with PP {ctx.pp} divides {world}")]


def moe_tensor_parallel_needs_sequence_parallel(ctx: RuleContext) -> list[Finding]:
    """Megatron-core ModelParallelConfig.__post_init__: expert parallel with tensor parallel needs sequence
    parallel (verl turns it on by default and off only when TP is 1)."""
    if ctx.framework != "megatron" or ctx.tp <= 1 or ctx.number("expert_parallel", 1) <= 1:
        return []
    if ctx.flag("sequence_parallel", True):
        return []
    return [error("override", f"{ctx.key('sequence_parallel')}=False with expert parallel and TP {ctx.tp}: Megatron-core "
                  "raises 'When using expert parallelism and tensor parallelism, sequence parallelism must be used'",
                  f"drop the --override of {ctx.key('sequence_parallel')} (verl's default is True)")]


def megatron_virtual_pipeline_fits(ctx: RuleContext) -> list[Finding]:
    """A virtual pipeline size given by --override (the vpp feature is checked with the features):
    Megatron-core initialize_model_parallel raises for any virtual size with PP 1 (verl passes the value
    as it is, 1 included), and get_num_layers_to_build asserts each stage's layers divide by it."""
    key = ctx.key("vpp_size")
    if ctx.framework != "megatron" or ctx.get("vpp_size") is None or any(s.name == "vpp" and s.on for s in ctx.plan.features):
        return []
    vpp, pp = ctx.number("vpp_size", 1), ctx.pp
    if pp <= 1:
        return [error("override", f"{key}={vpp} with pipeline parallel 1: Megatron-core raises 'pipeline-model-"
                      "parallel size should be greater than 1 with interleaved schedule'",
                      f"drop the --override of {key} (null), or raise --train-pp to 2 or more")]
    layers = ctx.facts.num_layers
    if layers is None or vpp <= 0 or layers % pp:
        return []
    if (layers // pp) % vpp:
        good: list[int | str] = [d for d in _divisors(layers // pp) if d > 1] or ["null"]
        return [error("override", f"{key}={vpp}: each of the {pp} pipeline stages holds {layers // pp} of the "
                      f"model's {layers} layers, which do not split into {vpp} virtual stages: Megatron-core's "
                      "get_num_layers_to_build asserts it", f"set {key} to one of {good}")]
    return []


def validate_config_minimal_batch(ctx: RuleContext) -> list[Finding]:
    """verl.utils.config.validate_config (fixed micro-batches): train_batch_size x n must divide by the
    smallest batch the layout can hold, the data-parallel size x ppo_micro_batch_size_per_gpu on Megatron
    and the device count on FSDP."""
    if not ctx.validate_config_runs or ctx.dynamic:
        return []
    world = ctx.trainer_world
    if ctx.framework == "megatron":
        if world % (ctx.tp * ctx.pp * ctx.cp):
            return []  # refused by the layout check already
        micro = ctx.number("actor_micro_batch_size", 1)
        minimal, what = ctx.dp * micro, f"DP {ctx.dp} x micro-batch {micro}"
    else:
        minimal, what = world, "the trainer devices"
    samples = ctx.batch * ctx.n
    if minimal <= 0 or samples % minimal == 0:
        return []
    return [error("batch_size", f"batch {ctx.batch} x {ctx.n} responses = {samples} does not divide by the minimal "
                  f"batch {minimal} ({what}): verl {ctx.spec.verl_version}'s validate_config asserts 'real_train_batch_size must "
                  "be divisible by minimal possible batch size'",
                  f"make --batch-size x --n-resp-per-prompt a multiple of {minimal}, or turn dynamic_batch on "
                  "(--features dynamic_batch)")]


def rollout_replicas_tile_world(ctx: RuleContext) -> list[Finding]:
    """Colocated rollout: the workers split the trainer's devices into rollout replicas of TP x DP x PP devices
    and assert the device count divides by that (a rollout data- or pipeline-parallel size set by --override;
    TP alone is checked with the layout)."""
    if ctx.spec.mode == "one-step-off":
        return []
    tp = ctx.number("rollout_tp", ctx.spec.rollout_tp)
    dp = ctx.number("rollout_dp", 1)
    pp = ctx.number("rollout_pp", 1)
    world, replica = ctx.trainer_world, tp * dp * pp
    if dp * pp <= 1 or replica <= 0 or world % tp or world % replica == 0:
        return []
    fits = [d for d in _divisors(world // tp) if (world // tp) % (d * pp) == 0] or [1]
    return [error("override", f"rollout TP {tp} x DP {dp} x PP {pp} = {replica} devices per replica does not divide "
                  f"the {world} devices the rollout shares with the trainer: verl {ctx.spec.verl_version}'s workers "
                  "assert 'rollout world_size is not divisible by infer_world_size'",
                  f"set {ctx.key('rollout_dp')} to one of {fits} (with PP {pp}), so TP x DP x PP divides {world}")]


def megatron_engine_needs_mbridge(ctx: RuleContext) -> list[Finding]:
    """The Megatron engine (engine workers, 0.7.1+) loads the model only through mbridge: MegatronEngine asserts
    use_mbridge. Older scripts often pass use_mbridge=False, which the legacy workers accepted."""
    key = ctx.key("use_mbridge")
    if ctx.framework != "megatron" or not ctx.engine_workers or ctx.flag("use_mbridge", True):
        return []
    return [error("override", f"{key}=False: verl {ctx.spec.verl_version}'s Megatron engine asserts 'use_mbridge must "
                  "be True' when the workers start", f"drop the --override of {key} (verl's default is True)")]


def fsdp_size_tiles_world(ctx: RuleContext) -> list[Finding]:
    """FSDP hybrid sharding: create_device_mesh (the legacy fsdp_workers' and the engine's) builds a
    (world // fsdp_size, fsdp_size) device mesh when 0 < fsdp_size < world; a size that does not divide the world
    leaves world % fsdp_size ranks outside it, and torch gives those ranks no group when the workers start."""
    if ctx.framework != "fsdp":
        return []
    size, world = ctx.number("fsdp_size", -1), ctx.trainer_world
    if size <= 0 or size >= world or world % size == 0:
        return []
    return [error("override", f"fsdp_size {size} does not divide the {world} trainer devices: verl's "
                  f"create_device_mesh builds a ({world // size}, {size}) mesh that leaves {world % size} device(s) "
                  "out, and torch's DeviceMesh has no group for them when the workers start",
                  f"set {ctx.key('fsdp_size')} to one of {[d for d in _divisors(world) if d < world]} or -1 (one "
                  "shard group over every device)")]
