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


def _every_kind() -> list[tuple[str, ...]]:
    """(release, mode, framework, algorithm, DAPO source) for every mode x framework x algorithm the profiles plan,
    on the newest release of each family (0.7.0: the recipe trainers; 0.9.1: the V1 trainer's modes too), and both
    DAPO sources where a release has both."""
    from verl_deploy.profiles.modes import V1_SINCE, modes_of
    from verl_deploy.verl_release import release_numbers

    kinds = []
    for release in ("0.7.0", "0.9.1"):
        for mode in modes_of(release):
            for framework in ("megatron", "fsdp"):
                for algorithm in ("dapo", "grpo"):
                    both = release_numbers(release) >= V1_SINCE and mode == "dapo" and algorithm == "dapo"
                    for source in (("core", "recipe") if both else ("",)):
                        kinds.append((release, mode, framework, algorithm, source))
    return kinds


@pytest.mark.parametrize("kind", _every_kind(), ids=lambda kind: "-".join(part for part in kind if part))
def test_every_mode_framework_and_algorithm_round_trips(tmp_path, kind):
    from verl_deploy.profiles.modes import dapo_source_for, mechanism

    from verl_deploy.spec import SPLIT_MODES

    release, mode, framework, algorithm, source = kind
    flags: dict = {"verl_version": release, "mode": mode, "framework": framework, "algorithm": algorithm,
                   "device": "gpu", **({"dapo_source": source} if source else {})}
    if mode in SPLIT_MODES:  # trainer and rollout on devices of their own: Megatron's default TP 4 x PP 2 on each
        side = 8 if framework == "megatron" else 4
        flags.update(trainer_gpus=side, rollout_gpus=side, devices=",".join(str(i) for i in range(2 * side)))
    args = [part for name, value in flags.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    made = run_cli("generate", *args, "--output-dir", str(tmp_path / "s"), "--force")
    assert made.returncode == 0, made.stderr
    sent = json.loads((tmp_path / "s" / "plan.json").read_text())["overrides"]
    result = import_script(str(tmp_path / "s" / "run_training.sh"))
    assert result.equivalent, [d.line() for d in result.remaining]
    config = write(tmp_path / "back.yaml", render(result, "run_training.sh"))
    spec = resolve(config_file=config, environ={})
    assert [o.text() for o in compile_plan(spec, profile_for(spec.verl_version)).overrides] == sent
    original = resolve(flags=flags, environ={})
    assert (spec.mode, spec.framework, spec.algorithm, mechanism(spec), dapo_source_for(spec)) == \
        (original.mode, original.framework, original.algorithm, mechanism(original), dapo_source_for(original))
    assert not result.overrides, result.overrides  # a generated launch needs no override of its own to come back


def test_a_composed_launch_is_kept_per_process_but_one_that_reads_the_environment_is_not(monkeypatch):
    """importer.compose keeps a launch it composed (import composes its plan more than once), hands out copies,
    and composes again a launch whose `${oc.env:...}` reads this process's environment."""
    from verl_deploy.importer import compose as composing
    from verl_deploy.profiles import profile_for
    from verl_deploy.verlconfig.locate import locate

    source, profile = locate("0.9.1"), profile_for("0.9.1")
    base = profile.base_configs["fsdp"]
    kept = ["data.train_batch_size=48"]
    first = composing.compose(source, "verl.trainer.main_ppo", base, kept, profile, "fsdp", None)
    first.resolved["data.train_batch_size"] = -1  # a caller's change stays its own
    again = composing.compose(source, "verl.trainer.main_ppo", base, kept, profile, "fsdp", None)
    assert again.resolved["data.train_batch_size"] == 48
    reads_env = ["trainer.project_name=${oc.env:VD_ROUNDTRIP_NAME}"]
    names = []
    for value in ("one", "two"):
        monkeypatch.setenv("VD_ROUNDTRIP_NAME", value)
        names.append(composing.compose(source, "verl.trainer.main_ppo", base, reads_env, profile, "fsdp",
                                       None).resolved["trainer.project_name"])
    assert names == ["one", "two"]
