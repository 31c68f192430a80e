"""The self-contained Python program that runs verl's own validation where the training will run.

It is sent to `python3 -` (host, `docker exec -i`, or a Ray job) with the run's entry module,
config name and overrides inside it, needs nothing but verl and its own imports, touches no
device and starts no Ray, and prints one line `VERL_DEPLOY_VERIFY {json}` as its last output.
Everything verl prints goes to stderr so that line is easy to find.
"""

from __future__ import annotations

import json

MARKER = "VERL_DEPLOY_VERIFY "

# The program itself: plain Python 3.8+, standard library plus what verl imports. Steps run in order,
# each recorded; a failed step does not stop the independent ones after it (all problems in one pass).
_BODY = r'''
import contextlib, importlib, importlib.util, inspect, json, os, re, sys, traceback

MARKER = "VERL_DEPLOY_VERIFY "
result = {"ok": False, "verl_version": None, "verl_path": None, "python": sys.version.split()[0],
          "entry": PAYLOAD["entry_module"], "config_name": PAYLOAD["config_name"], "run_dir": os.getcwd(),
          "steps": []}


def where(tb):
    """The innermost frame inside verl or a recipe: the file and line whose check failed."""
    found = None
    for frame in traceback.extract_tb(tb):
        name = frame.filename.replace(os.sep, "/")
        for anchor in ("/verl/", "/recipe/"):
            if anchor in name:
                found = name[name.rindex(anchor) + 1:] + ":" + str(frame.lineno)
    return found


def step(name, fn):
    entry = {"step": name, "ok": False}
    try:
        with contextlib.redirect_stdout(sys.stderr):
            value = fn()
        entry["ok"] = True
        if value is not None:
            entry["detail"] = value
    except BaseException as exc:  # verl reports with assert, ValueError, hydra errors, SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        entry["error"] = type(exc).__name__
        entry["message"] = (str(exc).strip() or type(exc).__name__)[:2000]
        entry["where"] = where(exc.__traceback__)
    result["steps"].append(entry)
    return entry["ok"]


def finish():
    result["ok"] = bool(result["steps"]) and all(s["ok"] for s in result["steps"])
    sys.stdout.write("\n" + MARKER + json.dumps(result) + "\n")
    sys.stdout.flush()


if PAYLOAD.get("run_dir"):  # a Ray job starts in its uploaded working_dir: go to the run directory
    if not os.path.isdir(PAYLOAD["run_dir"]):
        result["run_dir_missing"] = PAYLOAD["run_dir"]
        finish()
        sys.exit(0)
    os.chdir(PAYLOAD["run_dir"])
    result["run_dir"] = os.getcwd()
sys.path.insert(0, os.getcwd())  # python -m from the run directory: recipe/ resolves there
try:
    with contextlib.redirect_stdout(sys.stderr):
        import verl
except BaseException as exc:
    result["verl_missing"] = "%s: %s" % (type(exc).__name__, exc)
    finish()
    sys.exit(0)
result["verl_path"] = os.path.dirname(getattr(verl, "__file__", "") or "")
result["verl_version"] = getattr(verl, "__version__", None)
state = {}


def locate_entry():
    spec = importlib.util.find_spec(PAYLOAD["entry_module"])
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("No module named %r under %s" % (PAYLOAD["entry_module"], os.getcwd()))
    with open(spec.origin, encoding="utf-8") as handle:
        source = handle.read()
    match = re.search(r"@hydra\.main\(\s*config_path\s*=\s*[\"']([^\"']+)", source)
    state["config_dir"] = os.path.join(os.path.dirname(spec.origin), match.group(1) if match else "config")
    return spec.origin


def compose():
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.abspath(state["config_dir"]), version_base=None):
        state["config"] = hydra_compose(config_name=PAYLOAD["config_name"], overrides=PAYLOAD["overrides"])
    return state["config_dir"]


def validate():
    from verl.utils.config import validate_config
    from verl.trainer.ppo import utils as ppo_utils
    config = state["config"]
    first = list(inspect.signature(ppo_utils.need_reference_policy).parameters)[0]
    if first == "config":
        use_ref = ppo_utils.need_reference_policy(config)
    else:  # <= 0.7.x take the role->worker mapping: main_ppo adds the reference policy for either KL use
        use_ref = bool(config.algorithm.get("use_kl_in_reward", False) or config.actor_rollout_ref.actor.get("use_kl_loss", False))
    state["use_reference_policy"] = use_ref
    state["use_critic"] = ppo_utils.need_critic(config)
    validate_config(config=config, use_reference_policy=use_ref, use_critic=state["use_critic"])
    return {"use_reference_policy": use_ref, "use_critic": state["use_critic"]}


def build(path):
    def run():
        from omegaconf import OmegaConf
        from verl.utils.config import omega_conf_to_dataclass
        node = OmegaConf.select(state["config"], path)
        built = omega_conf_to_dataclass(node)
        return type(built).__module__ + "." + type(built).__qualname__
    return run


def import_entry():
    importlib.import_module(PAYLOAD["entry_module"])
    return PAYLOAD["entry_module"]


def legacy_fsdp_worker_applies():
    """The legacy FSDP worker trains: 0.6.x-0.7.0 always; 0.7.1 unless use_legacy_worker_impl=disable (main_ppo
    and verl-recipe DAPO; one-step-off has workers of its own)."""
    if "one_step_off" in PAYLOAD["entry_module"] or "fully_async" in PAYLOAD["entry_module"]:
        return False
    config = state["config"]
    if str(config.actor_rollout_ref.actor.get("strategy", "")) not in ("fsdp", "fsdp2"):
        return False
    release = tuple(int(p) for p in re.findall(r"\d+", str(result["verl_version"] or "0"))[:3])
    if release >= (0, 8, 0):
        return False
    if release >= (0, 7, 1):
        return str(config.trainer.get("use_legacy_worker_impl", "auto")) != "disable"
    return True


def legacy_fsdp_worker():
    """verl.workers.fsdp_workers.ActorRolloutRefWorker.__init__, its own code, on a copy of the composed
    config: it multiplies the mini-batch by n, divides it by DP and asserts on the result. The device mesh
    and process group are stand-ins of the launch's device count; nothing touches a device."""
    import ast, copy
    import torch.distributed as dist
    module = importlib.import_module("verl.workers.fsdp_workers")
    with open(module.__file__, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), module.__file__)
    worker = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ActorRolloutRefWorker")
    init = next(n for n in worker.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    init.decorator_list = []
    for arg in init.args.args + init.args.kwonlyargs:
        arg.annotation = None
    config = state["config"]
    world = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)

    class Mesh:
        def size(self, dim=None): return world
        def __getitem__(self, name): return self
        def get_local_rank(self): return 0

    class Base:
        def __init__(self, *args, **kwargs): pass

    namespace = dict(vars(module))
    namespace.update(create_device_mesh=lambda *a, **k: Mesh(), init_device_mesh=lambda *a, **k: Mesh(),
                     FSDPUlyssesShardingManager=lambda *a, **k: None, Worker=Base, DistProfilerExtension=Base,
                     DistProfiler=lambda *a, **k: None)
    exec(compile(ast.Module([init], []), module.__file__, "exec"), namespace)

    class Self:
        rank = 0
        def _register_dispatch_collect_info(self, *args, **kwargs): pass

    saved = dist.is_initialized, dist.get_world_size
    dist.is_initialized, dist.get_world_size = (lambda: True), (lambda *a, **k: world)
    try:
        section = copy.deepcopy(config.actor_rollout_ref)
        role = "actor_rollout_ref" if state.get("use_reference_policy") else "actor_rollout"
        namespace["__init__"](Self(), config=section, role=role)
    finally:
        dist.is_initialized, dist.get_world_size = saved
    return {"world": world, "ppo_mini_batch_size_per_rank": int(section.actor.ppo_mini_batch_size)}


entry_found = step("locate_entry", locate_entry)
if entry_found and step("compose", compose):
    if step("validate_config", validate):
        if legacy_fsdp_worker_applies():
            step("worker:legacy_fsdp_normalisation", legacy_fsdp_worker)
    from omegaconf import OmegaConf
    for path in PAYLOAD["dataclasses"]:
        if path == "critic" and not state.get("use_critic"):
            continue
        node = OmegaConf.select(state["config"], path)
        if node is not None and OmegaConf.is_dict(node) and "_target_" in node:
            step("dataclass:" + path, build(path))
if entry_found:
    step("import_entry", import_entry)
finish()
'''

def build_program(entry_module: str, config_name: str, overrides: list[str], run_dir: str | None = None,
                  sections: tuple[str, ...] = ()) -> str:
    """The program text for one plan: the payload as a JSON literal, then the body. `run_dir`: chdir there first;
    `sections`: the config sections verl builds into dataclasses (the profile's dataclass_sections)."""
    payload = {"entry_module": entry_module, "config_name": config_name, "overrides": list(overrides),
               "dataclasses": list(sections), "run_dir": run_dir}
    return "import json as _json\nPAYLOAD = _json.loads(" + repr(json.dumps(payload)) + ")\n" + _BODY


def parse_output(stdout: str) -> dict | None:
    """The result object from the program's output, or None when it printed none (it crashed or never ran)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None
