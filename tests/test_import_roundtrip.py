"""Round trip: `import` of a run_training.sh that verl-deploy generated gives back the same config,
that is the same launch: the plan of the imported config sends verl exactly the overrides the
generated script sends (plan.json), and the fields that reach verl are the spec's own."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from verl_deploy.compiler import compile_plan
from verl_deploy.importer.build import import_script
from verl_deploy.importer.configout import render, write
from verl_deploy.profiles import profile_for
from verl_deploy.sources import resolve

SPECS = {
    "dapo-megatron-npu-0.7.0": ["--verl-version", "0.7.0"],
    "dapo-fsdp-gpu-0.7.0": ["--verl-version", "0.7.0", "--framework", "fsdp", "--device", "gpu", "--batch-size", "64",
                            "--max-response-length", "4096", "--features", "offload,-dynamic_batch",
                            "--override", "trainer.log_val_generations=5"],
    "one-step-off-fsdp-npu-0.7.0": ["--verl-version", "0.7.0", "--mode", "one-step-off", "--framework", "fsdp",
                                    "--trainer-gpus", "4", "--rollout-gpus", "4", "--train-steps", "7"],
    "dapo-megatron-gpu-0.9.1": ["--verl-version", "0.9.1", "--device", "gpu", "--swanlab", "yes",
                                "--swanlab-mode", "offline", "--experiment-name", "rt-0.9.1", "--lr", "3e-06"],
}
FIELDS = ("mode", "framework", "device", "verl_version", "model_path", "train_file", "test_file", "batch_size", "lr",
          "n_resp_per_prompt", "max_prompt_length", "max_response_length", "train_tp", "train_pp", "train_steps",
          "effective_experiment_name", "effective_ckpts_dir", "project_name", "swanlab_on", "trainer_gpus", "rollout_gpus", "overrides")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_import_of_a_generated_script_gives_back_the_same_launch(tmp_path, name):
    out = tmp_path / "scripts"
    made = run_cli("generate", *SPECS[name], "--output-dir", str(out), "--force")
    assert made.returncode == 0, made.stderr
    sent = json.loads((out / "plan.json").read_text())["overrides"]
    result = import_script(str(out / "run_training.sh"))
    assert result.equivalent, [d.line() for d in result.remaining]
    config = write(tmp_path / "back.yaml", render(result, "run_training.sh"))
    spec = resolve(config_file=config, environ={})
    plan = compile_plan(spec, profile_for(spec.verl_version))
    assert [o.text() for o in plan.overrides] == sent
    original = resolve(flags=_flags(SPECS[name]), environ={})
    for field in FIELDS:
        if field in ("trainer_gpus", "rollout_gpus") and original.mode != "one-step-off":
            continue
        assert getattr(spec, field) == getattr(original, field), field


def _flags(args: list[str]) -> dict:
    """The CLI flags above as resolve() takes them."""
    flags: dict = {}
    i = 0
    while i < len(args):
        name = args[i][2:].replace("-", "_")
        value = args[i + 1]
        if name == "override":
            flags.setdefault("overrides", []).append(value)
        elif name == "features":
            flags["features"] = [value]
        elif name == "swanlab" and value in ("yes", "no"):
            flags["swanlab"] = value == "yes"
        else:
            flags[name] = value
        i += 2
    return flags
