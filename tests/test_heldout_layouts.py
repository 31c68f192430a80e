"""The held-out layouts (tests/heldout_layouts.py, written from verl's code before the rules): each goes through
`plan` and, where the deciding code runs on CPU, through that release's own code; plan and verl agree on all.

The real code: verl's get_seqlen_balanced_partitions, prepare_micro_batches, DataProto.chunk, the engine worker's
train_mini_batch and the legacy Megatron iterator (tests/test_runtime_rules.py's probes), validate_config and the
actor's dataclass on the config the launch composes, and torch's DeviceMesh over real gloo processes (the FSDP
hybrid-shard mesh). vLLM's scheduler check cannot run here (no CPU build of the vLLM releases verl pins): those cases
are judged by plan only, against the cited vLLM code.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import defaultdict

import pytest

import realverl
from heldout_layouts import HELD_OUT
from test_runtime_rules import PROBE, composed_yaml, errors, models, planned, run_probes  # noqa: F401

MORE = r'''
def balance(items, k):
    # the trainer's _balance_batch: equal-size partitions of the step's rows over k ranks
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions
    return [len(p) for p in get_seqlen_balanced_partitions(list(range(1, items + 1)), k_partitions=k, equal_size=True)]

def micro_batches(rows, micro):
    # verl/workers/engine/utils.py prepare_micro_batches with fixed micro-batches, on one rank's rows
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches
    data = tu.get_tensordict({"input_ids": torch.zeros(rows, 4, dtype=torch.long)},
                             non_tensor_dict={"use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro})
    return len(prepare_micro_batches(data)[0])

def chunk(rows, workers):
    import torch
    from verl.protocol import DataProto
    return len(DataProto.from_dict({"input_ids": torch.zeros(rows, 1)}).chunk(workers))

def validate_and_actor(config_yaml):
    # validate_config on the composed config, then the actor's dataclass (what the workers build from it)
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    config = OmegaConf.load(config_yaml)
    validate_config(config=config, use_reference_policy=False, use_critic=False)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    engine = getattr(actor, "engine", None) or getattr(actor, "megatron", None)
    return str(getattr(engine, "sequence_parallel", None))
'''
SCRIPT = PROBE.replace("\nresults = {}\n", MORE + "\nresults = {}\n")

MESH = textwrap.dedent('''
    import os, sys, torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh

    def run(rank, world, inner, port, out):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        try:  # verl's create_device_mesh for 0 < fsdp_size < world: (world // fsdp_size, fsdp_size)
            mesh = init_device_mesh("cpu", mesh_shape=(world // inner, inner), mesh_dim_names=["ddp", "fsdp"])
            mesh["fsdp"].get_group()
            said = "ok"
        except Exception as exc:
            said = f"failed {type(exc).__name__}: {exc}"[:200]
        with open(os.path.join(out, f"rank-{rank}"), "w") as handle:
            handle.write(said)
        dist.destroy_process_group()

    if __name__ == "__main__":
        world, inner, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        # forked from this process, which has imported torch (spawn re-imports it in every rank: 0.85 CPU-s each)
        mp.start_processes(run, args=(world, inner, port, out), nprocs=world, start_method="fork")
''')


def mesh_runs(tmp_path, world: int, inner: int) -> bool:
    from rayports import free_port

    script, out = tmp_path / "mesh.py", tmp_path / f"mesh-{world}-{inner}"
    script.write_text(MESH)
    out.mkdir()
    subprocess.run([sys.executable, str(script), str(world), str(inner), str(free_port()), str(out)],
                   capture_output=True, text=True, timeout=240)
    said = {path.name: path.read_text() for path in out.iterdir()}
    assert len(said) == world, said
    return all(value == "ok" for value in said.values())


def verl_verdicts(cases: dict, model, tmp_path) -> dict[str, bool | None]:
    """case -> does verl's own code run it (None: the deciding code is not reachable on CPU)."""
    probes: dict[str, dict] = defaultdict(dict)
    verdicts: dict[str, bool | None] = {}
    for name, (flags, _verdict, _where, ground) in cases.items():
        if ground is None:
            verdicts[name] = None
        elif ground == "mesh":
            raise AssertionError("a mesh case names its world and inner size")
        elif ground == "verify":
            config = composed_yaml(planned(flags, model), tmp_path, name)
            probes[flags["verl_version"]][name] = ["validate_and_actor", {"config_yaml": config}]
        elif ground[0] == "mesh":
            verdicts[name] = mesh_runs(tmp_path, **ground[1])
        else:
            probes[flags["verl_version"]][name] = [ground[0], ground[1]]
    for version, batch in probes.items():
        if realverl.verl_site(version) is None:
            pytest.skip(f"verl {version} cannot be installed here: {realverl.why_not(version)}")
        for name, outcome in run_probes(None, version, batch, SCRIPT).items():
            verdicts[name] = outcome["ok"]
    return verdicts


def test_held_out_layouts_are_refused_and_accepted_as_verl_does(models, tmp_path, capsys):
    verdicts = verl_verdicts(HELD_OUT, models["Qwen3-8B"], tmp_path)
    rows, agree_plan, agree_both, reachable = [], 0, 0, 0
    for name, (flags, verdict, where, _ground) in HELD_OUT.items():
        refused = errors(planned(flags, models["Qwen3-8B"]))
        plan_right = bool(refused) == (verdict == "rejects")
        real = verdicts[name]
        real_right = real is None or real == (verdict == "runs")
        agree_plan += plan_right
        reachable += real is not None
        agree_both += plan_right and real is not None and real_right
        rows.append((name, verdict, "refused" if refused else "accepted", {None: "-", True: "runs", False: "rejects"}[real],
                     [f.line() for f in refused][:1]))
        for finding in refused:
            assert finding.fix and "\n" not in finding.line(), finding
    with capsys.disabled():
        print(f"\nheld-out: plan agrees with verl's code on {agree_plan}/{len(HELD_OUT)}; verl's own code ran "
              f"{reachable} of them on CPU and agreed with the written verdict and with plan on {agree_both}")
    wrong = [row for row in rows if (row[1] == "rejects") != (row[2] == "refused") or row[3] not in ("-", row[1])]
    assert not wrong, "\n".join(map(str, wrong))
    assert reachable >= 15
