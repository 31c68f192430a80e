"""A script's launch -> spec fields and overrides whose generated launch composes to the same verl config.

The script's effective config is composed with Hydra from the release's real tree. The spec's fields are
read from it through the profile's key table backwards (fields.py), features from their keys. The plan
that spec compiles to is composed the same way; every key that still differs and that an override may
set is given one (the script's own value, with its line; or verl's default where the script relied on
it and verl-deploy would change it). What remains differs on a key a spec field or feature owns: it is
reported, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from verl_deploy.importer import compose as composing
from verl_deploy.importer.complete import complete
from verl_deploy.importer.fields import UNSET, features_of, keys_of, knobs_for
from verl_deploy.importer.launch import Launch, find_launch
from verl_deploy.importer.problems import ImportProblem
from verl_deploy.importer.shell import Reading, Unknown, read_script
from verl_deploy.importer.version import framework_of, generated_for, guess_version
from verl_deploy.profiles import Profile, profile_for
from verl_deploy.profiles.entries import entry_of
from verl_deploy.sources import ENV_VARS
from verl_deploy.spec import SPLIT_MODES, RunSpec

__all__ = ["ImportProblem", "Imported", "import_script"]


@dataclass
class Imported:
    path: str
    launch: Launch
    reading: Reading
    version: str
    version_why: str
    mode: str | None
    framework: str
    device: str
    algorithm: str = "dapo"
    dapo_source: str | None = None
    mechanism: str = "dapo"  # the profile's key for the verl entry (modes.mechanism): what keys_for reads
    values: dict[str, Any] = field(default_factory=dict)  # spec field -> value, for CONFIG.yaml
    provenance: dict[str, str] = field(default_factory=dict)  # spec field -> where the value came from
    overrides: list[tuple[str, str]] = field(default_factory=list)  # (override text, where it came from)
    remaining: list[composing.Difference] = field(default_factory=list)  # owned keys that still differ
    aside: list[composing.Difference] = field(default_factory=list)  # path keys (compared apart)
    # keys only the launch has, sent as a copy of a key the script sets (Key.mirror), with that key
    mirrored: list[tuple[composing.Difference, str]] = field(default_factory=list)
    # keys that differ as text and that verl reads the same (a one-item list, a default read when absent)
    read_alike: list[composing.Difference] = field(default_factory=list)
    # of `remaining`: keys only the launch has, which the profile adds with `+` (verl's config lacks them)
    additions: list[composing.Difference] = field(default_factory=list)
    field_problems: list[str] = field(default_factory=list)
    problem: str = ""  # why no equivalent config exists (no mode runs this entry)

    @property
    def unreadable(self) -> list[Unknown]:
        return self.reading.unreadable

    @property
    def equivalent(self) -> bool:
        return not self.problem and not self.remaining

    def config_values(self) -> dict[str, Any]:
        values = dict(self.values)
        if self.overrides:
            values["overrides"] = [text for text, _ in self.overrides]
        return values

    def environment_fields(self) -> dict[str, str]:
        """Seed variables the script reads from the environment -> the field they set."""
        return {name: ENV_VARS[name] for name in self.reading.environment if name in ENV_VARS}


def import_script(path: str, *, verl_version: str | None = None, verl_dir: str | None = None,
                  environ: Mapping[str, str] | None = None, recipe_dirs: tuple[str, ...] = (),
                  locate_source=None) -> Imported:
    """Read `path` and find the spec + overrides whose launch composes to the script's config."""
    reading, launch = _read(path, environ)
    entry = entry_of(launch.entry)
    if entry is None:
        raise ImportProblem(f"{path} line {launch.line}: {launch.entry} is not a verl entry this verl-deploy knows",
                            "import a script that runs recipe.dapo.main_dapo, the one-step-off or fully-async "
                            "entry, or verl.trainer.main_ppo")
    config_name = launch.config_name or entry.default_config
    locate_source = locate_source or _locate(verl_dir, recipe_dirs)
    version, why = _version(path, launch, entry, config_name, verl_version, locate_source)
    profile = profile_for(version)
    if not isinstance(profile, Profile):
        raise ImportProblem(profile.message, profile.fix)
    source = _source(locate_source, version)
    try:
        original = composing.compose(source, launch.entry, config_name, [s.text for s in launch.settings], profile,
                                     framework_of(config_name), entry.mode)
    except composing.ConfigNotFound:
        where = f" (a config of its own under --config-path {launch.config_path} is not read)" if launch.config_path \
            else ""
        raise ImportProblem(f"{path} line {launch.line}: --config-name {config_name} is not a config verl {version} "
                            f"has for {launch.entry}{where}",
                            "import a script that runs one of verl's own configs, or give --recipe-dir/--verl-dir "
                            "with a checkout that has it") from None
    except composing.ComposeProblem as exc:
        raise ImportProblem(f"verl {version}'s config refuses the script's overrides: {exc}",
                            "check the script runs with that release (or pass --verl-version)") from None
    framework, device = _framework_device(original.resolved, profile, config_name)
    result = Imported(path, launch, reading, version, why, entry.mode, framework, device)
    run = _run_of(entry, original.resolved, profile, framework, device, version)
    if isinstance(run, str):
        result.problem = f"{launch.entry} (config {config_name}): {run}"
        return result
    result.mode, result.algorithm, result.dapo_source, result.mechanism = run
    _fields_from(result, original.resolved, profile)
    _one_node_count(result, original.resolved, profile)
    complete(result, original, source, profile, _validated)
    return result


def _read(path: str, environ: Mapping[str, str] | None) -> tuple[Reading, Launch]:
    from verl_deploy.importer.launch import NoLaunch
    from verl_deploy.importer.shell import ScriptProblem

    try:
        reading = read_script(path, dict(environ or {}))
        return reading, find_launch(reading)
    except (ScriptProblem, NoLaunch) as exc:
        raise ImportProblem(str(exc), "give a bash script that runs verl with `python3 -m ENTRY key=value ...`") from None


def _version(path: str, launch: Launch, entry, config_name: str, given: str | None, locate_source) -> tuple[str, str]:
    """(release, why): --verl-version, else a generated script's header, else read from the entry and keys."""
    if given:
        return given.strip().lstrip("v"), "given with --verl-version"
    header = generated_for(path)
    if header:
        return header, "the release verl-deploy generated this script for (its header)"
    return guess_version(launch, entry, config_name, locate_source)


def _source(locate_source, version: str):
    from verl_deploy.verlconfig.locate import ConfigUnavailable

    try:
        return locate_source(version)
    except ConfigUnavailable as exc:
        raise ImportProblem(f"cannot read verl {version}'s configs: {exc}",
                            "pass --verl-dir with a verl checkout of that release, or let pip reach PyPI") from None


def _framework_device(effective: dict[str, Any], profile: Profile, config_name: str) -> tuple[str, str]:
    """Megatron when the config or the actor's strategy says so (0.9's model_engine=megatron); NPU from trainer.device."""
    framework = framework_of(config_name)
    if "megatron" in [effective.get(k) for k in keys_of(profile, "strategy", "fsdp", "gpu", "dapo")]:
        framework = "megatron"
    device_key = keys_of(profile, "device", framework, "gpu", "dapo")
    return framework, "npu" if device_key and effective.get(device_key[0]) == "npu" else "gpu"


def _run_of(entry, effective: dict[str, Any], profile: Profile, framework: str, device: str,
            version: str) -> tuple[str, str, str | None, str] | str:
    """(mode, algorithm, dapo_source, profile mechanism) of what the script runs, or why no mode runs it.

    The recipe entries are DAPO (GRPO through the one-step-off / fully-async entry unless the reward manager is
    DAPO's). verl.trainer.main_ppo is GRPO (adv_estimator grpo); on >= 0.9.0 its V1 trainer runs the sync and async
    modes (trainer.v1.trainer_mode), DAPO when group filtering or the dapo reward manager is on (in the sync mode
    that is DAPO from verl's core). The DAPO source is written whenever a release has both, so the config does not
    depend on which one the release defaults to."""
    from verl_deploy.profiles.modes import V1_SINCE
    from verl_deploy.verl_release import release_numbers

    reward = next((effective[k] for k in keys_of(profile, "reward_manager", framework, device, entry.mode or "ppo")
                   if k in effective), None)
    both_sources = release_numbers(version) >= V1_SINCE
    if entry.mode is not None:  # the recipe trainers
        algorithm = "dapo" if entry.mode == "dapo" or reward == "dapo" else "grpo"
        source = "recipe" if entry.mode == "dapo" and both_sources else None
        return entry.mode, algorithm, source, entry.mode
    estimator = effective.get("algorithm.adv_estimator")
    if estimator != "grpo":
        return (f"verl's PPO trainer with algorithm.adv_estimator={estimator}: verl-deploy runs DAPO and GRPO "
                "(adv_estimator grpo), so no equivalent config can be written")
    mode = _v1_mode(effective) if both_sources and effective.get("trainer.use_v1", True) is not False else None
    dapo_like = effective.get("algorithm.filter_groups.enable") is True or reward == "dapo"
    if mode is None:  # the legacy RayPPOTrainer: GRPO
        return "dapo", "grpo", None, "ppo"
    if dapo_like:
        return (mode, "dapo", "core", "ppo") if mode == "dapo" else (mode, "dapo", None, mode)
    return mode, "grpo", None, "ppo" if mode == "dapo" else mode


def _v1_mode(effective: dict[str, Any]) -> str:
    """The verl-deploy mode of verl's V1 trainer_mode (sync: the colocated dapo mode)."""
    from verl_deploy.profiles.modes import V1_MODES

    trainer_mode = effective.get("trainer.v1.trainer_mode", "sync")
    return next((m for m, name in V1_MODES.items() if name == trainer_mode), "dapo")


def _locate(verl_dir: str | None, recipe_dirs: tuple[str, ...]):
    from verl_deploy.verlconfig.locate import locate

    def find(version: str):
        source = locate(version, verl_dir)
        return composing.source_with_recipe(source, *(Path(d) for d in recipe_dirs))

    return find


def _fields_from(result: Imported, effective: dict[str, Any], profile: Profile) -> None:
    mode, framework, device, mechanism = result.mode or "dapo", result.framework, result.device, result.mechanism
    values: dict[str, Any] = {"mode": mode, "framework": framework, "device": device,
                              "verl_version": result.version}
    provenance = {"mode": f"entry {result.launch.entry}", "framework": "the config name and strategy",
                  "device": "the trainer's device key", "verl_version": result.version_why}
    if result.algorithm != "dapo":
        values["algorithm"] = result.algorithm
        provenance["algorithm"] = "algorithm.adv_estimator and the reward manager"
    if result.dapo_source:
        values["dapo_source"] = result.dapo_source
        provenance["dapo_source"] = (f"{result.launch.entry}: the DAPO recipe trainer" if result.dapo_source == "recipe"
                                     else f"{result.launch.entry} with group filtering or the dapo reward manager "
                                     "(DAPO in verl's core)")
    for knob, name, convert in knobs_for(mechanism):
        keys = keys_of(profile, knob, framework, device, mechanism)
        key = next((k for k in keys if k in effective), None)
        if key is None:
            continue
        try:
            value = convert(effective[key])
        except ValueError as exc:
            result.field_problems.append(f"{name}: {key}={effective[key]!r} is {exc}")
            continue
        if value is UNSET:
            continue
        values[name] = value
        provenance[name] = result.launch.where(key) or f"verl {result.version}'s default for {key}"
    if "logger" in values:  # SwanLab is on exactly when the script logs to it
        values["swanlab"] = "swanlab" in values["logger"]
        provenance["swanlab"] = provenance["logger"]
    _overlong_off_when_absent(result, values, provenance, effective, profile)
    _devices(mode, values, provenance)
    train_tp = values.get("train_tp", RunSpec.model_fields["train_tp"].default)
    if framework == "megatron" and values.get("gen_tp") not in (None, train_tp):
        values["allow_tp_mismatch"] = True  # seed 001 asks for the same TP; the script chose another, as verl allows
        provenance["allow_tp_mismatch"] = f"rollout TP {values['gen_tp']} and training TP {train_tp} in the script"
    values["features"] = features_of(effective, profile, framework, device, mechanism)
    provenance["features"] = "the features' keys in the script's config"
    result.values, result.provenance = values, provenance
    _validated(result)


def _one_node_count(result: Imported, effective: dict[str, Any], profile: Profile) -> None:
    """A spec runs the trainer and a separate rollout pool on one node count (--nnodes sends trainer.nnodes and the
    pool's nnodes): a script that gives the pool another count has no equivalent config."""
    trainer = result.values.get("nnodes", RunSpec.model_fields["nnodes"].default)
    knob = "v1_rollout_nnodes" if result.mechanism == "separate-async" else "rollout_pool_nnodes"
    if result.mode in SPLIT_MODES:  # the pool's keys as compiler.knob_settings sends them for this mechanism
        for key in keys_of(profile, knob, result.framework, result.device, result.mechanism):
            pool = effective.get(key)
            if isinstance(pool, int) and not isinstance(pool, bool) and pool != trainer:
                where = result.launch.where(key) or f"verl {result.version}'s default"
                raise ImportProblem(
                    f"{result.path}: the rollout pool runs on {key}={pool} nodes ({where}) and the trainer on "
                    f"{trainer}: a verl-deploy spec has one node count for both (--nnodes sends trainer.nnodes and "
                    f"{key}), no separate rollout-pool node count",
                    f"give the script's {key} the trainer's {trainer} nodes (the rollout pool's size per node is "
                    "--rollout-gpus), then import it")


def _devices(mode: str, values: dict[str, Any], provenance: dict[str, str]) -> None:
    """The trainer's devices per node are the run's devices; split modes add the rollout pool's."""
    gpus = values.pop("trainer_gpus", None)
    if mode not in SPLIT_MODES and gpus is not None:
        values["devices"] = gpus
        provenance["devices"] = provenance.pop("trainer_gpus")
    elif gpus is not None:
        values["trainer_gpus"] = gpus
        values["devices"] = min(64, gpus + int(values.get("rollout_gpus", 0) or 0))
        provenance["devices"] = "trainer + rollout devices"
    else:
        values.pop("rollout_gpus", None)


def _overlong_off_when_absent(result: Imported, values: dict[str, Any], provenance: dict[str, str],
                              effective: dict[str, Any], profile: Profile) -> None:
    """DAPO whose config has no overlong buffer key (main_ppo, one-step-off and fully-async take it with `+`): the
    dapo reward manager then applies no overlong penalty (`overlong_buffer_cfg is None`), so the field is off, not
    the spec's default on."""
    if result.algorithm != "dapo" or "overlong_buffer" in values:
        return
    keys = keys_of(profile, "overlong_enable", result.framework, result.device, result.mechanism)
    if keys and not any(key in effective for key in keys):
        values["overlong_buffer"] = False
        provenance["overlong_buffer"] = f"the script sets no {keys[0]} (the dapo reward manager applies no overlong " \
                                        "penalty without it)"


def _validated(result: Imported) -> RunSpec:
    """The spec of the values; a value the spec refuses is dropped (and named) rather than guessed."""
    for _ in range(len(result.values) + 1):
        try:
            return RunSpec(**result.config_values())
        except ValidationError as exc:
            bad = {str(err["loc"][0]) for err in exc.errors() if err.get("loc")}
            if not bad or "overrides" in bad:
                raise ImportProblem(f"the imported values are refused: {exc.errors()[0]['msg']}",
                                    "report this script with `verl-deploy import --json`") from None
            for name in bad:
                msg = next(e["msg"] for e in exc.errors() if e.get("loc") and str(e["loc"][0]) == name)
                result.field_problems.append(f"{name}: {result.values.get(name)!r} is refused ({msg})")
                result.values.pop(name, None)
                result.provenance.pop(name, None)
    raise ImportProblem("the imported values are refused", "report this script")
