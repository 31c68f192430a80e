"""Settings the legacy actors (0.6.x-0.7.x fsdp_workers / megatron_workers and their dp_actor / megatron_actor)
assert when they start or at the first update: a gradient clip for FSDP's optimizer step, a data-loader seed when
Megatron shuffles its mini-batches, and the reference's load_weight matching the actor's."""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.rules.context import RuleContext


def _legacy(ctx: RuleContext, framework: str) -> bool:
    return ctx.framework == framework and not ctx.engine_workers and ctx.version < (0, 8, 0)


def legacy_fsdp_grad_clip(ctx: RuleContext) -> list[Finding]:
    """DataParallelPPOActor._optimizer_step asserts actor.grad_clip is not None (it clips with it every update)."""
    if not _legacy(ctx, "fsdp") or not ctx.is_null("actor_grad_clip"):
        return []
    key = ctx.key("actor_grad_clip")
    return [error("overrides", f"{key} is null: verl {ctx.spec.verl_version}'s FSDP actor asserts a gradient clip at "
                  "its first update", f"drop the --override of {key} (verl's default is 1.0), or give it a number")]


def legacy_megatron_actor_settings(ctx: RuleContext) -> list[Finding]:
    """MegatronPPOActor._validate_config: with actor.shuffle on, actor.data_loader_seed must be set (verl's default
    is null on 0.6.x, 42 from 0.7.0). The reference worker, when it loads weights, asserts
    actor.load_weight == ref.load_weight."""
    if not _legacy(ctx, "megatron"):
        return []
    found: list[Finding] = []
    seed = ctx.get("actor_data_loader_seed", None) if ctx.sent("actor_data_loader_seed") else \
        ctx.default("actor_data_loader_seed", None)
    if ctx.flag("actor_shuffle", False) and seed is None:
        key = ctx.key("actor_data_loader_seed")
        found.append(error("overrides", f"{ctx.key('actor_shuffle')}=True with {key} unset: verl "
                           f"{ctx.spec.verl_version}'s Megatron actor asserts 'If shuffle dataloader, seed must be "
                           "manually set'", f"add --override {key}=42 (or drop the --override of "
                           f"{ctx.key('actor_shuffle')})"))
    actor_loads, ref_loads = ctx.flag("actor_load_weight", True), ctx.flag("ref_load_weight", True)
    if ctx.uses_reference and ref_loads and actor_loads != ref_loads:
        found.append(error("overrides", f"{ctx.key('actor_load_weight')}={actor_loads} but {ctx.key('ref_load_weight')}="
                           f"{ref_loads}: verl {ctx.spec.verl_version}'s Megatron reference worker asserts they are "
                           "equal", f"drop the --override of {ctx.key('actor_load_weight')} (both default to True)"))
    return found
