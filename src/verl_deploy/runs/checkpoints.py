"""Is the checkpoint a retry would resume from complete? The files verl writes for each framework.

verl's trainer (`RayPPOTrainer._save_checkpoint`) saves `global_step_N/actor` (and `critic`
when there is one) through the framework's checkpoint manager, then `global_step_N/data.pt` (the
dataloader state), and only then writes `latest_checkpointed_iteration.txt`. What the managers
write (verl 0.6-0.9, `verl/utils/checkpoint/`):

- FSDP (`fsdp_checkpoint_manager.py`): per rank `model_world_size_W_rank_R.pt`, and with the
  default contents `optim_world_size_W_rank_R.pt` and `extra_state_world_size_W_rank_R.pt`, for
  every R < W; `huggingface/` holds the config and tokenizer.
- Megatron (`megatron_checkpoint_manager.py`): `dist_ckpt/`, Megatron's distributed checkpoint,
  whose `metadata.json` is written when the save is finalized (`common.pt` and the shards
  before it); with a bridge and no dist checkpointing, the weights go to `huggingface/`
  as safetensors instead.

A folder the tracker points to but that misses any of these (a save killed half-way, an async
save not finalized, files removed) must not be resumed from: verl would crash loading it, or
worse, load a torn state. The retry then resumes from the newest complete folder before it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from verl_deploy import boundedread
from verl_deploy.textnumbers import int_of

TRACKER = "latest_checkpointed_iteration.txt"
FSDP_SHARD = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
STEP_DIR = re.compile(r"^global_step_(\d+)$")


@dataclass
class ResumePoint:
    step: int | None  # the step to resume from (None: from the start)
    folder: str | None  # its global_step_N folder
    tracked: int | None  # what latest_checkpointed_iteration.txt says
    skipped: list[tuple[int, str]]  # newer folders that are incomplete, with what is missing

    @property
    def overrides_tracker(self) -> bool:
        return self.tracked is not None and self.step != self.tracked


def tracked_step(ckpts_dir: str | Path) -> int | None:
    try:
        raw = boundedread.read_bytes(Path(ckpts_dir) / TRACKER, 64, head=True)  # never blocks on a FIFO
        return int_of(raw.decode("utf-8", errors="replace"))  # at most 18 digits: a step, not any text
    except (OSError, ValueError):
        return None


def _fsdp_missing(role_dir: Path) -> str | None:
    try:
        names = os.listdir(role_dir)
    except OSError:
        return f"{role_dir.name}/ is missing"
    shards: dict[str, dict[int, set[int]]] = {}
    for name in names:
        match = FSDP_SHARD.match(name)
        if match:
            shards.setdefault(match.group(1), {}).setdefault(int(match.group(2)), set()).add(int(match.group(3)))
    if "model" not in shards:
        return f"{role_dir.name}/model_world_size_*_rank_*.pt is missing"
    for kind, by_size in shards.items():
        for size, ranks in by_size.items():
            absent = sorted(set(range(size)) - ranks)
            if absent:
                return f"{role_dir.name}/{kind}_world_size_{size}_rank_{absent[0]}.pt is missing ({len(absent)} of {size} ranks)"
    return None


def _megatron_missing(role_dir: Path) -> str | None:
    dist = role_dir / "dist_ckpt"
    if dist.is_dir():
        for name in ("common.pt", "metadata.json"):
            if not (dist / name).is_file():
                return f"{role_dir.name}/dist_ckpt/{name} is missing (the save was not finalized)"
        return None
    hf = role_dir / "huggingface"
    if hf.is_dir() and (hf / "config.json").is_file() and any(p.suffix == ".safetensors" for p in hf.iterdir()):
        return None
    if not role_dir.is_dir():
        return f"{role_dir.name}/ is missing"
    return f"{role_dir.name}/dist_ckpt/ is missing"


def missing(folder: str | Path, framework: str) -> str | None:
    """What a global_step_N folder lacks to be resumed from (None: complete)."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder.name}/ does not exist"
    check = _megatron_missing if framework == "megatron" else _fsdp_missing
    for role in ("actor", "critic"):
        if role == "critic" and not (folder / role).exists():
            continue
        problem = check(folder / role)
        if problem:
            return problem
    if not (folder / "data.pt").is_file():
        return "data.pt (the dataloader state, written last) is missing"
    return None


def resume_point(ckpts_dir: str | Path, framework: str) -> ResumePoint:
    """Where a retry should resume: the tracked step if complete, else the newest complete one before it."""
    base = Path(ckpts_dir)
    tracked = tracked_step(base)
    if tracked is None:
        return ResumePoint(None, None, None, [])
    try:
        steps = sorted((int(m.group(1)) for m in (STEP_DIR.match(n) for n in os.listdir(base)) if m), reverse=True)
    except OSError:
        steps = []
    skipped: list[tuple[int, str]] = []
    for step in [tracked, *[s for s in steps if s < tracked]]:
        folder = base / f"global_step_{step}"
        problem = missing(folder, framework)
        if problem is None:
            return ResumePoint(step, str(folder), tracked, skipped)
        skipped.append((step, problem))
    return ResumePoint(None, None, tracked, skipped)
