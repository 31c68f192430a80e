"""Layout rules (rules/layout.py): each input goes to `plan` and to the real code that refuses it at start-up.

The real code: verl's apply_monkey_patch (the Ulysses asserts) and validate_config from the installed
wheels, megatron-core 0.13.1's initialize_model_parallel, ModelParallelConfig and get_num_layers_to_build,
and torch's DeviceMesh with real gloo processes. Valid neighbours pass both ways.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

import realverl
from conftest import FIXTURES
from test_runtime_rules import (PROBE, Q8, Q30, composed_yaml, errors, mcore_site, models, planned,  # noqa: F401
                                run_probes)

MORE_PROBES = r'''
def ulysses_patch(heads, kv, sp):
    # verl/models/transformers/monkey_patch.py apply_monkey_patch, up to the first thing after its asserts
    class Config: pass
    class Model: pass
    Model.__module__ = "json"
    model = Model(); model.config = Config()
    model.config.num_attention_heads, model.config.num_key_value_heads = heads, kv
    def past_the_asserts(): raise Reached()
    fn = load_function(verl_file("models/transformers/monkey_patch.py"), "apply_monkey_patch",
                       extra={"is_trl_available": past_the_asserts})
    fn(model, ulysses_sp_size=sp)

def mcore_parallel(world, tp, pp, ep=1, etp=None, vpp=None, cp=1):
    # megatron/core/parallel_state.py initialize_model_parallel, run up to its first process group
    import torch, torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1,
                                init_method="file://" + os.path.join(tempfile.mkdtemp(), "pg"))
    from megatron.core import parallel_state
    dist.get_world_size = lambda *a, **k: world
    dist.get_rank = lambda *a, **k: 0
    def first_group(*a, **k): raise Reached()
    parallel_state.create_group = first_group
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                             virtual_pipeline_model_parallel_size=vpp, context_parallel_size=cp,
                                             expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)

def mcore_vpp_layers(vp, **kw):
    # TransformerConfig with a virtual pipeline size, then get_num_layers_to_build's split per virtual stage
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    parallel_state.set_virtual_pipeline_model_parallel_world_size(vp)
    config = mcore_transformer_config(virtual_pipeline_model_parallel_size=vp, **kw)
    try:
        get_num_layers_to_build(config)
    except AssertionError as exc:
        if "vp_size" in str(exc):
            raise
        raise Reached()
    except Exception:
        raise Reached()
    raise Reached()
'''
MORE_PROBES += r'''
def fsdp_engine_from_plan(config_yaml):
    # the actor's dataclass from the composed config, then FSDPEngine.__init__ up to its device mesh
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1,
                                init_method="file://" + os.path.join(tempfile.mkdtemp(), "pg"))
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
    def at_the_mesh(self): raise Reached()
    FSDPEngine._init_device_mesh = at_the_mesh
    cfg = OmegaConf.load(config_yaml)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    class Model: pass
    model = Model(); model.use_remove_padding = cfg.actor_rollout_ref.model.get("use_remove_padding", False)
    FSDPEngine(model_config=model, engine_config=actor.engine, optimizer_config=actor.optim,
               checkpoint_config=actor.checkpoint)

def megatron_engine_from_plan(config_yaml):
    # MegatronEngine.__init__ with the actor's engine config from the composed config, up to its device mesh
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    src = open(verl_file("workers/engine/megatron/transformer_impl.py")).read()
    cfg = OmegaConf.load(config_yaml)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MegatronEngine")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    # the constructor's own statements up to the device mesh; super().__init__() needs the class, so it is skipped
    body = [s for s in init.body if not (isinstance(s, ast.Expr) and "super()" in ast.unparse(s))]
    stop = next(i for i, s in enumerate(body) if "_init_device_mesh" in ast.unparse(s))
    init.body = body[:stop] + [ast.parse("raise Reached()").body[0]]
    init.decorator_list = []
    for arg in init.args.args + init.args.kwonlyargs:
        arg.annotation = None  # the annotations name Megatron types this CPU box has not imported
    ns = {"Reached": Reached, "_check_dcp_unsupported_features": lambda *a, **k: None}
    exec(compile(ast.Module([init], []), "transformer_impl.py", "exec"), ns)
    class Self: pass
    engine = getattr(actor, "engine", None) or actor.megatron
    ns["__init__"](Self(), model_config=None, engine_config=engine, optimizer_config=actor.optim,
                   checkpoint_config=actor.checkpoint)

def rollout_dataclass_from_plan(config_yaml):
    # what the workers build from the composed config's rollout section
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    omega_conf_to_dataclass(OmegaConf.load(config_yaml).actor_rollout_ref.rollout)

def load_checkpoint_from_plan(config_yaml):
    # verl/trainer/ppo/ray_trainer.py RayPPOTrainer._load_checkpoint, up to loading the actor's weights
    from omegaconf import OmegaConf
    class Group:
        def load_checkpoint(self, *a, **k): raise Reached()
    class Trainer: pass
    trainer = Trainer(); trainer.config = OmegaConf.load(config_yaml); trainer.actor_rollout_wg = Group()
    fn = load_function(verl_file("trainer/ppo/ray_trainer.py"), "_load_checkpoint", "RayPPOTrainer")
    fn(trainer)
'''
SCRIPT = PROBE.replace("\nresults = {}\n", MORE_PROBES + "\nresults = {}\n")

MEG = "actor_rollout_ref.actor.megatron."
SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
GPU = {"verl_version": "0.9.1", "device": "gpu"}
Q40 = "Heads40-KV8"  # a 14B-class shape (40 heads, 8 KV heads): a Ulysses size can divide one and not the other


@pytest.fixture(scope="module")
def shapes(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    config = json.loads((FIXTURES / "Qwen3-8B.config.json").read_text())
    config.update(num_attention_heads=40, num_key_value_heads=8, hidden_size=5120)
    (root / Q40).mkdir()
    (root / Q40 / "config.json").write_text(json.dumps(config))
    return {**models, Q40: root / Q40}


# id: (flags, model, (plan: "error"|"ok", field), where, probe, kwargs, real failure substring or None)
CASES = {
    "ulysses-vs-heads": ({**GPU, "framework": "fsdp", "devices": "0-5", "overrides": [f"{SP}=3"]}, "Qwen3-8B",
                         ("error", "override"), "0.9.1", "ulysses_patch", dict(heads=32, kv=8, sp=3),
                         "must be divisible by ulysses_sp_size"),
    "ulysses-vs-kv": ({**GPU, "framework": "fsdp", "devices": "0-4", "batch_size": 40, "overrides": [f"{SP}=5"]},
                      Q40, ("error", "override"), "0.9.1", "ulysses_patch", dict(heads=40, kv=8, sp=5),
                      "num_key_value_heads 8 must be divisible"),
    "ulysses-fits": ({**GPU, "framework": "fsdp", "devices": "0-7", "overrides": [f"{SP}=4"]}, "Qwen3-8B",
                     ("ok", "override"), "0.9.1", "ulysses_patch", dict(heads=32, kv=8, sp=4), None),
    "ulysses-repeats-kv": ({**GPU, "framework": "fsdp", "devices": "0-7", "overrides": [f"{SP}=8"]}, "Qwen3-30B-A3B",
                           ("ok", "override"), "0.9.1", "ulysses_patch", dict(heads=32, kv=4, sp=8), None),
    "expert-layout-vs-world": ({**GPU, "devices": "0-7", "train_tp": 4, "train_pp": 1,
                                "overrides": [f"{MEG}expert_model_parallel_size=4"]}, "Qwen3-30B-A3B",
                               ("error", "override"), "mcore", "mcore_parallel", dict(world=8, tp=4, pp=1, ep=4),
                               "not divisible by expert_tensor_model_pipeline_parallel size (16)"),
    "expert-layout-fits": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 1,
                            "overrides": [f"{MEG}expert_model_parallel_size=4"]}, "Qwen3-30B-A3B",
                           ("ok", "override"), "mcore", "mcore_parallel", dict(world=8, tp=2, pp=1, ep=4), None),
    "expert-tp-vs-world": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 1,
                            "overrides": [f"{MEG}expert_model_parallel_size=4", f"{MEG}expert_tensor_parallel_size=4"]},
                           "Qwen3-30B-A3B", ("error", "override"), "mcore", "mcore_parallel",
                           dict(world=8, tp=2, pp=1, ep=4, etp=4), "not divisible by expert_tensor_model_pipeline"),
    "expert-tp-fits": ({**GPU, "devices": "0-7", "train_tp": 4, "train_pp": 1,
                        "overrides": [f"{MEG}expert_model_parallel_size=8", f"{MEG}expert_tensor_parallel_size=1"]},
                       "Qwen3-30B-A3B", ("ok", "override"), "mcore", "mcore_parallel",
                       dict(world=8, tp=4, pp=1, ep=8, etp=1), None),
    "moe-tp-without-sp": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 1,
                           "overrides": [f"{MEG}expert_model_parallel_size=2", f"{MEG}sequence_parallel=False"]},
                          "Qwen3-30B-A3B", ("error", "override"), "mcore", "mcore_transformer_config",
                          dict(**Q30, tensor_model_parallel_size=2, expert_model_parallel_size=2,
                               sequence_parallel=False, add_bias_linear=False),
                          "sequence parallelism must be used"),
    "moe-tp-with-sp": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 1,
                        "overrides": [f"{MEG}expert_model_parallel_size=2"]},
                       "Qwen3-30B-A3B", ("ok", "override"), "mcore", "mcore_transformer_config",
                       dict(**Q30, tensor_model_parallel_size=2, expert_model_parallel_size=2,
                            sequence_parallel=True, add_bias_linear=False), None),
    "vpp-without-pp": ({**GPU, "devices": "0-7", "train_tp": 4, "train_pp": 1,
                        "overrides": [f"{MEG}virtual_pipeline_model_parallel_size=1"]}, "Qwen3-8B",
                       ("error", "override"), "mcore", "mcore_parallel", dict(world=8, tp=4, pp=1, vpp=1),
                       "greater than 1 with interleaved schedule"),
    "vpp-null-without-pp": ({**GPU, "devices": "0-7", "train_tp": 4, "train_pp": 1}, "Qwen3-8B",
                            ("ok", "override"), "mcore", "mcore_parallel", dict(world=8, tp=4, pp=1, vpp=None), None),
    "vpp-vs-layers": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 2,
                       "overrides": [f"{MEG}virtual_pipeline_model_parallel_size=4"]}, "Qwen3-8B",
                      ("error", "override"), "mcore", "mcore_vpp_layers",
                      dict(vp=4, **Q8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2), "divisible"),
    "vpp-splits-layers": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 2,
                           "overrides": [f"{MEG}virtual_pipeline_model_parallel_size=3"]}, "Qwen3-8B",
                          ("ok", "override"), "mcore", "mcore_vpp_layers",
                          dict(vp=3, **Q8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2), None),
}

# validate_config's smallest batch: the probe is verl's validate_config on the config the launch composes
MINIMAL = {
    "minimal-batch-fsdp": ({**GPU, "framework": "fsdp", "devices": "0-7", "features": "-dynamic_batch",
                            "batch_size": 5, "mini_batch_size": 5, "n_resp_per_prompt": 4}, "error",
                           "real_train_batch_size (20) must be divisible by minimal possible batch size (8)"),
    "minimal-batch-fsdp-fits": ({**GPU, "framework": "fsdp", "devices": "0-7", "features": "-dynamic_batch",
                                 "batch_size": 16, "mini_batch_size": 8, "n_resp_per_prompt": 4}, "ok", None),
    "minimal-batch-megatron": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 1, "features": "-dynamic_batch",
                                "batch_size": 6, "mini_batch_size": 6, "n_resp_per_prompt": 2,
                                "overrides": [f"{MICRO}=4"]}, "error",
                               "real_train_batch_size (12) must be divisible by minimal possible batch size (16)"),
    "minimal-batch-megatron-fits": ({**GPU, "devices": "0-7", "train_tp": 2, "train_pp": 1,
                                     "features": "-dynamic_batch", "batch_size": 8, "mini_batch_size": 8,
                                     "n_resp_per_prompt": 2, "overrides": [f"{MICRO}=4"]}, "ok", None),
}

_RESULTS: dict[str, dict] = {}


def real(where: str) -> dict:
    if where not in _RESULTS:
        probes = {case: [c[4], c[5]] for case, c in CASES.items() if c[3] == where}
        if where == "mcore":
            site = mcore_site()
            if site is None:
                pytest.skip("megatron-core 0.13.1 cannot be installed here (no package index)")
            _RESULTS[where] = run_probes(site, None, probes, SCRIPT)
        else:
            if realverl.verl_site(where) is None:
                pytest.skip(f"verl {where} cannot be installed here (no package index)")
            _RESULTS[where] = run_probes(None, where, probes, SCRIPT)
    return _RESULTS[where]


@pytest.mark.parametrize("case", list(CASES))
def test_plan_refuses_the_layouts_the_real_code_refuses(case, shapes):
    flags, model, (expect, field), where, _probe, _kwargs, failure = CASES[case]
    prepared = planned(flags, shapes[model])
    found = errors(prepared, field)
    if expect == "error":
        assert len(found) == 1, [f.line() for f in prepared.findings]
        assert found[0].fix and "\n" not in found[0].line()
    else:
        assert found == [], [f.line() for f in found]
    outcome = real(where)[case]
    if failure is None:
        assert outcome["ok"], outcome
    else:
        assert not outcome["ok"] and failure in outcome["error"], outcome


def test_plan_refuses_a_batch_below_validate_configs_minimal_batch(models, tmp_path):
    if realverl.verl_site("0.9.1") is None:
        pytest.skip("verl 0.9.1 cannot be installed here (no package index)")
    probes = {}
    for name, (flags, expect, _failure) in MINIMAL.items():
        prepared = planned(flags, models["Qwen3-8B"])
        found = errors(prepared, "batch_size")
        assert len(found) == (1 if expect == "error" else 0), [f.line() for f in prepared.findings]
        if found:
            assert "minimal batch" in found[0].message and "dynamic_batch" in found[0].fix
        probes[name] = ["validate", {"config_yaml": composed_yaml(prepared, tmp_path, name)}]
    for name, outcome in run_probes(None, "0.9.1", probes).items():
        failure = MINIMAL[name][2]
        if failure is None:
            assert outcome["ok"], outcome
        else:
            assert not outcome["ok"] and failure in outcome["error"], outcome


def test_the_minimal_batch_is_not_refused_where_validate_config_does_not_run(models):
    """0.7.0 DAPO (recipe/dapo/main_dapo.py) never calls validate_config, so its minimal-batch message is not
    given; but the recipe trainer still balances each step's 5 x 4 = 20 rows over the 8 ranks
    (trainer.balance_batch), and verl 0.7.0's own get_seqlen_balanced_partitions refuses that split."""
    if realverl.verl_site("0.7.0") is None:
        pytest.skip("verl 0.7.0 cannot be installed here (no package index)")
    flags = {**MINIMAL["minimal-batch-fsdp"][0], "verl_version": "0.7.0"}
    found = errors(planned(flags, models["Qwen3-8B"]), "batch_size")
    assert not any("validate_config" in f.message for f in found)
    assert len(found) == 1 and "20 rows do not split evenly over the 8" in found[0].message, found
    # balance_batch off is no way out on the legacy workers: their dispatch (dispatch_nd_compute_dataproto) splits
    # the same 20 rows over the 8 DP ranks with DataProto.chunk, which asserts equal chunks (the examiner's layouts)
    assert "balance_batch" not in found[0].fix
    off = errors(planned({**flags, "overrides": ["trainer.balance_batch=False"]}, models["Qwen3-8B"]), "batch_size")
    assert len(off) == 1 and "DataProto.chunk" in off[0].message, off
    script = PROBE.replace("\nresults = {}\n", """
def balance(items, k):
    from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions
    return get_seqlen_balanced_partitions(list(range(1, items + 1)), k_partitions=k, equal_size=True)

def chunk(rows, k):
    import torch
    from verl.protocol import DataProto
    return len(DataProto.from_dict({"input_ids": torch.zeros(rows, 1)}).chunk(k))
""" + "\nresults = {}\n")
    outcomes = run_probes(None, "0.7.0", {"20": ["balance", {"items": 20, "k": 8}],
                                          "16": ["balance", {"items": 16, "k": 8}],
                                          "20-chunk": ["chunk", {"rows": 20, "k": 8}],
                                          "16-chunk": ["chunk", {"rows": 16, "k": 8}]}, script)
    assert not outcomes["20"]["ok"] and "20 % 8 != 0" in outcomes["20"]["error"], outcomes
    assert outcomes["16"]["ok"], outcomes
    assert not outcomes["20-chunk"]["ok"] and "only support equal chunk" in outcomes["20-chunk"]["error"], outcomes
    assert outcomes["16-chunk"]["ok"], outcomes


MESH = textwrap.dedent('''
    import os, sys, torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh

    def run(rank, world, sp, port, out):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        try:  # what verl's FSDP workers do: a (world // sp, sp) mesh, then its "sp" slice
            mesh = init_device_mesh("cpu", mesh_shape=(world // sp, sp), mesh_dim_names=["dp", "sp"])
            mesh["sp"].get_group()
            said = "ok"
        except Exception as exc:
            said = f"failed {type(exc).__name__}: {exc}"[:200]
        with open(os.path.join(out, f"rank-{rank}"), "w") as handle:
            handle.write(said)
        dist.destroy_process_group()

    if __name__ == "__main__":
        world, sp, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        # forked from this process, which has imported torch (spawn re-imports it in every rank: 0.85 CPU-s each)
        mp.start_processes(run, args=(world, sp, port, out), nprocs=world, start_method="fork")
''')


def test_a_ulysses_size_that_does_not_divide_the_devices_fails_on_the_ranks_left_out(models, tmp_path):
    """The world-size half of ulysses_sp_fits_model, against torch's real DeviceMesh over gloo processes."""
    from rayports import free_port

    script = tmp_path / "mesh.py"
    script.write_text(MESH)
    outcomes = {}
    for sp in (2, 3):
        out = tmp_path / f"sp{sp}"
        out.mkdir()
        subprocess.run([sys.executable, str(script), "4", str(sp), str(free_port()), str(out)], capture_output=True,
                       text=True, timeout=240)
        outcomes[sp] = {path.name: path.read_text() for path in sorted(out.iterdir())}
    assert outcomes[2] == {f"rank-{r}": "ok" for r in range(4)}, outcomes
    # 4 // 3 x 3 = 3 ranks in the mesh: rank 3 is left out, and torch cannot give it an "sp" group
    assert [r for r, said in outcomes[3].items() if said != "ok"] == ["rank-3"], outcomes
    assert outcomes[3]["rank-3"].startswith("failed "), outcomes
    plan_4_by_3 = planned({**GPU, "framework": "fsdp", "devices": "0-3", "batch_size": 24, "mini_batch_size": 24,
                           "overrides": [f"{SP}=3"]}, models["Qwen3-8B"])
    [found] = errors(plan_4_by_3, "override")
    assert "leaves 1 device(s) out" in found.message
    assert errors(planned({**GPU, "framework": "fsdp", "devices": "0-3", "overrides": [f"{SP}=2"]},
                          models["Qwen3-8B"]), "override") == []


def test_layout_rules_stay_silent_without_the_models_shape(tmp_path):
    """A container path the host cannot read: the shape rules cannot know, the world rules still can."""
    absent = tmp_path / "absent"
    assert errors(planned({**GPU, "framework": "fsdp", "devices": "0-5", "overrides": [f"{SP}=3"]}, absent),
                  "override") == []
    assert len(errors(planned({**GPU, "devices": "0-7", "train_tp": 4, "train_pp": 1,
                               "overrides": [f"{MEG}expert_model_parallel_size=4",
                                             f"{MEG}expert_tensor_parallel_size=4"]}, absent), "override")) == 1
    shutil.rmtree(absent, ignore_errors=True)


def test_rollout_replicas_must_tile_the_devices_the_rollout_shares(tmp_path):
    """engine_workers.py (0.9.1:659) asserts world % (rollout TP x DP x PP) == 0 when the rollout is built; the
    rule's arithmetic is that line's. vLLM cannot run here, so the worker itself is not started."""
    tree = realverl.verl_site("0.9.1")
    if tree is None:
        pytest.skip("verl 0.9.1 cannot be installed here (no package index)")
    line = (tree / "verl" / "workers" / "engine_workers.py").read_text().splitlines()[658]
    assert "assert self.world_size % infer_world_size == 0" in line
    model = tmp_path / "absent"  # the rule needs no model shape
    bad = planned({**GPU, "framework": "fsdp", "devices": "0-7", "gen_tp": 4, "allow_tp_mismatch": True,
                   "overrides": ["actor_rollout_ref.rollout.data_parallel_size=4"]}, model)
    [found] = errors(bad, "override")
    assert "4 x DP 4 x PP 1 = 16" in found.message and "[1, 2]" in found.fix
    good = planned({**GPU, "framework": "fsdp", "devices": "0-7", "gen_tp": 4, "allow_tp_mismatch": True,
                    "overrides": ["actor_rollout_ref.rollout.data_parallel_size=2"]}, model)
    assert errors(good, "override") == []


# issue #24 item 3's samples: each through plan and through verl 0.9.1's own code on the config the launch composes
ITEM_3 = {
    "ulysses-without-remove-padding": ({**GPU, "framework": "fsdp", "devices": "0-7", "features": "-remove_padding",
                                        "overrides": [f"{SP}=2"]}, "fsdp_engine_from_plan", "use_remove_padding"),
    "ulysses-with-remove-padding": ({**GPU, "framework": "fsdp", "devices": "0-7", "overrides": [f"{SP}=2"]},
                                    "fsdp_engine_from_plan", None),
    "megatron-without-mbridge": ({**GPU, "devices": "0-7", "overrides": [f"{MEG}use_mbridge=False"]},
                                 "megatron_engine_from_plan", "use_mbridge must be True"),
    "megatron-with-mbridge": ({**GPU, "devices": "0-7"}, "megatron_engine_from_plan", None),
    "resume-path-without-path": ({**GPU, "overrides": ["trainer.resume_mode=resume_path"]},
                                 "load_checkpoint_from_plan", "resume ckpt must be str type"),
    "resume-path-with-path": ({**GPU, "overrides": ["trainer.resume_mode=resume_path",
                                                    "trainer.resume_from_path=/ck/global_step_20"]},
                              "load_checkpoint_from_plan", None),
}


def test_item_3_samples_are_refused_by_plan_and_by_verls_own_code(models, tmp_path):
    if realverl.verl_site("0.9.1") is None:
        pytest.skip("verl 0.9.1 cannot be installed here (no package index)")
    probes = {}
    for name, (flags, probe, failure) in ITEM_3.items():
        prepared = planned(flags, models["Qwen3-8B"])
        found = [f for f in errors(prepared) if f.field in ("override", "overrides", "features")]
        assert len(found) == (1 if failure else 0), [f.line() for f in prepared.findings]
        probes[name] = [probe, {"config_yaml": composed_yaml(prepared, tmp_path, name)}]
    outcomes = run_probes(None, "0.9.1", probes, SCRIPT)
    for name, (_flags, _probe, failure) in ITEM_3.items():
        if failure is None:
            assert outcomes[name] == {"ok": True, "out": "reached"}, (name, outcomes[name])
        else:
            assert not outcomes[name]["ok"] and failure in outcomes[name]["error"], (name, outcomes[name])


def test_with_filter_groups_off_each_step_trains_on_the_generation_batch(models):
    """DAPO with filter_groups off trains on the whole generation batch; the engine's mini-batch iterator
    (tensordict_utils.make_iterator) then asserts it divides by the mini-batch. 20 prompts x 8 over DP 8 is 20
    rows a rank, mini 8 x 8 = 64 is 8 a rank: 20 % 8 != 0."""
    if realverl.verl_site("0.9.1") is None:
        pytest.skip("verl 0.9.1 cannot be installed here (no package index)")
    flags = {**GPU, "framework": "fsdp", "devices": "0-7", "batch_size": 16, "mini_batch_size": 8,
             "filter_groups": False, "dapo_source": "recipe"}  # the recipe trainer's generation batch
    bad = [f for f in errors(planned({**flags, "gen_batch_size": 20}, models["Qwen3-8B"])) if f.field == "mini_batch_size"]
    assert len(bad) == 1 and "generation batch" in bad[0].message
    assert not [f for f in errors(planned({**flags, "gen_batch_size": 24}, models["Qwen3-8B"]))
                if f.field == "mini_batch_size"]
    outcomes = run_probes(None, "0.9.1", {
        "20": ["engine_train_mini_batch", dict(rows_per_dp=20, mini_batch_size=64, dp=8)],
        "24": ["engine_train_mini_batch", dict(rows_per_dp=24, mini_batch_size=64, dp=8)]})
    assert not outcomes["20"]["ok"] and "20 % 8 != 0" in outcomes["20"]["error"], outcomes
    assert outcomes["24"]["ok"], outcomes


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_a_sync_rollout_is_refused_where_rollout_config_removed_it(models, tmp_path, version):
    if realverl.verl_site(version) is None:
        pytest.skip(f"verl {version} cannot be installed here (no package index)")
    sync = planned({**GPU, "verl_version": version, "overrides": ["actor_rollout_ref.rollout.mode=sync"]},
                   models["Qwen3-8B"])
    [found] = errors(sync, "override")
    assert "removed the sync rollout" in found.message and "drop the --override" in found.fix
    default = planned({**GPU, "verl_version": version}, models["Qwen3-8B"])
    outcomes = run_probes(None, version, {
        "sync": ["rollout_dataclass_from_plan", {"config_yaml": composed_yaml(sync, tmp_path, "sync")}],
        "async": ["rollout_dataclass_from_plan", {"config_yaml": composed_yaml(default, tmp_path, "async")}]}, SCRIPT)
    assert not outcomes["sync"]["ok"] and "Rollout mode 'sync' has been removed" in outcomes["sync"]["error"]
    assert outcomes["async"]["ok"], outcomes


def test_a_sync_rollout_is_not_refused_on_06(models):
    flags = {**GPU, "verl_version": "0.6.1", "overrides": ["actor_rollout_ref.rollout.mode=sync"]}
    assert errors(planned(flags, models["Qwen3-8B"]), "override") == []
