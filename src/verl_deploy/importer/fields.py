"""Which spec field each profile knob carries, and how verl's value becomes the field's value.

The profile says which verl keys a knob sets (``Profile.keys_for``); this table says which spec field
the knob comes from, so that reading a script runs the compiler's table backwards. Knobs not listed
are constants or feature switches (features are read in ``features_of``).
"""

from __future__ import annotations

from typing import Any, Callable

from verl_deploy import features as feature_registry


def _one_path(value: Any) -> str:
    """verl's datasets take one file or a list; a spec holds one file."""
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"{len(value)} files (a spec holds one)")
        value = value[0]
    if not isinstance(value, str):
        raise ValueError("not a path")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) != int(value):
        raise ValueError("not a whole number")
    return int(value)


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("not true/false")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not text")
    return value


def _or_null(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A field where verl's null means something of its own (keep every checkpoint, count the steps from
    the epochs): null stays null."""
    return lambda value: None if value is None else convert(value)


class Unset:
    """A converter's answer for verl's null where the spec field has no null: the field keeps its default."""


UNSET = Unset()


def _when_set(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A field that only matters when a feature is on (verl's null there means the feature is off)."""
    return lambda value: UNSET if value is None else convert(value)


def _loggers(value: Any) -> list[str]:
    """trainer.logger: one name or a list (the spec's validator names the trackers it does not set up)."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise ValueError("not tracker names")
    return [str(item) for item in items]


# knob -> (spec field, converter). Order matters only for reading.
FIELD_KNOBS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("train_files", "train_file", _one_path),
    ("val_files", "test_file", _one_path),
    ("prompt_key", "prompt_key", _text),
    ("max_prompt_length", "max_prompt_length", _int),
    ("max_response_length", "max_response_length", _int),
    ("train_batch_size", "batch_size", _int),
    ("gen_batch_size", "gen_batch_size", _when_set(_int)),  # null: verl uses the train batch size
    ("filter_groups_enable", "filter_groups", _bool),
    ("filter_groups_metric", "filter_groups_metric", _or_null(_text)),
    ("max_num_gen_batches", "max_num_gen_batches", _int),
    ("model_path", "model_path", _text),
    ("lr", "lr", _float),
    ("mini_batch_size", "mini_batch_size", _int),
    ("clip_ratio_low", "clip_ratio_low", _float),
    ("clip_ratio_high", "clip_ratio_high", _float),
    ("loss_agg_mode", "loss_agg_mode", _text),
    ("train_tp", "train_tp", _int),
    ("train_pp", "train_pp", _int),
    ("train_cp", "train_cp", _int),
    ("rollout_name", "rollout_engine", _text),
    ("rollout_n", "n_resp_per_prompt", _int),
    ("rollout_tp", "gen_tp", _int),
    ("gpu_memory_utilization", "gpu_memory_utilization", _float),
    ("temperature", "temperature", _float),
    ("overlong_enable", "overlong_buffer", _bool),
    ("overlong_len", "overlong_buffer_len", _int),
    ("overlong_penalty", "overlong_penalty_factor", _float),
    ("project_name", "project_name", _text),
    ("experiment_name", "experiment_name", _text),
    ("nnodes", "nnodes", _int),
    ("n_gpus_per_node", "trainer_gpus", _int),
    ("total_training_steps", "train_steps", _or_null(_int)),
    ("save_freq", "save_freq", _int),
    ("test_freq", "test_freq", _int),
    ("val_before_train", "val_before_train", _bool),
    ("default_local_dir", "ckpts_dir", _text),
    ("max_ckpt_to_keep", "max_ckpt_to_keep", _or_null(_int)),
    ("logger", "logger", _loggers),
    ("rollout_pool_gpus", "rollout_gpus", _int),
    ("recompute_method", "recompute_method", _when_set(_text)),
    ("recompute_num_layers", "recompute_num_layers", _when_set(_int)),
)

# knobs one mechanism reads besides FIELD_KNOBS: the async trainers' own settings (modes.V1_KEYS and
# FULLY_ASYNC_KEYS, as compiler.knob_settings sends them) and the V1 separate-async trainer's rollout pool
_OFF_POLICY = (("max_off_policy", "max_off_policy", _int), ("off_policy_strategy", "off_policy_strategy", _text))
MECHANISM_KNOBS: dict[str, tuple[tuple[str, str, Callable[[Any], Any]], ...]] = {
    "colocate-async": (("colocate_warmup", "warmup_batches", _int), *_OFF_POLICY),
    "separate-async": (("v1_rollout_gpus", "rollout_gpus", _int), ("separate_warmup", "warmup_batches", _int),
                       ("parameter_sync_step", "parameter_sync_step", _int), *_OFF_POLICY),
    "fully-async": (("staleness_threshold", "staleness_threshold", _float),
                    ("trigger_parameter_sync_step", "parameter_sync_step", _int),
                    ("partial_rollout", "partial_rollout", _bool)),
}

# FIELD_KNOBS a mechanism's launch sets itself, whatever the field: fully-async sends data.train_batch_size=0 (its
# rollouter takes no train batch; compiler.knob_settings)
MECHANISM_SKIPS: dict[str, tuple[str, ...]] = {"fully-async": ("train_batch_size",)}


def knobs_for(mechanism: str) -> tuple[tuple[str, str, Callable[[Any], Any]], ...]:
    """(knob, spec field, converter) that reading a script of this mechanism goes through."""
    skipped = MECHANISM_SKIPS.get(mechanism, ())
    return tuple(k for k in FIELD_KNOBS if k[0] not in skipped) + MECHANISM_KNOBS.get(mechanism, ())


# knobs whose keys hold paths: compared as paths (one file and a list of that one file are the same)
PATH_KNOBS = ("train_files", "val_files", "model_path", "default_local_dir")


def keys_of(profile, knob: str, framework: str, device: str, mode: str) -> list[str]:
    try:
        return [key.path for key in profile.keys_for(knob, framework, device, mode)]
    except KeyError:
        return []


def features_of(effective: dict[str, Any], profile, framework: str, device: str, mode: str) -> list[str]:
    """Every applicable feature named on or off so that the keys they send are the effective config's.

    Features share knobs (offload and param_offload both offload the actor's parameters; one that is on wins),
    so the on/off choice is searched as a whole: the choice whose keys match the most of the config's, the
    nearest to each feature's own majority vote among equals."""
    from itertools import product

    votes = _majority(effective, profile, framework, device, mode)
    names = [name.lstrip("-") for name in votes]
    keyed = _feature_keys(profile, framework, device, mode, names, effective)
    best: tuple[int, int] | None = None
    chosen = votes
    for combo in product((True, False), repeat=len(names)):
        states = [feature_registry.FeatureState(n, on, "user") for n, on in zip(names, combo)]
        sent = feature_registry.knob_values(states)
        matched = sum(1 for knob, key in keyed if knob in sent and _equal(effective[key.path], key.value_for(sent[knob])))
        flips = sum(1 for vote, on in zip(votes, combo) if vote.startswith("-") == on)
        score = (matched, -flips)
        if best is None or score > best:
            best, chosen = score, [n if on else "-" + n for n, on in zip(names, combo)]
    return chosen


def _feature_keys(profile, framework: str, device: str, mode: str, names: list[str], effective: dict[str, Any]):
    """(knob, Key) of the features' knobs that the effective config holds."""
    found = []
    knobs = {knob for name in names for part in (feature_registry.BY_NAME[name].on, feature_registry.BY_NAME[name].off,
                                                   feature_registry.BY_NAME[name].forces) for knob in part}
    for knob in sorted(knobs):
        try:
            keys = profile.keys_for(knob, framework, device, mode)
        except KeyError:
            continue
        found += [(knob, key) for key in keys if key.path in effective]
    return found


def _majority(effective: dict[str, Any], profile, framework: str, device: str, mode: str) -> list[str]:
    """Each applicable feature with a key in the config, on when most of its keys hold its on-values."""
    chosen: list[str] = []
    for feature in feature_registry.REGISTRY:
        if not feature.applies_to(framework, device):
            continue
        on = off = total = 0
        for knob, value in feature.on.items():
            try:
                keys = profile.keys_for(knob, framework, device, mode)
            except KeyError:
                continue
            for key in keys:
                if key.path not in effective:
                    continue
                total += 1
                if _equal(effective[key.path], key.value_for(value)):
                    on += 1
                elif knob in feature.off and _equal(effective[key.path], key.value_for(feature.off[knob])):
                    off += 1
        if total == 0:
            continue
        chosen.append(feature.name if on > total / 2 else "-" + feature.name)
    return chosen


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)
