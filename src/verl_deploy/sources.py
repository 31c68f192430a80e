"""Where values come from, lowest priority first:

    default < detected < config file (YAML) < environment < flags / wizard answers

``resolve`` merges the layers, validates the result into a ``RunSpec`` and records the
source of every value. Mistakes become findings naming the field, the layer it came
from and the fix; nothing here raises a traceback at the user.
"""

from __future__ import annotations

import difflib
import os
import typing
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from verl_deploy import rayauth
from verl_deploy.devices import rollout_memory_default
from verl_deploy.features import lookup
from verl_deploy.findings import Finding, UserError, error
from verl_deploy import boundedread
from verl_deploy.boundedread import UnreadableFile
from verl_deploy.secrets import key_path, load_swanlab_key
from verl_deploy.spec import SPLIT_MODES, RunSpec, env_vars, field_names, flag_of, how_to_set, parse_hosts

# The seeds' environment variables (seed 000 table, seed 001 stage 7) and verl scripts' names, as each field
# declares them (spec.py): variable -> field
ENV_VARS: dict[str, str] = env_vars()
TRUTHY = {"1", "true", "yes", "on", "y"}
FALSY = {"0", "false", "no", "off", "n"}
MAX_CONFIG_FILE_BYTES = 1 << 20  # a config of spec fields is a few hundred bytes


def where(source: str, field: str) -> str:
    """How a user changes a value that came from `source`."""
    kind, _, detail = source.partition(" ")
    if kind == "flag":
        return f"change {detail}" if detail else f"set {how_to_set(field)}"
    if kind == "env":
        return f"change or unset {detail} in the environment"
    if kind == "file":
        return f"change {field} in {detail}"
    if kind == "answer":
        return "answer the question again"
    return f"set {how_to_set(field)}"


def load_config_file(path: str | os.PathLike) -> tuple[dict[str, Any], list[Finding]]:
    """Read a YAML config file of spec fields; unknown keys are errors with suggestions."""
    from verl_deploy.names import NameProblem
    from verl_deploy.names import path as valid_path

    try:
        file = Path(valid_path(os.fspath(path), "config file"))
    except NameProblem as exc:
        return {}, [error("config", str(exc), exc.fix)]
    if not os.path.lexists(file):
        return {}, [error("config", f"config file {str(file)!r} does not exist",
                          "check the path, or create one with `verl-deploy init`")]
    try:
        data = yaml.load(boundedread.read_text(file, MAX_CONFIG_FILE_BYTES, f"config file {str(file)!r}"),
                         Loader=UniqueKeyLoader)
    except FileNotFoundError:
        return {}, [error("config", f"config file {str(file)!r} does not exist (a broken link?)",
                          "check the path, or create one with `verl-deploy init`")]
    except UnreadableFile as exc:
        return {}, [error("config", str(exc), "give a YAML file of `field: value` lines (`verl-deploy init` writes one)")]
    except (RecursionError, MemoryError):
        return {}, [error("config", f"{file}: nested too deep or too large to read as YAML",
                          "write one `field: value` per line")]
    except DuplicateKey as exc:
        return {}, [error(exc.key, f"{file}: {exc.key!r} is set twice, at line {exc.first} and at line {exc.second} "
                          "(YAML keeps only the last one)", "keep one of the two lines")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        return {}, [error("config", f"{file}: {problem}{at}", "fix the YAML syntax")]
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [error("config", f"cannot read {file}: {exc}", "check the file's permissions and encoding")]
    except ValueError as exc:  # PyYAML's int() of a number over 4300 digits, a date out of range
        return {}, [error("config", f"{file}: a value cannot be read: {str(exc).split(';')[0]}",
                          "quote the value, or write a number of a sensible size (train_steps: 100)")]
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        return {}, [error("config", f"{file}: expected a mapping of field: value, got {type(data).__name__}",
                          "write one `field: value` per line")]
    known = set(field_names())
    values: dict[str, Any] = {}
    findings: list[Finding] = []
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "see `verl-deploy plan --json` for the field names"
            findings.append(error(str(raw_key), f"unknown field in {file}", hint))
            continue
        if key == "swanlab_api_key":
            findings.append(error(str(raw_key), f"{file} holds the SwanLab API key: a config file is read, copied "
                                  "and committed, a key there leaks with it; nothing was used",
                                  "remove the line and run `verl-deploy swanlab login` (a 0600 file of its own), "
                                  "or export SWANLAB_API_KEY"))
            continue
        values[key] = value
    return values, findings


class DuplicateKey(yaml.YAMLError):
    """A key set twice in one mapping of a config file: where both are."""

    def __init__(self, key: str, first: int, second: int):
        super().__init__(f"{key!r} at lines {first} and {second}")
        self.key, self.first, self.second = key, first, second


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                line = key_node.start_mark.line + 1
                if key_node.value in seen:
                    raise DuplicateKey(key_node.value, seen[key_node.value], line)
                seen[key_node.value] = line
        return super().construct_mapping(node, deep)


def env_layer(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Values and their sources from the seeds' environment variables."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, field in ENV_VARS.items():
        raw = environ.get(name)
        if raw is None or raw == "":
            continue
        values[field] = raw
        sources[field] = f"env {name}"
    offload = environ.get("ENABLE_OFFLOAD", "")
    if offload.strip().lower() in TRUTHY:
        existing = values.get("features", "")
        named = {getattr(lookup(t.strip().lstrip("-!")), "name", None) for t in existing.split(",")}
        if "offload" not in named:  # USER_FEATURES=offload ENABLE_OFFLOAD=1 is offload once
            values["features"] = f"{existing},offload" if existing else "offload"
        sources["features"] = "env " + ("USER_FEATURES+ENABLE_OFFLOAD" if existing else "ENABLE_OFFLOAD")
    return values, sources


def resolve(
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: str | os.PathLike | None = None,
    detected: Mapping[str, Any] | None = None,
    answers: Mapping[str, Any] | None = None,
) -> RunSpec:
    """Merge every layer into a RunSpec; raise UserError with all findings if any is wrong."""
    environ = os.environ if environ is None else environ
    merged = _merge_layers(flags or {}, environ, config_file, detected or {}, answers or {})
    _derive(merged, environ)
    return _validated(merged)


@dataclass
class Layers:
    """The values merged so far, each with the layer it came from (a later layer wins)."""

    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    sources: dict[str, str] = dataclasses.field(default_factory=dict)

    def add(self, new: Mapping[str, Any], label: str | Mapping[str, str], nulls: bool = False) -> None:
        for key, value in new.items():
            if value is None and not (nulls and _takes_null(key)):
                continue
            self.values[key] = value
            self.sources[key] = label if isinstance(label, str) else label[key]

    def derive(self, name: str, value: Any, source: str = "derived") -> None:
        self.values[name], self.sources[name] = value, source


def _merge_layers(flags: Mapping[str, Any], environ: Mapping[str, str], config_file: str | os.PathLike | None,
                  detected: Mapping[str, Any], answers: Mapping[str, Any]) -> Layers:
    """detected < config file < the saved SwanLab key < environment < flags < answers; every problem at once."""
    merged, findings = Layers(), []
    merged.add(detected, "detected")
    if config_file is not None:
        file_values, problems = load_config_file(config_file)
        findings += problems
        merged.add(file_values, f"file {config_file}", nulls=True)  # `max_ckpt_to_keep: null` is verl's null
    try:
        stored_key = load_swanlab_key()
    except UnreadableFile as exc:
        stored_key = None
        findings.append(error("swanlab_api_key", f"the saved key file {exc}",
                              f"save the key again: verl-deploy swanlab login (or delete {key_path()})"))
    if stored_key:
        merged.add({"swanlab_api_key": stored_key}, "secret file")
    merged.add(*env_layer(environ))
    offload = environ.get("ENABLE_OFFLOAD", "").strip().lower()
    if offload and offload not in TRUTHY | FALSY:
        findings.append(error("features", f"ENABLE_OFFLOAD={environ['ENABLE_OFFLOAD'][:40]!r} is neither on nor off",
                              "set ENABLE_OFFLOAD=1 to add offload, 0 (or unset it) to leave it to the features"))
    merged.add({k: v for k, v in flags.items() if v is not None}, {k: f"flag {flag_of(k) or ''}".strip() for k in flags})
    merged.add(answers, "answer")
    if findings:
        raise UserError(findings)
    return merged


def _derive(merged: Layers, environ: Mapping[str, str]) -> None:
    """Values that follow from others when the user left them out (each source says "derived" or why)."""
    values = merged.values
    if values.get("nodes"):
        _from_hosts(merged)
    if "ray_auth" not in values:
        _ray_auth_default(environ, merged)
    if values.get("verl_dir") and "run_dir" not in values and not values.get("container"):
        # no container: the checkout the user named is the verl that runs (local backend), not /verl
        merged.derive("run_dir", os.path.abspath(os.path.expanduser(str(values["verl_dir"]))),
                      "derived from verl_dir (no container: the training runs from that checkout)")
    _version_from_the_tree_that_runs(values, merged.sources)
    if values.get("gpu_memory_utilization") is None:
        device = str(values.get("device") or "npu").strip().lower()
        engine = str(values.get("rollout_engine") or "vllm").strip().lower()
        share, why = rollout_memory_default(device, engine, split=values.get("mode") in SPLIT_MODES)
        merged.derive("gpu_memory_utilization", share, f"default ({why})")
    if values.get("mode") in SPLIT_MODES and "train_pp" not in values:
        # seed 000 gives the trainer of a split mode 4 devices; seed 001's PP 2 (with TP 4) needs 8
        merged.derive("train_pp", 1)


def _from_hosts(merged: Layers) -> None:
    """--nodes h1,h2: the node count and the head's address, unless given."""
    try:
        hosts = parse_hosts(merged.values["nodes"])
    except ValueError as exc:
        raise UserError([error("nodes", str(exc), getattr(exc, "fix", "give --nodes h1,h2 or --nodes @hostfile"))]) from None
    if "nnodes" not in merged.values:
        merged.derive("nnodes", len(hosts))
    if "master_addr" not in merged.values and hosts:
        merged.derive("master_addr", hosts[0])


def _validated(merged: Layers) -> RunSpec:
    """The RunSpec of the merged values, with the source of every field (pydantic's errors as findings)."""
    sources = merged.sources
    try:
        spec = RunSpec(**merged.values)
    except ValidationError as exc:
        raise UserError([_finding_from_pydantic(err, sources) for err in exc.errors()]) from None
    if "image" not in merged.values:
        sources["image"] = "derived"  # from verl_version and device (images.py)
    for name, label in spec.sources.items():  # what the spec's own validators set: the logger lifted from
        sources.setdefault(name, label)      # -o trainer.logger=..., GRPO's defaults (spec.py)
    full_sources = {name: sources.get(name, "default") for name in field_names()}
    return spec.model_copy(update={"sources": full_sources})


def _takes_null(name: str) -> bool:
    """A spec field where a config file's null is a value (verl's null: keep every checkpoint, count the steps
    from the epochs), not "unset"."""
    field = RunSpec.model_fields.get(name)
    return field is not None and field.default is not None and type(None) in typing.get_args(field.annotation)


def _version_from_the_tree_that_runs(values: dict[str, Any], sources: dict[str, str]) -> None:
    """Plan for the verl that will run: its checkout's version wins over a default or detected one.

    A version the user gave that disagrees with that tree is an error naming both (the profile would
    check keys the running verl does not have).
    """
    from verl_deploy.profiles import PROFILES
    from verl_deploy.verl_release import release_of, version_that_runs

    found = version_that_runs(values, sources)
    if found is None:
        return
    version, version_file = found
    given = values.get("verl_version")
    source = sources.get("verl_version", "default")
    if given is not None and source not in ("default", "detected") and release_of(str(given)) != release_of(version):
        tree = str(Path(version_file).parent.parent.parent)
        raise UserError([error("verl_version", f"verl {given} was asked for ({source}), but the verl that will run, "
                               f"{tree}, is verl {version} ({version_file})",
                               f"drop --verl-version (the tree's {version} is used), or point "
                               f"{'--verl-dir' if values.get('verl_dir') else '--run-dir'} at a verl {given} tree")])
    known = any(profile.serves(release_of(version)) for profile in PROFILES)
    values["verl_version"] = release_of(version) if known else version
    sources["verl_version"] = f"read from {version_file}"


def _ray_auth_default(environ: Mapping[str, str], merged: Layers) -> None:
    """Token auth for the scripts' Ray as `ray start --head` would decide it here (a token found: on)."""
    try:
        mode, why = rayauth.scripts_mode({k: v for k, v in environ.items() if k != rayauth.MODE_ENV})
    except rayauth.AuthError as exc:
        raise UserError([error("ray_auth", exc.problem, exc.fix)]) from None
    merged.derive("ray_auth", mode, why)


def _finding_from_pydantic(err: Mapping[str, Any], sources: Mapping[str, str]) -> Finding:
    loc = err.get("loc") or ("config",)
    field = str(loc[0])
    source = sources.get(field, "default")
    message = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    got = err.get("input")
    if field == "swanlab_api_key":
        got = "****"
    shown = f" (got {got!r} from {source})" if got is not None and err.get("type") != "extra_forbidden" else ""
    if err.get("type") == "extra_forbidden":
        close = difflib.get_close_matches(field, field_names(), n=3)
        return error(field, "unknown field", f"did you mean {', '.join(close)}?" if close else "remove it")
    cause = (err.get("ctx") or {}).get("error")
    fix = getattr(cause, "fix", None)  # a validator's own fix (e.g. Hydra syntax) says more than where
    if fix:
        shown = f" (from {source})"
    elif isinstance(got, str) and len(got) > 80:
        shown = f" (got {got[:77] + '...'!r} from {source})"
    elif not isinstance(got, (str, int, float, bool)) and got is not None and err.get("type") != "extra_forbidden":
        shown = f" (got {str(got)[:77]!r} from {source})"
    return error(field, f"{message}{shown}", f"{fix}; {where(source, field)}" if fix else where(source, field))
