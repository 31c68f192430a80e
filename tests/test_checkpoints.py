"""Which checkpoint a retry resumes from: complete folders only, by the files verl writes per framework."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_deploy.runs.checkpoints import missing, resume_point

FILES = {
    # verl/utils/checkpoint/megatron_checkpoint_manager.py: dist_ckpt (metadata.json at finalize), huggingface config
    "megatron": ["actor/dist_ckpt/common.pt", "actor/dist_ckpt/__0_0.distcp", "actor/dist_ckpt/.metadata",
                 "actor/dist_ckpt/metadata.json", "actor/huggingface/config.json", "actor/transformer_config.json"],
    # verl/utils/checkpoint/fsdp_checkpoint_manager.py: model/optim/extra_state per rank
    "fsdp": [f"actor/{kind}_world_size_2_rank_{rank}.pt" for kind in ("model", "optim", "extra_state") for rank in (0, 1)]
    + ["actor/huggingface/config.json"],
}


def write_checkpoint(base: Path, step: int, framework: str, drop: str | None = None) -> Path:
    folder = base / f"global_step_{step}"
    for name in [*FILES[framework], "data.pt"]:  # the trainer writes data.pt after the actor, then the tracker
        if name == drop:
            continue
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    return folder


@pytest.mark.parametrize("framework", ["megatron", "fsdp"])
def test_a_complete_checkpoint_is_resumed_by_verl_itself(tmp_path, framework):
    write_checkpoint(tmp_path, 4, framework)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    point = resume_point(tmp_path, framework)
    assert point.step == 4 and not point.overrides_tracker and not point.skipped


@pytest.mark.parametrize("framework, drop", [("megatron", "actor/dist_ckpt/metadata.json"),
                                             ("megatron", "actor/dist_ckpt/common.pt"),
                                             ("fsdp", "actor/model_world_size_2_rank_1.pt"),
                                             ("fsdp", "actor/optim_world_size_2_rank_0.pt"),
                                             ("fsdp", "data.pt")])
def test_a_torn_checkpoint_is_skipped_for_the_previous_complete_one(tmp_path, framework, drop):
    write_checkpoint(tmp_path, 2, framework)
    write_checkpoint(tmp_path, 4, framework, drop=drop)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    point = resume_point(tmp_path, framework)
    assert point.step == 2 and point.folder == str(tmp_path / "global_step_2") and point.overrides_tracker
    assert point.skipped[0][0] == 4 and Path(drop).name in point.skipped[0][1]


def test_no_complete_checkpoint_means_from_the_start_and_no_tracker_means_verls_default(tmp_path):
    assert resume_point(tmp_path, "megatron").step is None and not resume_point(tmp_path, "megatron").overrides_tracker
    write_checkpoint(tmp_path, 2, "megatron", drop="actor/dist_ckpt/metadata.json")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    point = resume_point(tmp_path, "megatron")
    assert point.step is None and point.overrides_tracker
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("garbage")
    assert resume_point(tmp_path, "megatron").tracked is None
    assert missing(tmp_path / "global_step_9", "fsdp") == "global_step_9/ does not exist"
