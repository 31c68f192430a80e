"""The feature registry: the one place that says what each acceleration feature is.

A feature is named (``offload``), may own a bit of seed 001's 7-bit mask, has a kind
(performance / memory / optional), a default, the frameworks and devices it applies
to, and the *knobs* it turns. Knobs are symbolic (``param_offload``); the version
profile maps each knob to verl's real keys, so verl key names never appear here.

Policy (seed 000): explicit user choice > default performance features > memory
features added on OOM. A user's explicit feature is never removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Literal

from verl_deploy.findings import Finding, error, warning

Kind = Literal["performance", "memory", "optional"]
Why = Literal["default", "user", "mask", "oom", "estimate", "rule", "n/a"]

MASK_LENGTH = 7


@dataclass(frozen=True)
class Feature:
    name: str
    kind: Kind
    default_on: bool
    description: str
    on: dict[str, object]
    off: dict[str, object]
    bit: int | None = None
    mask_label: str | None = None
    frameworks: tuple[str, ...] = ("megatron", "fsdp")
    devices: tuple[str, ...] = ("npu", "gpu")
    aliases: tuple[str, ...] = ()
    # knobs this feature forces to a value when on, overriding other features.
    forces: dict[str, object] = field(default_factory=dict)
    note: str = ""

    def applies_to(self, framework: str, device: str) -> bool:
        return framework in self.frameworks and device in self.devices


REGISTRY: tuple[Feature, ...] = (
    Feature(
        "remove_padding", "performance", True, "Remove Padding: skip compute on padding tokens",
        on={"remove_padding": True}, off={"remove_padding": False},
        bit=0, mask_label="RmvPad", aliases=("rmvpad", "rmv_pad"),
    ),
    Feature(
        "dynamic_batch", "performance", True,
        "Dynamic Batch Size: split batches by token count (budget = prompt + response length)",
        on={"use_dynamic_bsz": True}, off={"use_dynamic_bsz": False},
        bit=1, mask_label="DynBSZ", aliases=("dynbsz", "dynamic_bsz", "dyn_bsz"),
    ),
    Feature(
        "offload", "memory", False, "Offload parameters, gradients and optimizer state to host memory",
        on={"param_offload": True, "grad_offload": True, "optimizer_offload": True, "ref_param_offload": True},
        off={"param_offload": False, "grad_offload": False, "optimizer_offload": False, "ref_param_offload": False},
        bit=2, mask_label="Offload",
    ),
    Feature(
        "prefix_cache", "optional", False, "Prefix Cache: reuse KV cache of shared prompt prefixes in rollout",
        on={"prefix_caching": True}, off={"prefix_caching": False},
        bit=3, mask_label="PfxCache", aliases=("pfxcache", "prefix_caching"),
    ),
    Feature(
        "recompute", "memory", False, "Recompute: recompute activations (full granularity; --recompute-method, "
        "--recompute-num-layers, block and 8 by default) instead of keeping them",
        on={"recompute_granularity": "full"},
        off={},
        bit=4, mask_label="Recompute", frameworks=("megatron",),
        note="FSDP has no recompute feature; use gradient_checkpointing",
    ),
    Feature(
        "swap_optimizer", "optional", False, "Swap Optimizer (MindSpeed): swap optimizer state in and out of NPU memory",
        on={"swap_optimizer": True}, off={},
        bit=5, mask_label="SwapOpt", frameworks=("megatron",), devices=("npu",),
        aliases=("swapopt", "swap_opt"), forces={"optimizer_offload": False},
        note="turns optimizer offload off (the two cannot be on together)",
    ),
    Feature(
        "vpp", "optional", False, "VPP: virtual pipeline parallel size 2 (needs PP >= 2)",
        on={"vpp_size": 2}, off={},
        bit=6, mask_label="VPP", frameworks=("megatron",), aliases=("virtual_pipeline",),
    ),
    Feature(
        "flash_attn", "performance", True, "Flash Attention",
        on={"flash_attn": True}, off={"flash_attn": False}, aliases=("flash_attention", "fa"),
    ),
    Feature(
        "gradient_checkpointing", "performance", True, "Gradient checkpointing (FSDP activation checkpointing)",
        on={"gradient_checkpointing": True}, off={"gradient_checkpointing": False},
        frameworks=("fsdp",), aliases=("grad_ckpt", "activation_checkpointing"),
        note="Megatron uses recompute for the same purpose",
    ),
    Feature(
        "param_offload", "memory", False, "Offload the actor's parameters only (offload does parameters, gradients "
        "and optimizer state)", on={"param_offload": True}, off={"param_offload": False},
        note="verl's large-model GRPO scripts offload parameters and keep the optimizer on the device",
    ),
    Feature(
        "optimizer_offload", "memory", False, "Offload the actor's optimizer state only",
        on={"optimizer_offload": True}, off={"optimizer_offload": False},
    ),
    Feature(
        "grad_offload", "memory", False, "Offload the actor's gradients only (Megatron)",
        on={"grad_offload": True}, off={"grad_offload": False}, frameworks=("megatron",),
        note="FSDP has no gradient offload, and verl 0.9 dropped Megatron's (its param_offload releases the "
             "gradients too): use --features param_offload there",
    ),
    Feature(
        "ref_offload", "memory", False, "Offload the reference model's parameters to host memory (the actor's stay)",
        on={"ref_param_offload": True}, off={"ref_param_offload": False}, aliases=("ref_param_offload",),
        note="verl's GRPO example scripts set it; offload includes it",
    ),
    Feature(
        "chunked_prefill", "optional", False, "Chunked Prefill in the rollout engine",
        on={"chunked_prefill": True}, off={"chunked_prefill": False},
    ),
)

BY_NAME: dict[str, Feature] = {f.name: f for f in REGISTRY}
BY_BIT: dict[int, Feature] = {f.bit: f for f in REGISTRY if f.bit is not None}
# The OOM ladder, in the order the seeds give for recovery: first offload, then recompute (Megatron), or
# gradient checkpointing, its FSDP counterpart. Recovery, the next-step advice and the memory estimate read it here.
OOM_LADDERS: dict[str, tuple[str, ...]] = {"megatron": ("offload", "recompute"),
                                           "fsdp": ("offload", "gradient_checkpointing")}
OOM_LADDER: tuple[str, ...] = OOM_LADDERS["megatron"]


def oom_ladder(framework: str) -> tuple[str, ...]:
    """The memory features recovery adds one by one after an OOM, for this framework."""
    return OOM_LADDERS.get(framework, OOM_LADDERS["megatron"])


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def lookup(name: str) -> Feature | None:
    """Find a feature by name, alias or mask label (case and dash insensitive)."""
    key = _normalise(name)
    for feature in REGISTRY:
        names = {feature.name, *feature.aliases}
        if feature.mask_label:
            names.add(feature.mask_label.lower())
        if key in names:
            return feature
    return None


def parse_mask(mask: str) -> tuple[dict[str, bool], list[Finding]]:
    """Decode seed 001's mask: 7 characters of 0/1, leftmost is bit 0."""
    mask = mask.strip()
    if len(mask) != MASK_LENGTH or set(mask) - {"0", "1"}:
        labels = " ".join(BY_BIT[i].mask_label or "" for i in range(MASK_LENGTH))
        return {}, [error("mask", f"{mask!r} is not a 7-bit mask of 0/1 ({labels}, leftmost is bit 0)",
                          "give seven 0/1 characters, e.g. --mask 1100000")]
    return {BY_BIT[i].name: ch == "1" for i, ch in enumerate(mask)}, []


def parse_feature_list(items: Iterable[str]) -> tuple[dict[str, bool], list[Finding]]:
    """Parse `flash_attn,offload,-prefix_cache,no_vpp` into explicit on/off choices."""
    chosen: dict[str, bool] = {}
    findings: list[Finding] = []
    for raw in items:
        for part in str(raw).split(","):
            token = part.strip()
            if not token:
                continue
            on = True
            if token.startswith(("-", "!")):
                on, token = False, token[1:]
            elif _normalise(token).startswith("no_") and lookup(token) is None:
                on, token = False, token[3:]
            feature = lookup(token)
            if feature is None:
                names = ", ".join(f.name for f in REGISTRY)
                findings.append(error("features", f"unknown feature {token!r}",
                                      f"use one of: {names} (prefix with - to turn one off)"))
                continue
            chosen[feature.name] = on
    return chosen, findings


@dataclass(frozen=True)
class FeatureState:
    name: str
    on: bool
    why: Why

    def as_dict(self) -> dict:
        return {"name": self.name, "on": self.on, "why": self.why}


def resolve(
    *,
    framework: str,
    device: str,
    mask: str | None = None,
    user_features: Iterable[str] = (),
    no_default_features: bool = False,
    oom_features: Iterable[str] = (),
    estimate_features: Iterable[str] = (),
) -> tuple[list[FeatureState], list[Finding]]:
    """Apply the policy and the registry's applicability rules; return states and findings."""
    explicit, findings = _asked(mask, user_features)
    states: dict[str, FeatureState] = {}
    for feature in REGISTRY:
        states[feature.name] = _state(feature, explicit.get(feature.name), framework, device, no_default_features,
                                      findings)
    added: tuple[tuple[Iterable[str], Why], ...] = ((estimate_features, "estimate"), (oom_features, "oom"))
    for names, why in added:
        for name in names:
            wanted = BY_NAME.get(name)
            if wanted and wanted.applies_to(framework, device) and not states[name].on:
                states[name] = FeatureState(name, True, why)

    swap = states.get("swap_optimizer")
    if swap and swap.on and states["offload"].on:
        findings.append(warning(
            "features", "swap_optimizer and offload are both on: optimizer offload is turned off",
            "nothing to do; parameters and gradients are still offloaded"))
    return [states[f.name] for f in REGISTRY], findings


def _asked(mask: str | None, user_features: Iterable[str]) -> tuple[dict[str, tuple[bool, Why]], list[Finding]]:
    """What the mask and then the feature list turn on or off (the list wins), and what is wrong with either."""
    findings: list[Finding] = []
    explicit: dict[str, tuple[bool, Why]] = {}
    if mask:
        decoded, problems = parse_mask(mask)
        findings += problems
        explicit.update({name: (on, "mask") for name, on in decoded.items()})
    listed, problems = parse_feature_list(user_features)
    findings += problems
    explicit.update({name: (on, "user") for name, on in listed.items()})
    return explicit, findings


def _state(feature: Feature, asked: tuple[bool, Why] | None, framework: str, device: str, no_default_features: bool,
           findings: list[Finding]) -> FeatureState:
    """One feature's state: as asked where it applies (asking for one that does not is an error), else its default."""
    applicable = feature.applies_to(framework, device)
    if asked is not None:
        on, why = asked
        if on and not applicable:
            where = "framework " + framework if framework not in feature.frameworks else "device " + device
            need = "/".join(feature.frameworks if framework not in feature.frameworks else feature.devices)
            findings.append(error(
                "features", f"{feature.name} does not apply to {where} (needs {need})",
                f"drop {feature.name}" + (f"; {feature.note}" if feature.note else "")))
        # a feature that does not apply sets no knob (its keys do not exist there): n/a, whatever was asked
        return FeatureState(feature.name, on and applicable, why if applicable else "n/a")
    if not applicable:
        return FeatureState(feature.name, False, "n/a")
    return FeatureState(feature.name, feature.default_on and not no_default_features, "default")


def knob_values(states: Iterable[FeatureState]) -> dict[str, object]:
    """The knob settings the features ask for: a feature that is on wins a knob another one turns off
    (offload off, ref_offload on: the reference is offloaded); `forces` apply last."""
    knobs: dict[str, object] = {}
    set_on: set[str] = set()
    forced: dict[str, object] = {}
    for state in states:
        if state.why == "n/a":
            continue
        feature = BY_NAME[state.name]
        for knob, value in (feature.on if state.on else feature.off).items():
            if knob in set_on and not state.on:
                continue
            knobs[knob] = value
            if state.on:
                set_on.add(knob)
        if state.on:
            forced.update(feature.forces)
    knobs.update(forced)
    return knobs


def mask_of(states: Iterable[FeatureState]) -> str:
    """The 7-bit mask that describes these states (for display)."""
    on = {s.name for s in states if s.on}
    return "".join("1" if BY_BIT[i].name in on else "0" for i in range(MASK_LENGTH))


def describe_mask(mask: str) -> list[dict]:
    """Rows for `features --mask`: bit, label, feature, on."""
    decoded, problems = parse_mask(mask)
    if problems:
        raise ValueError(problems[0].line())
    return [
        {"bit": i, "label": BY_BIT[i].mask_label, "feature": BY_BIT[i].name, "on": decoded[BY_BIT[i].name],
         "description": BY_BIT[i].description}
        for i in range(MASK_LENGTH)
    ]
