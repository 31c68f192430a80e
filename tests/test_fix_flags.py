"""A refusal names a fix that works: every `--flag` a finding's fix names is a flag of the command that was
run (or of the `verl-deploy COMMAND` the fix names). Each field at an out-of-range value through its flag, its
environment variables and the config file, and a broad set of plans the rules refuse or warn about."""

from __future__ import annotations

import json
import re
import typing

import pytest
import typer
import yaml
from conftest import run_cli

from verl_deploy.pipeline import prepare
from verl_deploy.cli import app
from verl_deploy.names import PATH_MAX
from verl_deploy.spec import DECLARED, RunSpec, field_names

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
CLAUSE_END = re.compile(r"[()]|\. ")  # a command named before one of these no longer owns what follows


def command_flags() -> dict[str, set[str]]:
    """command -> its flags (each command loaded as the lazy group loads it when it runs)."""
    root = typer.main.get_command(app)
    ctx = type(root).context_class(root)
    flags: dict[str, set[str]] = {}
    for name in root.list_commands(ctx):
        sub = root.get_command(ctx, name)
        names = flags.setdefault(name, {"--help"})
        for param in sub.params:
            names.update(o.split("/")[0] for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
        sub_ctx = type(sub).context_class(sub, parent=ctx)
        for child in ([sub.get_command(sub_ctx, n) for n in sub.list_commands(sub_ctx)]
                      if hasattr(sub, "list_commands") else []):
            for param in child.params:
                names.update(o.split("/")[0] for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
    return flags


FLAGS = command_flags()


def owner_of(command: str, before: str) -> str:
    """The command a flag belongs to: the last command the fix names before it in the same clause (`verl-deploy
    check --search-root`, `launch --no-estimate`), or the command the clause starts with ("launch adds ...;
    --no-estimate to not"), else the command that was run."""
    clause = CLAUSE_END.split(before)[-1]
    named = [word for word in re.findall(r"(?:verl-deploy |`)([a-z][a-z-]*)", clause) if word in FLAGS]
    first = re.match(r"\s*([a-z][a-z-]*)", clause)
    if not named and first and first.group(1) in FLAGS:
        named = [first.group(1)]
    return named[-1] if named else command


def flags_that_do_not_exist(command: str, fix: str) -> list[str]:
    """The --flags of `fix` that are not flags of the command that owns them (owner_of)."""
    missing = []
    for match in FLAG.finditer(fix):
        owner = owner_of(command, fix[:match.start()])
        if match.group() not in FLAGS[owner]:
            missing.append(f"{match.group()} (of `{owner}`)")
    return missing


def findings_of(result) -> list[dict]:
    """The findings of a `--json` run: the plan's, or the refusal's."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    document = json.loads(result.stdout)
    return document.get("findings", [])


def bad_fixes(command: str, result) -> list[str]:
    return [f"{finding['field']}: {finding['fix']!r} names {missing}" for finding in findings_of(result)
            if (missing := flags_that_do_not_exist(command, finding.get("fix") or ""))]


# -- each field at a value it refuses --------------------------------------------------------------------------------

def _number_out_of_range(info) -> object:
    """Below the field's lower bound, else above its upper bound, else not a number."""
    integer = int in typing.get_args(info.annotation) or info.annotation is int
    for limit in info.metadata:
        if getattr(limit, "ge", None) is not None:
            return limit.ge - (1 if integer else 0.5)
        if getattr(limit, "gt", None) is not None:
            return limit.gt
    for limit in info.metadata:
        if getattr(limit, "le", None) is not None:
            return limit.le + 1
    return "not-a-number"


SPECIFIC: dict[str, object] = {
    "devices": "0-99", "nodes": "bad host!", "mounts": "relative:path", "features": "no_such_feature",
    "logger": "no_such_tracker", "overrides": "no_such.key=${oc.env:SWANLAB_API_KEY}", "mask": " ",
    "oom_features": {"not": "a list"}, "estimate_features": {"not": "a list"}, "swanlab_api_key": "a key with spaces",
    "verl_version": "not-a-version", "master_addr": "bad host!", "container": "bad name!", "image": "Bad Image!",
    "swanlab_host": "not a url", "http_proxy": "not a url", "https_proxy": "not a url", "socket_ifname": "bad if!",
    "experiment_name": "../outside", "project_name": "../outside",
}


def bad_value(name: str) -> object:
    info = RunSpec.model_fields[name]
    if name in SPECIFIC:
        return SPECIFIC[name]
    args = typing.get_args(info.annotation)
    literal = next((a for a in (info.annotation, *args) if typing.get_origin(a) is typing.Literal), None)
    if literal is not None:
        return "not-one-of-them"
    if info.annotation is bool or bool in args:
        return "maybe"
    if {int, float} & {info.annotation, *args}:
        return _number_out_of_range(info)
    return "x" * (2 * PATH_MAX + 1)  # every text is bounded


def isolated(tmp_path) -> dict:
    return {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config")}


FLAGGED = [name for name in field_names() if DECLARED[name].flags
           and not (RunSpec.model_fields[name].annotation is bool and not DECLARED[name].yes_no)]  # a switch: on/off
WITH_ENV = [(name, variable) for name in field_names() for variable in DECLARED[name].env]


@pytest.mark.parametrize("name", FLAGGED)
def test_a_refused_flag_value_names_only_flags_that_exist(tmp_path, name):
    result = run_cli("plan", "--json", DECLARED[name].flag, str(bad_value(name)), env=isolated(tmp_path))
    assert result.returncode != 0, f"{name}={bad_value(name)!r} was accepted"
    assert bad_fixes("plan", result) == []


@pytest.mark.parametrize("name, variable", WITH_ENV)
def test_a_refused_environment_value_names_only_flags_that_exist(tmp_path, name, variable):
    result = run_cli("plan", "--json", env={**isolated(tmp_path), variable: str(bad_value(name))})
    assert result.returncode != 0, f"{variable}={bad_value(name)!r} was accepted"
    assert bad_fixes("plan", result) == []


@pytest.mark.parametrize("name", [n for n in field_names() if n != "swanlab_api_key"])  # never read from a file
def test_a_refused_config_file_value_names_only_flags_that_exist(tmp_path, name):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({name: bad_value(name)}))
    env = {**isolated(tmp_path), **({"RAY_AUTH_MODE": ""} if name == "ray_auth" else {})}  # the environment wins
    result = run_cli("plan", "--json", "--config", str(config), env=env)
    assert result.returncode != 0, f"{name}: {bad_value(name)!r} in a config file was accepted"
    assert bad_fixes("plan", result) == []
    if not DECLARED[name].flags:  # a field without a flag is fixed in the file, not with a made-up flag
        fixes = " ".join(f["fix"] for f in findings_of(result) if f["field"] == name)
        assert "--" + name.replace("_", "-") not in fixes and name in fixes, fixes


def test_a_field_without_a_flag_is_fixed_in_the_config_file():
    from verl_deploy.sources import where

    assert where("default", "prompt_key") == ("set `prompt_key: VALUE` in a config file (its `# -- paths` section) "
                                              "passed with --config FILE")
    assert where("default", "train_steps") == "set --train-steps"
    assert where("flag", "staleness_threshold").startswith("set `staleness_threshold: VALUE` in a config file")


# -- plans the rules refuse or warn about ----------------------------------------------------------------------------

V091 = ["--verl-version", "0.9.1"]
RULE_TRIGGERS = [
    ["--train-tp", "3"], ["--train-tp", "16"], ["--gen-tp", "3"], ["--gen-tp", "2"], ["--train-pp", "3"],
    ["--train-cp", "3"], ["--devices", "0-5"], ["--batch-size", "30", "--mini-batch-size", "8"],
    ["--batch-size", "32", "--gen-batch-size", "8", "--max-num-gen-batches", "2"],
    ["--batch-size", "4", "--gen-batch-size", "6", "--n-resp-per-prompt", "3"],
    ["--mode", "separate-async"], ["--mode", "colocate-async"], ["--dapo-source", "core"],
    ["--dapo-source", "recipe", "--mode", "one-step-off", *V091], ["--loss-agg-mode", "token-sum"],
    ["--mode", "fully-async", "--batch-size", "30", "--mini-batch-size", "8", *V091],
    ["--mode", "fully-async", "--gen-batch-size", "64", *V091],
    ["--mode", "separate-async", "--parameter-sync-step", "3", *V091],
    ["--mode", "separate-async", "--batch-size", "32", "--mini-batch-size", "8", "--parameter-sync-step", "2", *V091],
    ["--warmup-batches", "2"], ["--max-off-policy", "4"], ["--parameter-sync-step", "2"],
    ["--mode", "one-step-off", "--trainer-gpus", "6", "--rollout-gpus", "6"],
    ["--mode", "one-step-off", "--trainer-gpus", "3", "--rollout-gpus", "5"],
    ["--framework", "fsdp", "--device", "gpu", "--train-pp", "2", *V091],
    ["--framework", "fsdp", "--train-cp", "2"], ["--rollout-engine", "sglang"],
    ["--mask", "11"], ["--mask", "1111111"], ["--features", "offload,-offload"], ["--features", "no_such_feature"],
    ["--mask", "1100000", "--features", "vpp"], ["--no-default-features", "--features", "dynamic_batch"],
    ["--nnodes", "2"], ["--nodes", "h1,h2", "--nnodes", "3"], ["--logger", "wandb"], ["--swanlab", "yes"],
    ["--swanlab-host", "http://10.0.0.1:8000", "--swanlab-mode", "local"], ["--verl-version", "0.5.0"],
    ["--verl-version", "0.10.0"], ["--device-memory-gb", "8"],
    ["--max-response-length", "65536", "--device-memory-gb", "32"], ["--expected-response-length", "100000"],
    ["--gpu-memory-utilization", "0.95"], ["--algorithm", "grpo", "--filter-groups", "yes"],
    ["--algorithm", "grpo", "--max-num-gen-batches", "3", *V091], ["--filter-groups-metric", "score"],
    ["--save-freq", "0", "--max-ckpt-to-keep", "1"], ["--test-freq", "-1", "--val-before-train", "yes"],
    ["--recompute-method", "uniform", "--recompute-num-layers", "5"], ["--overlong-buffer-len", "9000"],
    ["--max-prompt-length", "100000", "--max-response-length", "100000"], ["--npu-type", "a3", "--device", "gpu"],
    ["--clip-ratio-low", "0.5", "--clip-ratio-high", "0.1"], ["--strict"], ["--allow-tp-mismatch", "--gen-tp", "8"],
    *[["--override", text] for text in (
        "data.prompt_key=question", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.total_training_steps=5",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "data.train_batch_size=8", "no_such.key=1",
        "trainer.logger=[console,wandb]", "algorithm.filter_groups.enable=False", "trainer.test_freq=0",
        "actor_rollout_ref.actor.clip_ratio_high=0.3", "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full",
        "~trainer.val_before_train")],
    ["--mode", "fully-async", *V091, "--override", "async_training.staleness_threshold=0.2"],
    ["--mode", "fully-async", *V091, "--override", "async_training.partial_rollout=False"],
    ["--mode", "separate-async", *V091, "--override", "trainer.v1.separate_async.parameter_sync_step=2"],
]


@pytest.mark.parametrize("args", RULE_TRIGGERS, ids=lambda args: " ".join(args))
def test_every_fix_a_rule_gives_names_flags_that_exist(tmp_path, args):
    result = run_cli("plan", "--json", *args, env=isolated(tmp_path))
    findings = findings_of(result)
    assert findings, result.stdout[-2000:]
    assert bad_fixes("plan", result) == []


@pytest.mark.parametrize("command", [["generate", "--output-dir", "OUT"], ["launch", "--dry-run", "--skip-check"]])
def test_refusals_of_other_commands_name_their_own_flags(tmp_path, command):
    args = [part.replace("OUT", str(tmp_path / "out")) for part in command]
    for trigger in (["--train-tp", "3"], ["--override", "data.prompt_key=question"], ["--mode", "separate-async"]):
        result = run_cli(*args, "--json", *trigger, env=isolated(tmp_path))
        assert result.returncode != 0 and findings_of(result), result.stdout[-2000:]
        assert bad_fixes(command[0], result) == [], trigger


# -- what no plan above reaches: every fix written in the package -----------------------------------------------------

# flags of the tools a fix tells the user to run again (docker run, ray start, ray get-auth-token), not verl-deploy's
OTHER_TOOLS = {"--shm-size", "--ipc", "--net", "--gpus", "--runtime", "--privileged", "--head", "--resources",
               "--num-gpus", "--generate"}
FINDING_MAKERS = {"error": 2, "warning": 2, "info": 2, "Finding": 2, "NameProblem": 1}  # -> the fix's position


def _fix_arguments(tree):
    """(line, fix expression) of every finding (and NameProblem) the module makes."""
    import ast

    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        maker = getattr(call.func, "id", getattr(call.func, "attr", None))
        if maker not in FINDING_MAKERS:
            continue
        position = FINDING_MAKERS[maker]
        fix = call.args[position] if len(call.args) > position else None
        fix = next((kw.value for kw in call.keywords if kw.arg == "fix"), fix)
        if fix is not None:
            yield call.lineno, fix


def _made_up_flag(node) -> bool:
    """"--" + name or f"--{name}": a flag made from a field's name, which may not exist."""
    import ast

    for part in ast.walk(node):
        if isinstance(part, ast.BinOp) and isinstance(part.left, ast.Constant) and part.left.value == "--":
            return True
        if isinstance(part, ast.JoinedStr):
            values = part.values
            if any(isinstance(a, ast.Constant) and str(a.value).endswith("--") and isinstance(b, ast.FormattedValue)
                   for a, b in zip(values, values[1:])):
                return True
    return False


def test_every_flag_a_fix_in_the_package_names_exists_and_none_is_made_from_a_name():
    import ast
    from pathlib import Path

    import verl_deploy

    every = set().union(*FLAGS.values()) | OTHER_TOOLS
    problems = []
    for path in sorted(Path(verl_deploy.__file__).parent.rglob("*.py")):
        for line, fix in _fix_arguments(ast.parse(path.read_text())):
            texts = [n.value for n in ast.walk(fix) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            problems += [f"{path.name}:{line}: {flag}" for text in texts for flag in FLAG.findall(text)
                         if flag not in every]
            if _made_up_flag(fix):
                problems.append(f"{path.name}:{line}: a flag made from a name: {ast.unparse(fix)[:80]}")
    assert problems == []


def test_a_field_without_a_flag_has_no_flag_to_name():
    from verl_deploy.override_owners import owner_flag
    from verl_deploy.spec import flag_of, how_to_set

    for name in field_names():
        said = how_to_set(name, 1)
        if DECLARED[name].flags:
            assert flag_of(name) == DECLARED[name].flag and said == f"{DECLARED[name].flag} 1"
        else:
            assert flag_of(name) is None and "--" + name.replace("_", "-") not in said and f"{name}: 1" in said
            assert owner_flag(name) is None or "--" + name.replace("_", "-") not in owner_flag(name)


def test_migrate_to_an_unsupported_release_names_its_own_flag(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("verl_version: 0.7.0\n")
    result = run_cli("migrate", str(config), "--to", "0.5.0", "--output", str(tmp_path / "out.yaml"))
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "pass --to with a supported version" in said and "--verl-version" not in said
    assert not (tmp_path / "out.yaml").exists()


def test_one_bad_tp_is_one_error_and_a_rollout_tp_refusal_names_its_flags():
    """--train-tp 3 on 8 devices: the derived rollout TP fails for the same reason; one line, not two."""
    bad = prepare(flags={"train_tp": 3}, environ={})
    assert [f.field for f in bad.findings if f.level == "error"] == ["train_tp"]
    rollout = prepare(flags={"train_tp": 4, "train_pp": 2, "gen_tp": 3, "allow_tp_mismatch": True}, environ={})
    fixes = [f.fix for f in rollout.findings if f.level == "error" and f.field == "gen_tp"]
    assert fixes and "--gen-tp" in fixes[0] and "--devices" in fixes[0], rollout.findings
