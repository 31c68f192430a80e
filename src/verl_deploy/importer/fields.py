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


def _swanlab(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return "swanlab" in [str(v) for v in items]


# knob -> (spec field, converter). Order matters only for reading.
FIELD_KNOBS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("train_files", "train_file", _one_path),
    ("val_files", "test_file", _one_path),
    ("prompt_key", "prompt_key", _text),
    ("max_prompt_length", "max_prompt_length", _int),
    ("max_response_length", "max_response_length", _int),
    ("train_batch_size", "batch_size", _int),
    ("gen_batch_size", "gen_batch_size", _int),
    ("filter_groups_enable", "filter_groups", _bool),
    ("filter_groups_metric", "filter_groups_metric", _text),
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
    ("total_training_steps", "train_steps", _int),
    ("save_freq", "save_freq", _int),
    ("test_freq", "test_freq", _int),
    ("val_before_train", "val_before_train", _bool),
    ("default_local_dir", "ckpts_dir", _text),
    ("max_ckpt_to_keep", "max_ckpt_to_keep", _int),
    ("logger", "swanlab", _swanlab),
    ("rollout_pool_gpus", "rollout_gpus", _int),
)

# knobs whose keys hold paths: compared as paths (one file and a list of that one file are the same)
PATH_KNOBS = ("train_files", "val_files", "model_path", "default_local_dir")


def keys_of(profile, knob: str, framework: str, device: str, mode: str) -> list[str]:
    try:
        return [key.path for key in profile.keys_for(knob, framework, device, mode)]
    except KeyError:
        return []


def features_of(effective: dict[str, Any], profile, framework: str, device: str, mode: str) -> list[str]:
    """Every applicable feature named on or off, as the effective config has it (majority of its keys)."""
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
