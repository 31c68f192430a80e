"""Checks: pure functions (spec, facts) -> findings, one function per rule.

They catch before launch what verl would otherwise report after loading the model:
layout divisibility, the batch-size assertions verl makes at start (rule numbers refer
to the startup-rule table in shared/reference/verl-keys.md §4), feature rules and
paths. ``run_checks`` runs them all and returns every finding at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from verl_deploy import boundedread
from verl_deploy import features as feature_registry
from verl_deploy.devices import MAX_DEVICES_PER_NODE
from verl_deploy.findings import Finding, error, info, warning
from verl_deploy.profiles import Profile
from verl_deploy.profiles.base import DAPO_SCRIPT_DIFFERENCES_SHORT
from verl_deploy.spec import SPLIT_MODES, RunSpec


@dataclass(frozen=True)
class Facts:
    """What checks may know beyond the spec: the model's shape from its config.json (when readable here)."""

    num_layers: int | None = None
    model_config_error: str | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    max_position_embeddings: int | None = None
    rope_factor: float | None = None
    num_experts: int | None = None
    vocab_size: int | None = None  # with hidden_size: the embedding's (and LM head's) shape, the largest tensor
    hidden_size: int | None = None


def _int_field(data: dict, *names: str) -> int | None:
    """The first of `names` that holds an int, in the config or its text_config / llm_config."""
    for section in (data, data.get("text_config") or {}, data.get("llm_config") or {}):
        if not isinstance(section, dict):
            continue
        for name in names:
            value = section.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


MAX_MODEL_CONFIG_BYTES = 4_000_000  # a HuggingFace config.json is a few KiB; this is not one


def read_model_facts(model_path: str) -> Facts:
    """Read the model's shape from its config.json when the directory is readable here."""
    config = Path(model_path) / "config.json"
    if not os.path.isfile(config):
        return Facts()
    try:
        data = boundedread.read_json(config, MAX_MODEL_CONFIG_BYTES)
    except boundedread.UnreadableFile as exc:
        return Facts(model_config_error=str(exc))
    except OSError as exc:
        return Facts(model_config_error=f"{config}: {exc.strerror or exc}")
    if not isinstance(data, dict):
        return Facts(model_config_error=f"{config}: not a JSON object")
    raw_rope = data.get("rope_scaling")
    rope = raw_rope if isinstance(raw_rope, dict) else {}
    factor = rope.get("factor") if isinstance(rope.get("factor"), (int, float)) else None
    return Facts(
        num_layers=_int_field(data, "num_hidden_layers"),
        num_attention_heads=_int_field(data, "num_attention_heads"),
        num_key_value_heads=_int_field(data, "num_key_value_heads", "num_attention_heads"),
        max_position_embeddings=_int_field(data, "max_position_embeddings"),
        rope_factor=float(factor) if factor else None,
        num_experts=_int_field(data, "num_experts", "num_local_experts", "n_routed_experts", "num_moe_experts"),
        vocab_size=_int_field(data, "vocab_size"),
        hidden_size=_int_field(data, "hidden_size"),
    )


def _resolve_features(spec: RunSpec) -> tuple[dict[str, feature_registry.FeatureState], list[Finding]]:
    states, findings = feature_registry.resolve(
        framework=spec.framework, device=spec.device, mask=spec.mask, user_features=spec.features,
        no_default_features=spec.no_default_features, oom_features=spec.oom_features)
    return {s.name: s for s in states}, findings


def _states(spec: RunSpec) -> dict[str, feature_registry.FeatureState]:
    return _resolve_features(spec)[0]


# --- devices and layout ----------------------------------------------------------------

def check_devices(spec: RunSpec, facts: Facts) -> list[Finding]:
    found: list[Finding] = []
    duplicates = sorted({d for d in spec.devices if spec.devices.count(d) > 1})
    if duplicates:
        found.append(error("devices", f"device ids repeat: {duplicates}", "list each device id once"))
    limit = MAX_DEVICES_PER_NODE[spec.device]
    if max(spec.devices) >= limit:
        found.append(error("devices", f"device id {max(spec.devices)} is out of range (a node has at most {limit})",
                           f"use ids 0-{limit - 1}"))
    return found


def check_head_address(spec: RunSpec, facts: Facts) -> list[Finding]:
    """Workers join the head at master_addr: a loopback address would have each wait on itself."""
    import ipaddress

    if spec.nnodes <= 1 or spec.head_from_scheduler:
        return []
    try:
        loopback = ipaddress.ip_address(spec.master_addr).is_loopback
    except ValueError:
        loopback = spec.master_addr.lower() in ("localhost", "localhost.localdomain")
    if loopback and spec.sources.get("master_addr", "default") in ("default", "derived"):
        return [error("master_addr", f"{spec.nnodes} nodes, but the Ray head address is {spec.master_addr}: every "
                      "worker would wait for a head on itself", "pass --master-addr HEAD_IP (or --nodes HEAD,NODE2,...)")]
    if loopback:  # asked for explicitly: several Ray nodes on one host (a test bed) is the one case where it works
        return [warning("master_addr", f"{spec.nnodes} nodes with the head at {spec.master_addr}: only nodes on this "
                        "host can join", "pass --master-addr HEAD_IP for nodes on other hosts")]
    return []


def check_trainer_layout(spec: RunSpec, facts: Facts) -> list[Finding]:
    """verl rule 1: trainer devices divide by TP x PP x CP (a whole data-parallel size)."""
    if spec.framework != "megatron":
        return []
    world = spec.trainer_devices * spec.nnodes
    model_parallel = spec.train_tp * spec.train_pp * spec.train_cp
    if world % model_parallel:
        what = "--trainer-gpus" if spec.mode in SPLIT_MODES else "--devices"
        return [error("train_tp", f"{world} trainer devices do not divide by TP x PP x CP = "
                      f"{spec.train_tp} x {spec.train_pp} x {spec.train_cp} = {model_parallel}",
                      f"choose --train-tp/--train-pp/--train-cp whose product divides {world}, or change {what}")]
    return []


def check_rollout_layout(spec: RunSpec, facts: Facts) -> list[Finding]:
    """verl rule 21: rollout devices divide by the rollout TP; seed 001: gen_tp == train_tp."""
    found: list[Finding] = []
    rollout_world = (spec.rollout_gpus if spec.mode in SPLIT_MODES else len(spec.devices)) * spec.nnodes
    derived_from_a_bad_train_tp = spec.gen_tp is None and spec.framework == "megatron" and \
        (spec.trainer_devices * spec.nnodes) % (spec.train_tp * spec.train_pp * spec.train_cp)
    if rollout_world % spec.rollout_tp and not derived_from_a_bad_train_tp:  # that one is said once, as train_tp
        where = "--rollout-gpus" if spec.mode in SPLIT_MODES else "--devices"
        found.append(error("gen_tp", f"{rollout_world} rollout devices do not divide by rollout TP {spec.rollout_tp}",
                           f"choose a --gen-tp that divides {rollout_world}, or change {where}"))
    if spec.gen_tp is not None and spec.gen_tp != spec.train_tp and spec.framework == "megatron":
        if not spec.allow_tp_mismatch:
            found.append(error("gen_tp", f"rollout TP {spec.gen_tp} differs from training TP {spec.train_tp}",
                               "use the same value, or add --allow-tp-mismatch if you mean it"))
    return found


def check_one_step_off_split(spec: RunSpec, facts: Facts) -> list[Finding]:
    if spec.mode not in SPLIT_MODES:
        return []
    total = spec.trainer_gpus + spec.rollout_gpus
    if total > len(spec.devices):
        return [error("trainer_gpus", f"trainer {spec.trainer_gpus} + rollout {spec.rollout_gpus} = {total} devices, "
                      f"but only {len(spec.devices)} are listed", "lower TRAINER_GPUS/ROLLOUT_GPUS or list more devices")]
    if total < len(spec.devices):
        return [warning("trainer_gpus", f"{len(spec.devices) - total} listed devices are used by neither the trainer "
                        "nor the rollout", "list only the devices you use, or give them to one of the groups")]
    return []


# --- batch sizes (verl's startup assertions) -------------------------------------------

def check_batch_sizes(spec: RunSpec, facts: Facts) -> list[Finding]:
    found: list[Finding] = []
    # a mini-batch above the batch, batch % mini and mini x n % DP are per release, worker and trainer:
    # verl_deploy.rules (batch.py mini_batch_within_batch, mini_batch_divides_batch, mini_batch_divides_dp)
    # batch x n over the smallest batch the layout holds: rules/layout.py validate_config_minimal_batch
    found += _small_generation_batch(spec)
    return found


def _small_generation_batch(spec: RunSpec) -> list[Finding]:
    """DAPO's trainer generates until the train batch is full (recipe/dapo/dapo_ray_trainer.py fit: `num_prompt_in_batch
    < prompt_bsz` -> keep generating, raising once num_gen_batches reaches max_num_gen_batches > 0); with
    filter_groups off it trains on the generation batch as it is. So a generation batch below the train batch runs,
    unless the cap stops it before even unfiltered batches could fill one step."""
    gen, train = spec.effective_gen_batch_size, spec.batch_size
    from verl_deploy.profiles.modes import mechanism

    if mechanism(spec) != "dapo" or gen >= train:
        return []
    if not spec.filter_groups:
        return [warning("gen_batch_size", f"generation batch {gen} with filter_groups off: verl trains each step on "
                        f"those {gen} prompts, not on the train batch {train}",
                        f"set --gen-batch-size {train} (or more) to train on {train} prompts a step")]
    needed = -(-train // gen)
    if 0 < spec.max_num_gen_batches < needed:
        return [error("gen_batch_size", f"generation batch {gen} needs at least {needed} generation batches to fill "
                      f"the train batch {train}, but max_num_gen_batches is {spec.max_num_gen_batches}: verl's DAPO "
                      "trainer raises 'Generated too many' at the first step",
                      f"raise --gen-batch-size to {train} or more, or --max-num-gen-batches to {needed} or more "
                      "(0: no limit)")]
    return [info("gen_batch_size", f"generation batch {gen} is below the train batch {train}: each step generates at "
                 f"least {needed} batches")]


def check_lengths(spec: RunSpec, facts: Facts) -> list[Finding]:
    found: list[Finding] = []
    # verl's DAPO reward manager (workers/reward_manager/dapo.py:49 0.6.0-0.8.0, and the reward loop's,
    # experimental/reward_loop/reward_manager/dapo.py:43 0.7.0-0.9.1): assert max_resp_len >= overlong_buffer.len
    length, buffer = spec.max_response_length, spec.effective_overlong_buffer_len
    if spec.overlong_buffer and buffer > length:
        found.append(error("overlong_buffer_len", f"overlong buffer {buffer} is longer than the max response length "
                           f"{length}: verl's DAPO reward manager asserts 'max_resp_len must be larger than "
                           "overlong_buffer.len'", "lower --overlong-buffer-len (a quarter of the response length "
                           "is usual)"))
    elif spec.overlong_buffer and buffer == length:
        found.append(warning("overlong_buffer_len", f"overlong buffer {buffer} is the whole max response length: "
                             "the penalty starts at the first token, so every response is penalised by its length",
                             "lower --overlong-buffer-len (a quarter of the response length is usual)"))
    return found


def check_script_differences(spec: RunSpec, facts: Facts) -> list[Finding]:
    """Say where the launch differs from verl's own DAPO / one-step-off scripts, and why (profiles/base.py)."""
    differences = DAPO_SCRIPT_DIFFERENCES_SHORT  # one line; DAPO_SCRIPT_DIFFERENCES says why
    if spec.device == "npu" and spec.sources.get("gpu_memory_utilization", "").startswith("default ("):
        differences = (f"gpu_memory_utilization {spec.gpu_memory_utilization:g} not 0.9 (vllm-ascend KV cache)",
                       *differences)
    from verl_deploy.profiles import modes

    if spec.algorithm != "dapo":  # GRPO: what differs from DAPO instead (profiles/algorithms.py)
        return modes.comparison_findings(spec)
    if spec.mode == "fully-async":  # its code has no group filtering: the first difference reads the other way
        differences = tuple(d if not d.startswith("filter_groups") else
                            "no dynamic sampling (verl's fully-async code has no group filtering)" for d in differences)
    found = [info("mode", "differs from verl's own scripts: " + "; ".join(differences),
                  "override any of them with --override KEY=VALUE", area="dapo")]

    return found + modes.comparison_findings(spec)


def check_dapo_options(spec: RunSpec, facts: Facts) -> list[Finding]:
    from verl_deploy.profiles import modes

    found = modes.option_findings(spec)
    if found:
        return found
    if spec.mode == "one-step-off" and spec.filter_groups and spec.sources.get("filter_groups", "default") != "default":
        return [warning("filter_groups", "dynamic sampling (filter groups) is a DAPO-recipe feature; the "
                        "one-step-off trainer ignores it", "drop filter_groups for one-step-off runs")]
    return []


# --- features ----------------------------------------------------------------------------

def check_features(spec: RunSpec, facts: Facts) -> list[Finding]:
    states, found = _resolve_features(spec)
    if states["vpp"].on:
        vpp = int(str(feature_registry.BY_NAME["vpp"].on["vpp_size"]))
        if spec.train_pp < 2:  # megatron-core: interleaved schedule needs PP > 1
            found.append(error("features", f"vpp needs pipeline parallel >= 2 (PP is {spec.train_pp})",
                               "raise --train-pp to 2 or more, or turn vpp off (mask bit 6)"))
        elif facts.num_layers is not None:
            per_stage, rest = divmod(facts.num_layers, spec.train_pp)
            if rest or per_stage % vpp:
                found.append(error("features", f"vpp: the model's {facts.num_layers} layers do not split evenly into "
                                   f"PP {spec.train_pp} x VPP {vpp} = {spec.train_pp * vpp} chunks",
                                   "choose a PP that makes layers / (PP x 2) whole, or turn vpp off"))
        else:
            found.append(info("features", "vpp: the model's layer count is unknown here, so the even-split rule "
                              "(layers divisible by PP x VPP) was not checked",
                              "make the model directory readable on this host to check it"))
    return found


# --- numbers and logging -----------------------------------------------------------------

def check_swanlab(spec: RunSpec, facts: Facts) -> list[Finding]:
    if not spec.swanlab_on:
        return []
    found: list[Finding] = []
    if spec.swanlab_mode == "cloud" and not spec.swanlab_host:
        found.append(error("swanlab_host", "SwanLab is on in cloud mode but no host is given",
                           "set SWANLAB_HOST or --swanlab-host http://host:8000, or --swanlab no"))
    if spec.swanlab_host and not spec.swanlab_host.startswith(("http://", "https://")):
        found.append(error("swanlab_host", f"{spec.swanlab_host!r} is not an http(s) URL",
                           "write it as http://host:port"))
    if spec.swanlab_mode == "cloud" and spec.swanlab_api_key is None:
        found.append(warning("swanlab_api_key", "no SwanLab API key given: the run relies on an existing "
                             "`swanlab login` where it runs", "set SWANLAB_API_KEY in the environment"))
    return found


def check_save_freq(spec: RunSpec, facts: Facts) -> list[Finding]:
    # verl saves only where trainer.save_freq > 0 (ray_trainer.py fit, v1/trainer_base.py): 0 and -1 both mean off
    if spec.save_freq <= 0 and spec.max_oom_retries > 0:
        return [warning("save_freq", f"checkpoints are off (save_freq {spec.save_freq}): a retry after OOM restarts "
                        "from step 0", "set --save-freq to a number of steps (e.g. 10)")]
    return []


# --- paths --------------------------------------------------------------------------------

def check_paths(spec: RunSpec, facts: Facts) -> list[Finding]:
    """Paths may be container paths: absent is a warning, an error under --strict."""
    found: list[Finding] = []
    level = error if spec.strict else warning
    hint = "" if spec.strict else " (fine if it exists in the container)"
    for field, path, kind in (("model_path", spec.model_path, "dir"), ("train_file", spec.train_file, "file"),
                              ("test_file", spec.test_file, "file")):
        exists = os.path.isdir(path) if kind == "dir" else os.path.isfile(path)
        if not exists:
            found.append(level(field, f"{path} does not exist on this host{hint}",
                               f"check the {field.replace('_', ' ')}", area="paths"))
    if facts.model_config_error:
        found.append(error("model_path", f"cannot read the model config: {facts.model_config_error}",
                           "point --model-path at a HuggingFace model directory", area="paths"))
    if spec.verl_dir and not os.path.isdir(spec.verl_dir):
        found.append(error("verl_dir", f"{spec.verl_dir} is not a directory", "give the root of a verl checkout"))
    return found


def check_ray_auth(spec: RunSpec, facts: Facts) -> list[Finding]:
    """Token auth for the scripts' own Ray needs a token on this host (Ray's `ray start --head` makes none)."""
    from verl_deploy import rayauth

    if spec.ray_auth != "token" or spec.head_from_scheduler:
        return []  # a cluster or scheduler elsewhere: the launch asks it (Ray Jobs) or it makes its own (KubeRay)
    try:
        token = rayauth.find_token()
    except rayauth.AuthError as exc:
        return [error("ray_auth", exc.problem, exc.fix)]
    if token is None:
        return [error("ray_auth", f"token authentication ({spec.sources.get('ray_auth', 'default')}) but no Ray "
                                  "token was found here for the run's Ray head",
                      rayauth.HOW_TO_SET + "; `ray get-auth-token --generate` makes one; or --ray-auth disabled")]
    return []


RULES: tuple[Callable[[RunSpec, Facts], list[Finding]], ...] = (
    check_devices,
    check_head_address,
    check_trainer_layout,
    check_rollout_layout,
    check_one_step_off_split,
    check_batch_sizes,
    check_lengths,
    check_dapo_options,
    check_script_differences,
    check_features,
    check_swanlab,
    check_save_freq,
    check_paths,
    check_ray_auth,
)


def run_checks(spec: RunSpec, profile: Profile | Finding, facts: Facts | None = None) -> list[Finding]:
    """All findings for this spec, in rule order, errors and warnings together."""
    facts = facts if facts is not None else read_model_facts(spec.model_path)
    found: list[Finding] = []
    if isinstance(profile, Finding):
        found.append(profile)
    for rule in RULES:
        found += rule(spec, facts)
    return found


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.level])
