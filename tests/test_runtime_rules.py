"""Each runtime assertion: verl's (or Megatron's) own code fails on the input, and `plan` refuses it first.

For every case the same input goes two ways: through verl-deploy's pipeline (the rule must be an
error naming the field, or only a warning where verl runs), and into the real code that asserts at
run time -- verl installed from its wheel (tests/realverl.py), megatron-core 0.13.1 from its wheel --
run on CPU in a subprocess. Functions that live in modules which import vLLM or start Ray are taken
out of the installed verl file with `ast` and run with their own imports (their code, unchanged,
with a stand-in for the device engine / process group). Valid neighbours pass both ways.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import realverl
from conftest import FIXTURES, child_env
from test_compose_releases import launch_parts
from verl_deploy.checks import read_model_facts
from verl_deploy.pipeline import prepare_spec
from verl_deploy.sources import resolve
from verl_deploy.verlconfig import index

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    found = {}
    for name in ("Qwen3-8B", "Qwen3-30B-A3B"):
        (root / name).mkdir()
        shutil.copy(FIXTURES / f"{name}.config.json", root / name / "config.json")
        found[name] = root / name
    return found


def planned(flags: dict, model: Path):
    spec = resolve(flags={**flags, "model_path": str(model)}, environ={})
    return prepare_spec(spec, facts=read_model_facts(str(model)), check_verl=False)


def errors(prepared, field: str | None = None):
    return [f for f in prepared.findings if f.level == "error" and (field is None or f.field == field)]


# -- the real code, in one subprocess per installation --------------------------------------------

PROBE = r'''
import ast, json, os, sys, tempfile, traceback

def module_namespace(path, extra=None):
    """(the parsed file, a namespace holding the file's imports that load here, plus `extra`)."""
    tree = ast.parse(open(path).read(), path)
    ns = {"__name__": "probe"}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module([node], []), path, "exec"), ns)
            except Exception:
                pass
    ns.update(extra or {})
    return tree, ns

def load_function(path, name, cls=None, extra=None):
    """verl's own function `cls.name` from `path`, compiled with the file's imports that load here."""
    tree, ns = module_namespace(path, extra)
    scope = tree.body
    if cls:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    fn = next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    exec(compile(ast.Module([fn], []), path, "exec"), ns)
    return ns[name]

class Reached(Exception):
    """The code got past every check up to the device work."""

def verl_file(rel):
    import verl
    return os.path.join(os.path.dirname(verl.__file__), rel)

def engine_train_mini_batch(rows_per_dp, mini_batch_size, dp):
    # verl/workers/engine_workers.py TrainingWorker.train_mini_batch with a device-less engine
    import torch
    from verl.utils import tensordict_utils as tu
    class Engine:
        def get_data_parallel_size(self): return dp
        def get_data_parallel_rank(self): return 0
        def train_mode(self, **kw): raise Reached()
    class Self: engine = Engine()
    fn = load_function(verl_file("workers/engine_workers.py"), "train_mini_batch", "TrainingWorker")
    data = tu.get_tensordict({"input_ids": torch.zeros(rows_per_dp, 4, dtype=torch.long)},
                             non_tensor_dict={"mini_batch_size": mini_batch_size, "epochs": 1, "seed": 1})
    fn(Self(), data)

def legacy_split(rows_per_dp, normalized_mini):
    # legacy FSDP actor (dp_actor.update_policy): data.split(ppo_mini_batch_size)
    import torch
    from verl.protocol import DataProto
    data = DataProto.from_dict({"input_ids": torch.zeros(rows_per_dp, 4)})
    return [len(d) for d in data.split(normalized_mini)]

def legacy_megatron_iterator(total_rows, dp, normalized_mini):
    # dispatch chunks the batch over DP, then megatron_actor.make_minibatch_iterator -> DataProto.make_iterator
    import torch
    from verl.protocol import DataProto
    data = DataProto.from_dict({"input_ids": torch.zeros(total_rows, 4)}).chunk(dp)[0]
    data.make_iterator(mini_batch_size=normalized_mini, epochs=1)

def validate(config_yaml):
    from omegaconf import OmegaConf
    from verl.utils.config import validate_config
    validate_config(config=OmegaConf.load(config_yaml), use_reference_policy=False, use_critic=False)

def vllm_context(max_model_len, max_position_embeddings, enable_chunked_prefill=False):
    # verl/workers/rollout/vllm_rollout/vllm_async_server.py vLLMHttpServer._validate_configs
    class HF: pass
    hf = HF(); hf.max_position_embeddings = max_position_embeddings
    class C: pass
    self = C(); self.config = C(); self.config.max_model_len = max_model_len
    # what the launch sends: chunked prefill off, max_num_batched_tokens = prompt + response
    self.config.enable_chunked_prefill = enable_chunked_prefill
    self.config.max_num_batched_tokens = max_model_len
    self.model_config = C(); self.model_config.hf_config = hf
    get_max = load_function(verl_file("workers/rollout/utils.py"), "get_max_position_embeddings")
    fn = load_function(verl_file("workers/rollout/vllm_rollout/vllm_async_server.py"), "_validate_configs",
                       "vLLMHttpServer", {"get_max_position_embeddings": get_max})
    fn(self)

def vllm_context_init(max_model_len, max_position_embeddings):
    # 0.7.1: the same check sits in vLLMHttpServer.__init__ (vllm_async_server.py:117), run up to it
    class HF: pass
    hf = HF(); hf.max_position_embeddings = max_position_embeddings
    class C: pass
    config = C(); config.max_model_len = max_model_len
    model_config = C(); model_config.hf_config = hf
    class PastTheCheck:  # the first thing __init__ compares after the check
        def __eq__(self, other): raise Reached()
        __ne__ = __eq__
    get_max = load_function(verl_file("workers/rollout/utils.py"), "get_max_position_embeddings")
    fn = load_function(verl_file("workers/rollout/vllm_rollout/vllm_async_server.py"), "__init__", "vLLMHttpServer",
                       {"get_max_position_embeddings": get_max, "get_visible_devices_keyword": lambda: "PROBE_DEVICES",
                        "omega_conf_to_dataclass": lambda value, dataclass_type=None: value})
    fn(C(), config=config, model_config=model_config, rollout_mode=PastTheCheck(), workers=[], replica_rank=0,
       node_rank=0, gpus_per_node=1, nnodes=1, cuda_visible_devices="0")

def token_budget(max_token_len, seq_len):
    import torch
    from tensordict import TensorDict
    from verl.utils.seqlen_balancing import rearrange_micro_batches
    batch = TensorDict({"input_ids": torch.ones(4, seq_len, dtype=torch.long),
                        "attention_mask": torch.ones(4, seq_len, dtype=torch.long)}, batch_size=[4])
    rearrange_micro_batches(batch, max_token_len=max_token_len)

def mcore_transformer_config(**kw):
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig
    if kw.get("pipeline_model_parallel_size", 1) > 1:
        kw["pipeline_dtype"] = torch.bfloat16
    return TransformerConfig(**kw)

def mcore_layers(**kw):
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    try:
        get_num_layers_to_build(mcore_transformer_config(**kw))
    except AssertionError as exc:
        if "divisible by pipeline_model_parallel_size" in str(exc):
            raise
        raise Reached()  # past the layer split, at the process-group lookup (no devices here)
    except Exception:
        raise Reached()

def mcore_moe(ep, **kw):
    import torch, torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1,
                                init_method="file://" + os.path.join(tempfile.mkdtemp(), "pg"))
    from megatron.core.transformer.moe.moe_layer import BaseMoELayer
    class Group:
        def size(self): return ep
        def rank(self): return 0
    class Groups:
        ep = Group(); tp = Group()
    class Layer(BaseMoELayer):
        def forward(self, hidden_states): return hidden_states
    Layer(mcore_transformer_config(expert_model_parallel_size=ep, add_bias_linear=False, **kw), layer_number=1,
          model_comm_pgs=Groups())

results = {}
for key, (probe, kwargs) in json.load(open(sys.argv[1])).items():
    try:
        out = globals()[probe](**kwargs)
        results[key] = {"ok": True, "out": out if isinstance(out, (list, int, str, type(None))) else repr(out)[:200]}
    except Reached:
        results[key] = {"ok": True, "out": "reached"}
    except BaseException as exc:
        results[key] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
print("PROBE-RESULTS " + json.dumps(results))
'''


def run_probes(python_path: Path | None, version: str | None, probes: dict, script: str = PROBE) -> dict:
    """All probes for one installation in one subprocess (importing verl takes seconds). SCRIPT: the probe
    program (PROBE, or PROBE with more probe functions before its loop)."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "probes.json").write_text(json.dumps(probes))
        (Path(tmp) / "probe.py").write_text(script)
        code = f"import sys; sys.argv = ['probe', {str(Path(tmp) / 'probes.json')!r}]; " \
               f"exec(open({str(Path(tmp) / 'probe.py')!r}).read())"
        if version is not None:
            result = realverl.run_with_verl(version, code)
        else:
            env = child_env({**os.environ, "PYTHONPATH": str(python_path)})
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                    timeout=600, cwd=tmp)
    line = next((l for l in result.stdout.splitlines() if l.startswith("PROBE-RESULTS ")), None)
    assert line, f"probe run failed: {result.stderr[-2000:]}"
    return json.loads(line.split(" ", 1)[1])


def composed_yaml(prepared, directory: Path, name: str) -> str:
    """The config verl's entry point would build from this launch (Hydra, the release's real files)."""
    cfg = index.compose(*launch_parts(prepared.plan))
    path = directory / f"{name}.yaml"
    path.write_text(OmegaConf.to_yaml(cfg))
    return str(path)


MCORE = "megatron-core==0.13.1"


def mcore_site() -> Path | None:
    """megatron-core 0.13.1 (the Megatron verl's images ship) installed --no-deps beside the verl sites."""
    site = realverl.cache_root() / "megatron-core-0.13.1"
    if (site / "megatron" / "core").is_dir():
        return site
    staging = Path(tempfile.mkdtemp(prefix=".mcore-", dir=realverl.cache_root()))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                           "--target", str(staging), MCORE], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        return None
    shutil.rmtree(site, ignore_errors=True)
    os.replace(staging, site)
    return site


Q8 = dict(num_layers=36, hidden_size=4096, num_attention_heads=32, num_query_groups=8)
Q30 = dict(num_layers=48, hidden_size=2048, num_attention_heads=32, num_query_groups=4, num_moe_experts=128,
           moe_router_topk=8)
EP = "actor_rollout_ref.actor.megatron.expert_model_parallel_size"
BUDGET = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
GPU8 = {"device": "gpu", "devices": "0-7"}

# id: (flags, model, plan expectation, where the real code runs, probe, kwargs, real expectation)
#   plan expectation: ("error", field) | ("ok", rule-field-that-must-not-be-an-error)
#   real expectation: None (runs) | a substring of the failure
CASES = {
    # train_batch_size % ppo_mini_batch_size: engine workers assert (0.8+), legacy FSDP runs uneven
    "engine-batch-not-multiple": ({"verl_version": "0.9.1", "dapo_source": "recipe", "framework": "fsdp", **GPU8,
                                   "batch_size": 48, "mini_batch_size": 32}, "Qwen3-8B", ("error", "mini_batch_size"),
                                  "0.9.1", "engine_train_mini_batch", dict(rows_per_dp=48, mini_batch_size=256, dp=8),
                                  "48 % 32 != 0"),
    "engine-batch-multiple": ({"verl_version": "0.9.1", "dapo_source": "recipe", "framework": "fsdp", **GPU8,
                               "batch_size": 64, "mini_batch_size": 32}, "Qwen3-8B", ("ok", "mini_batch_size"),
                              "0.9.1", "engine_train_mini_batch", dict(rows_per_dp=64, mini_batch_size=256, dp=8), None),
    "legacy-fsdp-uneven-runs": ({"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "batch_size": 48,
                                 "mini_batch_size": 32}, "Qwen3-8B", ("ok", "mini_batch_size"),
                                "0.7.0", "legacy_split", dict(rows_per_dp=48, normalized_mini=32), None),
    # mini x n over DP: engine workers assert it divides
    "engine-mini-not-dp-multiple": ({"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "batch_size": 12,
                                     "mini_batch_size": 3, "n_resp_per_prompt": 2}, "Qwen3-8B",
                                    ("error", "mini_batch_size"), "0.9.1", "engine_train_mini_batch",
                                    dict(rows_per_dp=3, mini_batch_size=6, dp=8), "mini_batch_size=6"),
    # 0.7.0 Megatron: mini x n // DP (floor), then the per-rank iterator asserts or divides by zero
    "megatron-070-floor-assert": ({"verl_version": "0.7.0", "framework": "megatron", **GPU8, "train_tp": 1,
                                   "train_pp": 1, "batch_size": 10, "mini_batch_size": 5, "n_resp_per_prompt": 4},
                                  "Qwen3-8B", ("error", "mini_batch_size"), "0.7.0", "legacy_megatron_iterator",
                                  dict(total_rows=40, dp=8, normalized_mini=20 // 8), "5 % 2 != 0"),
    "megatron-070-floor-zero": ({"verl_version": "0.7.0", "framework": "megatron", **GPU8, "train_tp": 1,
                                 "train_pp": 1, "batch_size": 8, "mini_batch_size": 1, "n_resp_per_prompt": 4},
                                "Qwen3-8B", ("error", "mini_batch_size"), "0.7.0", "legacy_megatron_iterator",
                                dict(total_rows=32, dp=8, normalized_mini=4 // 8), "ZeroDivisionError"),
    "megatron-070-floor-fine": ({"verl_version": "0.7.0", "framework": "megatron", **GPU8, "train_tp": 1,
                                 "train_pp": 1, "batch_size": 16, "mini_batch_size": 8, "n_resp_per_prompt": 4},
                                "Qwen3-8B", ("ok", "mini_batch_size"), "0.7.0", "legacy_megatron_iterator",
                                dict(total_rows=64, dp=8, normalized_mini=32 // 8), None),
    # rollout.max_model_len above the model's max_position_embeddings (0.7.1+)
    "context-over-model": ({"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "max_response_length": 40960},
                           "Qwen3-8B", ("error", "max_response_length"), "0.9.1", "vllm_context",
                           dict(max_model_len=43008, max_position_embeddings=40960), "should be less than or equal"),
    "context-fits-model": ({"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "max_response_length": 38912},
                           "Qwen3-8B", ("ok", "max_response_length"), "0.9.1", "vllm_context",
                           dict(max_model_len=40960, max_position_embeddings=40960), None),
    # dynamic batching: the token budget must hold the longest sequence
    "token-budget-short": ({"verl_version": "0.9.1", "framework": "fsdp", **GPU8,
                            "overrides": [f"{BUDGET}=4096"]}, "Qwen3-8B", ("error", "override"), "0.9.1",
                           "token_budget", dict(max_token_len=4096, seq_len=10240), "max_token_len must be greater"),
    "token-budget-fits": ({"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "overrides": [f"{BUDGET}=10240"]},
                          "Qwen3-8B", ("ok", "override"), "0.9.1", "token_budget",
                          dict(max_token_len=10240, seq_len=10240), None),
    # Megatron TP vs attention heads and KV groups, PP vs layers, EP vs experts (megatron-core 0.13.1)
    "tp-vs-heads": ({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-5",
                     "train_tp": 3, "train_pp": 2}, "Qwen3-8B", ("error", "train_tp"), "mcore",
                    "mcore_transformer_config", dict(**Q8, tensor_model_parallel_size=3, pipeline_model_parallel_size=2),
                    "num_attention_heads (32) must be a multiple of tensor_model_parallel_size (3)"),
    "tp-divides-heads": ({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-5",
                          "train_tp": 2, "train_pp": 3}, "Qwen3-8B", ("ok", "train_tp"), "mcore",
                         "mcore_transformer_config", dict(**Q8, tensor_model_parallel_size=2,
                                                          pipeline_model_parallel_size=3), None),
    "tp-vs-kv-groups": ({"verl_version": "0.9.1", "framework": "megatron", **GPU8, "train_tp": 8, "train_pp": 1},
                        "Qwen3-30B-A3B", ("error", "train_tp"), "mcore", "mcore_transformer_config",
                        dict(**Q30, tensor_model_parallel_size=8),
                        "num_query_groups (4) must be a multiple of tensor_model_parallel_size (8)"),
    "pp-vs-layers": ({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-4",
                      "train_tp": 1, "train_pp": 5}, "Qwen3-8B", ("error", "train_pp"), "mcore", "mcore_layers",
                     dict(**Q8, tensor_model_parallel_size=1, pipeline_model_parallel_size=5),
                     "num_layers should be divisible by pipeline_model_parallel_size"),
    "pp-divides-layers": ({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-3",
                           "train_tp": 1, "train_pp": 4}, "Qwen3-8B", ("ok", "train_pp"), "mcore", "mcore_layers",
                          dict(**Q8, tensor_model_parallel_size=1, pipeline_model_parallel_size=4), None),
    "ep-vs-experts": ({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-5",
                       "train_tp": 2, "train_pp": 1, "overrides": [f"{EP}=3"]}, "Qwen3-30B-A3B",
                      ("error", "override"), "mcore", "mcore_moe", dict(ep=3, **Q30), "AssertionError"),
    "ep-divides-experts": ({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-7",
                            "train_tp": 2, "train_pp": 1, "overrides": [f"{EP}=2"]}, "Qwen3-30B-A3B",
                           ("ok", "override"), "mcore", "mcore_moe", dict(ep=2, **Q30), None),
}


def _on(version: str, case: str) -> tuple:
    """The same case against another release: the plan for that release, that release's own code."""
    flags, model, expect, _where, probe, kwargs, failure = CASES[case]
    if not version.startswith("0.9"):
        flags = {k: v for k, v in flags.items() if k != "dapo_source"}  # the recipe is the only DAPO below 0.9
    if probe == "vllm_context" and version == "0.7.1":
        probe, kwargs = "vllm_context_init", {k: kwargs[k] for k in ("max_model_len", "max_position_embeddings")}
    return {**flags, "verl_version": version}, model, expect, version, probe, kwargs, failure


# each rule on the other releases where it applies (one probe process per release)
CASES.update({f"{case}@{version}": _on(version, case) for version, cases in {
    "0.6.0": ("legacy-fsdp-uneven-runs", "megatron-070-floor-assert", "megatron-070-floor-zero",
              "megatron-070-floor-fine", "token-budget-short", "token-budget-fits"),
    "0.6.1": ("legacy-fsdp-uneven-runs", "megatron-070-floor-assert", "megatron-070-floor-fine"),
    "0.7.1": ("legacy-fsdp-uneven-runs", "megatron-070-floor-assert", "megatron-070-floor-zero",
              "megatron-070-floor-fine", "context-over-model", "context-fits-model"),
    "0.8.0": ("engine-batch-not-multiple", "engine-batch-multiple", "engine-mini-not-dp-multiple",
              "context-over-model", "context-fits-model", "token-budget-short", "token-budget-fits"),
    "0.9.0": ("engine-batch-not-multiple", "engine-mini-not-dp-multiple", "context-over-model"),
}.items() for case in cases})


_RESULTS: dict[str, dict] = {}


def real_results(where: str) -> dict:
    """Run every probe of one installation once (a verl release, or megatron-core)."""
    if where not in _RESULTS:
        probes = {case: [c[4], c[5]] for case, c in CASES.items() if c[3] == where}
        if where == "mcore":
            site = mcore_site()
            if site is None:
                pytest.skip(f"{MCORE} cannot be installed here (no package index)")
            _RESULTS[where] = run_probes(site, None, probes)
        else:
            if realverl.verl_site(where) is None:
                pytest.skip(f"verl {where} cannot be installed here (no package index)")
            _RESULTS[where] = run_probes(None, where, probes)
    return _RESULTS[where]


@pytest.mark.parametrize("case", list(CASES))
def test_plan_refuses_what_the_real_code_refuses(case, models):
    flags, model, (expect, field), where, _probe, _kwargs, real_failure = CASES[case]
    prepared = planned(flags, models[model])
    found = errors(prepared, field)
    if expect == "error":
        assert len(found) == 1, [f.line() for f in prepared.findings]
        assert found[0].fix and "\n" not in found[0].line()
    else:
        assert found == [], [f.line() for f in found]

    outcome = real_results(where)[case]
    if real_failure is None:
        assert outcome["ok"], outcome
    else:
        assert not outcome["ok"] and real_failure in outcome["error"], outcome


def test_temperature_zero_is_refused_where_validate_config_runs(models, tmp_path):
    """validate_config (verl/utils/config.py) asserts temperature > 0 with validation sampling on."""
    if realverl.verl_site("0.9.1") is None or realverl.verl_site("0.7.0") is None:
        pytest.skip("verl cannot be installed here (no package index)")
    cases = {
        "091-dapo-t0": ({"verl_version": "0.9.1", "temperature": 0}, "error"),
        "091-dapo-t1": ({"verl_version": "0.9.1", "temperature": 1.0}, None),
        "070-osop-t0": ({"verl_version": "0.7.0", "mode": "one-step-off", "framework": "fsdp", **GPU8,
                         "temperature": 0}, "error"),
        "070-osop-t1": ({"verl_version": "0.7.0", "mode": "one-step-off", "framework": "fsdp", **GPU8}, None),
    }
    probes: dict[str, dict] = {"0.9.1": {}, "0.7.0": {}}
    for name, (flags, expect) in cases.items():
        prepared = planned(flags, models["Qwen3-8B"])
        found = errors(prepared, "temperature")
        assert len(found) == (1 if expect else 0), [f.line() for f in prepared.findings]
        probes[flags["verl_version"]][name] = ["validate", {"config_yaml": composed_yaml(prepared, tmp_path, name)}]
    for version, batch in probes.items():
        for name, outcome in run_probes(None, version, batch).items():
            if cases[name][1]:
                assert not outcome["ok"] and "temperature should be greater than 0" in outcome["error"], outcome
            else:
                assert outcome["ok"], outcome


def test_temperature_zero_only_warns_where_verl_runs(models):
    """0.6.x/0.7.0 DAPO (recipe/dapo/main_dapo.py) never calls validate_config: vLLM samples greedily."""
    prepared = planned({"verl_version": "0.7.0", "temperature": 0}, models["Qwen3-8B"])
    assert errors(prepared, "temperature") == []
    assert any(f.field == "temperature" and f.level == "warning" for f in prepared.findings)


def test_070_ignores_max_model_len_so_it_is_not_sent_and_not_refused(models):
    prepared = planned({"verl_version": "0.7.0", "framework": "fsdp", **GPU8, "max_response_length": 40960},
                       models["Qwen3-8B"])
    assert errors(prepared, "max_response_length") == []
    assert not any(o.key.endswith("rollout.max_model_len") for o in prepared.plan.overrides)


def test_rollout_tp_must_divide_heads(models):
    """vLLM refuses a TP that does not divide the attention heads. vLLM itself cannot run here (no CPU wheel
    of the versions verl pins), so only the plan side is tested."""
    bad = planned({"verl_version": "0.9.1", "framework": "fsdp", "device": "gpu", "devices": "0-5", "gen_tp": 3,
                   "allow_tp_mismatch": True}, models["Qwen3-8B"])
    found = errors(bad, "gen_tp")
    assert len(found) == 1 and "32 attention heads" in found[0].message
    good = planned({"verl_version": "0.9.1", "framework": "fsdp", "device": "gpu", "devices": "0-5", "gen_tp": 2,
                    "allow_tp_mismatch": True}, models["Qwen3-8B"])
    assert errors(good, "gen_tp") == []


def test_unknown_model_shape_checks_nothing_it_cannot_know(tmp_path):
    """Without a readable config.json the model rules stay silent (the path may be a container path)."""
    prepared = planned({"verl_version": "0.9.1", "framework": "megatron", "device": "gpu", "devices": "0-5",
                        "train_tp": 3, "train_pp": 2}, tmp_path / "absent")
    assert errors(prepared, "train_tp") == [] and errors(prepared, "train_pp") == []


def test_06_sync_rollout_needs_the_sequence_inside_the_models_context(models, tmp_path):
    """0.6.x rolls out with vllm_rollout_spmd (mode sync), which asserts prompt + response <= the model's
    max_position_embeddings (x rope factor). That module imports vLLM, so only the plan side runs here."""
    bad = planned({"verl_version": "0.6.1", "max_response_length": 40960}, models["Qwen3-8B"])
    assert [f.field for f in errors(bad, "max_response_length")] == ["max_response_length"]
    assert errors(planned({"verl_version": "0.6.1", "max_response_length": 38912}, models["Qwen3-8B"]),
                  "max_response_length") == []
    config = json.loads((FIXTURES / "Qwen3-8B.config.json").read_text())
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(config))  # YaRN x4: 163840 positions
    assert errors(planned({"verl_version": "0.6.1", "max_response_length": 40960}, tmp_path),
                  "max_response_length") == []


@pytest.mark.parametrize("version,mode,level", [
    ("0.6.0", "dapo", "warning"), ("0.6.1", "dapo", "warning"), ("0.7.0", "dapo", "warning"),
    ("0.7.0", "one-step-off", "warning"), ("0.7.1", "dapo", "warning"), ("0.7.1", "one-step-off", "error"),
    ("0.8.0", "dapo", "error"), ("0.9.0", "one-step-off", "error"), ("0.9.1", "dapo", "error"),
    ("0.9.1", "dapo-core", "info"),  # the V1 trainer pads the batch to a multiple of the mini-batch instead
])
def test_batch_not_a_multiple_of_mini_batch_per_release(models, version, mode, level):
    """Legacy FSDP workers (0.6.x, 0.7.0, 0.7.1 DAPO: use_legacy_worker_impl=auto) split unevenly and run;
    the engine workers (0.7.1 one-step-off, 0.8.0+) assert (both real paths run in the cases above)."""
    source = {"dapo_source": "core" if mode == "dapo-core" else "recipe"} if version.startswith("0.9") and \
        mode.startswith("dapo") else {}
    prepared = planned({"verl_version": version, "mode": mode.replace("-core", ""), "framework": "fsdp", **GPU8,
                        "batch_size": 48, "mini_batch_size": 32, **source}, models["Qwen3-8B"])
    found = [f for f in prepared.findings if f.field == "mini_batch_size" and "not a multiple" in f.message]
    assert [f.level for f in found] == [level]


def test_the_issue_command_fails_in_a_second_with_one_line_and_writes_nothing(tmp_path, models):
    """The issue's reproduction: `generate` refuses what verl 0.9.1's engine workers would assert."""
    from conftest import run_cli

    out = tmp_path / "out"
    result = run_cli("generate", "--verl-version", "0.9.1", "--dapo-source", "recipe", "--framework", "fsdp",
                     "--device", "gpu", "--devices",
                     "0-7", "--batch-size", "48", "--mini-batch-size", "32", "--model-path", str(models["Qwen3-8B"]),
                     "--output-dir", str(out))
    text = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in text
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "mini_batch_size" in lines[0] and "fix:" in lines[0]
    assert not out.exists()


def test_rollout_tp_must_split_or_replicate_the_kv_heads(tmp_path):
    config = json.loads((FIXTURES / "Qwen3-8B.config.json").read_text())
    config.update(num_attention_heads=24, num_key_value_heads=6)
    (tmp_path / "config.json").write_text(json.dumps(config))
    flags = {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "allow_tp_mismatch": True}
    found = errors(planned({**flags, "gen_tp": 4}, tmp_path), "gen_tp")
    assert len(found) == 1 and "6 KV heads" in found[0].message
    assert errors(planned({**flags, "gen_tp": 2}, tmp_path), "gen_tp") == []


V1_PAD = r'''
def v1_padded_train(prompts, n, mini, dp):
    # verl 0.9's V1 trainer: _balance_batch pads the step to a multiple of _get_required_batch_multiple(dp)
    # (padding_utils.upsample_batch_to_divisible_size: remainder = len % multiple), then the engine trains it
    from omegaconf import OmegaConf
    multiple_of = load_function(verl_file("trainer/ppo/v1/trainer_base.py"), "_get_required_batch_multiple",
                                "PPOTrainer", {"math": __import__("math")})
    class Trainer: pass
    trainer = Trainer(); trainer.use_critic = False; trainer.global_steps = 1
    trainer.config = OmegaConf.create({"trainer": {"critic_warmup": 0}, "actor_rollout_ref": {
        "actor": {"ppo_mini_batch_size": mini}, "rollout": {"n": n}}})
    multiple = multiple_of(trainer, dp)
    rows = prompts * n
    padded = rows + (multiple - rows % multiple) % multiple
    engine_train_mini_batch(rows_per_dp=padded // dp, mini_batch_size=mini * n, dp=dp)
'''


def test_the_v1_trainer_pads_a_batch_that_is_not_a_multiple_of_the_mini_batch(models):
    """verl 0.9.1's V1 trainer (DAPO from verl's core, GRPO) pads 48 x 8 rows up to a multiple of lcm(DP 8, 32 x 8)
    with no-op samples and trains; the recipe trainer on the same numbers hands 48 rows to the engine, which asserts.
    plan says so (info) on V1 and refuses on the recipe."""
    if realverl.verl_site("0.9.1") is None:
        pytest.skip("verl 0.9.1 cannot be installed here (no package index)")
    script = PROBE.replace("\nresults = {}\n", V1_PAD + "\nresults = {}\n")
    outcomes = run_probes(None, "0.9.1", {"v1": ["v1_padded_train", dict(prompts=48, n=8, mini=32, dp=8)],
                                          "recipe": ["engine_train_mini_batch",
                                                     dict(rows_per_dp=48, mini_batch_size=256, dp=8)]}, script)
    assert outcomes["v1"] == {"ok": True, "out": "reached"}, outcomes
    assert not outcomes["recipe"]["ok"] and "48 % 32 != 0" in outcomes["recipe"]["error"], outcomes
    flags = {"verl_version": "0.9.1", "framework": "fsdp", **GPU8, "batch_size": 48, "mini_batch_size": 32}
    core = planned(flags, models["Qwen3-8B"])
    assert core.plan.entry_module == "verl.trainer.main_ppo" and errors(core, "mini_batch_size") == []
    assert any("pads each step with 128 no-op samples" in f.message for f in core.findings if f.level == "info")
    assert len(errors(planned({**flags, "dapo_source": "recipe"}, models["Qwen3-8B"]), "mini_batch_size")) == 1
