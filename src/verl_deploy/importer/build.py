"""A script's launch -> spec fields and overrides whose generated launch composes to the same verl config.

The script's effective config is composed with Hydra from the release's real tree. The spec's fields are
read from it through the profile's key table backwards (fields.py), features from their keys. The plan
that spec compiles to is composed the same way; every key that still differs and that an override may
set is given one (the script's own value, with its line; or verl's default where the script relied on
it and verl-deploy would change it). What remains differs on a key a spec field or feature owns: it is
reported, never hidden.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from verl_deploy.compiler import compile_plan
from verl_deploy.hydra_text import format_value
from verl_deploy.importer import compose as composing
from verl_deploy.importer.fields import FIELD_KNOBS, PATH_KNOBS, UNSET, features_of, keys_of
from verl_deploy.importer.launch import Launch, find_launch
from verl_deploy.importer.shell import Reading, Unknown, read_script
from verl_deploy.override_owners import beyond_feature, owner_flag
from verl_deploy.profiles import Profile, profile_for
from verl_deploy.profiles.entries import entry_of
from verl_deploy.sources import ENV_VARS
from verl_deploy.spec import SPLIT_MODES, RunSpec

MAX_ROUNDS = 4


class ImportProblem(Exception):
    """The script cannot be imported; `fix` says what to do."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


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

    @property
    def conflicts(self) -> list[composing.Difference]:
        """Keys the script's config has with another value (or without the launch having them)."""
        return [d for d in self.remaining if d not in self.additions]

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
    from verl_deploy.importer.shell import ScriptProblem
    from verl_deploy.importer.launch import NoLaunch

    try:
        reading = read_script(path, dict(environ or {}))
        launch = find_launch(reading)
    except (ScriptProblem, NoLaunch) as exc:
        raise ImportProblem(str(exc), "give a bash script that runs verl with `python3 -m ENTRY key=value ...`") from None
    entry = entry_of(launch.entry)
    if entry is None:
        raise ImportProblem(f"{path} line {launch.line}: {launch.entry} is not a verl entry this verl-deploy knows",
                            "import a script that runs recipe.dapo.main_dapo, the one-step-off main_ppo or "
                            "verl.trainer.main_ppo")
    config_name = launch.config_name or entry.default_config
    locate_source = locate_source or _locate(verl_dir, recipe_dirs)
    generated_for = _generated_for(path)
    if verl_version:
        version, why = verl_version.strip().lstrip("v"), "given with --verl-version"
    elif generated_for:
        version, why = generated_for, "the release verl-deploy generated this script for (its header)"
    else:
        version, why = _guess_version(launch, entry, config_name, locate_source)
    profile = profile_for(version)
    if not isinstance(profile, Profile):
        raise ImportProblem(profile.message, profile.fix)
    source = locate_source(version)
    framework = "megatron" if "megatron" in config_name else "fsdp"
    texts = [s.text for s in launch.settings]
    try:
        original = composing.compose(source, launch.entry, config_name, texts, profile, framework, entry.mode)
    except composing.ComposeProblem as exc:
        raise ImportProblem(f"verl {version}'s config refuses the script's overrides: {exc}",
                            "check the script runs with that release (or pass --verl-version)") from None
    strategy = [original.resolved.get(k) for k in keys_of(profile, "strategy", "fsdp", "gpu", "dapo")]
    if "megatron" in strategy:
        framework = "megatron"
    device_key = keys_of(profile, "device", framework, "gpu", "dapo")
    device = "npu" if device_key and original.resolved.get(device_key[0]) == "npu" else "gpu"
    result = Imported(path, launch, reading, version, why, entry.mode, framework, device)
    run = _run_of(entry, original.resolved, profile, framework, device, version)
    if isinstance(run, str):
        result.problem = f"{launch.entry} (config {config_name}): {run}"
        return result
    result.mode, result.algorithm, result.dapo_source, result.mechanism = run
    _fields_from(result, original.resolved, profile)
    _complete(result, original, source, profile)
    return result


def _run_of(entry, effective: dict[str, Any], profile: Profile, framework: str, device: str,
            version: str) -> tuple[str, str, str | None, str] | str:
    """(mode, algorithm, dapo_source, profile mechanism) of what the script runs, or why no mode runs it.

    verl.trainer.main_ppo is GRPO (adv_estimator grpo), DAPO from verl's core on >= 0.9.0 (group filtering on)
    and the V1 async modes (trainer.v1.trainer_mode); the recipe entries are DAPO and one-step-off, GRPO when
    the reward manager is not DAPO's."""
    from verl_deploy.profiles.modes import V1_MODES, release_tuple

    reward = next((effective[k] for k in keys_of(profile, "reward_manager", framework, device, entry.mode or "ppo")
                   if k in effective), None)
    if entry.mode is not None:  # the recipe trainers
        algorithm = "dapo" if entry.mode == "dapo" or reward == "dapo" else "grpo"
        return entry.mode, algorithm, None, entry.mode
    estimator = effective.get("algorithm.adv_estimator")
    if estimator != "grpo":
        return (f"verl's PPO trainer with algorithm.adv_estimator={estimator}: verl-deploy runs DAPO and GRPO "
                "(adv_estimator grpo), so no equivalent config can be written")
    v1 = release_tuple(version) >= (0, 9, 0) and effective.get("trainer.use_v1", True) is not False
    mode = "dapo"
    if v1:
        trainer_mode = effective.get("trainer.v1.trainer_mode", "sync")
        mode = next((m for m, name in V1_MODES.items() if name == trainer_mode), "dapo")
    filtering = effective.get("algorithm.filter_groups.enable") is True
    if v1 and filtering and mode == "dapo":
        return "dapo", "dapo", "core", "ppo"
    return mode, "grpo", None, "ppo" if mode == "dapo" else mode


def _generated_for(path: str) -> str | None:
    """The release named in the header of a run_training.sh verl-deploy wrote."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(400).decode("utf-8", "replace")
    except OSError:
        return None
    match = re.search(r"^# run_training\.sh: generated by verl-deploy \S+ for verl (\d+\.\d+\.\d+)", head, re.M)
    return match.group(1) if match else None


def _locate(verl_dir: str | None, recipe_dirs: tuple[str, ...]):
    from verl_deploy.verlconfig.locate import locate

    def find(version: str):
        source = locate(version, verl_dir)
        return composing.source_with_recipe(source, *(Path(d) for d in recipe_dirs))

    return find


def _guess_version(launch: Launch, entry, config_name: str, locate_source) -> tuple[str, str]:
    """The newest release that has this entry and every key the script sets without '+'."""
    from verl_deploy.profiles.entries import LEGACY_REWARD_RELEASES, NEW_REWARD_PREFIX

    candidates = list(entry.releases)
    if any(s.key.startswith(NEW_REWARD_PREFIX) for s in launch.settings):
        candidates = [r for r in candidates if r not in LEGACY_REWARD_RELEASES] or candidates
    plain = [s for s in launch.settings if s.prefix == ""]
    best: tuple[int, str] | None = None
    for release in reversed(candidates):
        profile = profile_for(release)
        if not isinstance(profile, Profile):
            continue
        try:
            source = locate_source(release)
            framework = "megatron" if "megatron" in config_name else "fsdp"
            known = composing.compose(source, launch.entry, config_name, [], profile, framework, entry.mode).raw
        except Exception:
            continue
        missing = [s.key for s in plain if s.key not in known and not any(k.startswith(s.key + ".") for k in known)]
        if not missing:
            return release, f"the newest release with {launch.entry} and every key the script sets"
        if best is None or len(missing) < best[0]:
            best = (len(missing), release)
    if best is None:
        raise ImportProblem(f"no release's config could be read for {launch.entry}",
                            "pass --verl-version (and --verl-dir with a verl checkout if PyPI is not reachable)")
    return best[1], f"the release with the fewest unknown keys ({best[0]} of the script's keys are not in it)"


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
        provenance["dapo_source"] = f"{result.launch.entry} with algorithm.filter_groups on (DAPO in verl's core)"
    for knob, name, convert in FIELD_KNOBS:
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
        provenance[name] = _where(result.launch, key) or f"verl {result.version}'s default for {key}"
    if "logger" in values:  # SwanLab is on exactly when the script logs to it
        values["swanlab"] = "swanlab" in values["logger"]
        provenance["swanlab"] = provenance["logger"]
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
    train_tp = values.get("train_tp", RunSpec.model_fields["train_tp"].default)
    if framework == "megatron" and values.get("gen_tp") not in (None, train_tp):
        values["allow_tp_mismatch"] = True  # seed 001 asks for the same TP; the script chose another, as verl allows
        provenance["allow_tp_mismatch"] = f"rollout TP {values['gen_tp']} and training TP {train_tp} in the script"
    values["features"] = features_of(effective, profile, framework, device, mechanism)
    provenance["features"] = "the features' keys in the script's config"
    result.values, result.provenance = values, provenance
    _validated(result)


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


def _where(launch: Launch, key: str) -> str | None:
    """The script line that sets `key` (or a node above it)."""
    for setting in reversed(launch.settings):
        if setting.key == key or key.startswith(setting.key + "."):
            return setting.provenance
    return None


def _complete(result: Imported, original: composing.Composed, source, profile: Profile) -> None:
    """Add an override for every key that differs and that an override may set; keep the rest."""
    aside_keys: set[str] = set()
    for knob in PATH_KNOBS:
        aside_keys.update(keys_of(profile, knob, result.framework, result.device, result.mechanism))
    given: dict[str, tuple[str, str]] = {}  # key -> (override text, provenance)
    for round_ in range(MAX_ROUNDS + 1):
        result.overrides = list(given.values())
        spec = _validated(result)
        plan = compile_plan(spec, profile)
        try:
            generated = composing.compose(source, plan.entry_module, plan.config_name, plan.argv()[3:], profile,
                                          result.framework, result.mechanism)
        except composing.ComposeProblem as exc:
            raise ImportProblem(f"the generated launch does not compose with verl {result.version}: {exc}",
                                "report this script with `verl-deploy import --json`") from None
        diffs = composing.differences(original, generated)
        if round_ == MAX_ROUNDS:
            break
        owners = {o.key: o for o in plan.overrides}
        added = False
        for diff in diffs:
            if diff.key in aside_keys:
                continue
            sent = owners.get(diff.key)
            if (sent is not None and sent.origin != "--override" and owner_flag(sent.origin) is not None
                    and not beyond_feature(plan, sent.origin, diff.key, None if diff.missing else str(diff.original))):
                continue  # a field or feature owns the key: an override would be refused
            fix = _fix_for(diff, original, generated, sent, result)
            if fix is not None and given.get(diff.key) != fix:
                given[diff.key] = fix
                added = True
        if not added:
            break
    result.overrides = list(given.values())
    result.aside = [d for d in diffs if d.key in aside_keys and not _same_path(d)]
    owners = {o.key: o for o in plan.overrides}
    result.remaining, result.mirrored = [], []
    result.read_alike = [d for d in diffs if d.key in aside_keys and _same_path(d)]  # a path and the list of it
    for diff in diffs:
        if diff.key in aside_keys:
            continue
        key = _profile_key(profile, owners.get(diff.key), result)
        if key is not None and key.one_is_list and not diff.missing and _same_path(diff):
            result.read_alike.append(diff)  # 'console' and [console] are one logger list to verl
            continue
        if diff.missing == "original" and key is not None:
            if key.has_absent and composing.same(key.absent, diff.generated):
                result.read_alike.append(diff)  # verl reads this value when the key is absent: the same run
                continue
            if key.mirror and key.mirror in original.resolved and composing.same(original.resolved[key.mirror],
                                                                                  diff.generated):
                result.mirrored.append((diff, key.mirror))
                continue
        result.remaining.append(diff)
    plus = {o.key for o in plan.overrides if o.prefix in ("+", "++") and o.origin != "--override"}
    result.additions = [d for d in result.remaining if d.missing == "original" and d.key in plus]


def _profile_key(profile: Profile, sent, result: Imported):
    """The profile's Key behind an override the plan sends (None for the user's own overrides)."""
    if sent is None or sent.origin in ("", "--override"):
        return None
    try:
        found = profile.keys_for(sent.origin, result.framework, result.device, result.mechanism)
    except KeyError:
        return None
    return next((k for k in found if k.path == sent.key), None)


def _same_path(diff: composing.Difference) -> bool:
    a, b = diff.original, diff.generated
    a = a[0] if isinstance(a, list) and len(a) == 1 else a
    b = b[0] if isinstance(b, list) and len(b) == 1 else b
    return a == b


def _fix_for(diff: composing.Difference, original: composing.Composed, generated: composing.Composed, sent,
             result: Imported) -> tuple[str, str] | None:
    where = _where(result.launch, diff.key)
    if diff.missing == "original":  # only in the launch: delete it, when it is in the base config
        if sent is not None and sent.prefix in ("+", "++"):
            return None  # added by the plan itself: it cannot be deleted by an override (it is not in the base)
        return f"~{diff.key}", where or f"not in the script's config ({result.launch.entry})"
    own = result.launch.setting(diff.key)
    if own is not None and own.prefix != "~" and (sent is None or sent.prefix == own.prefix or own.prefix == "++") \
            and not (own.value or "").startswith("${"):
        return own.text, own.provenance  # the script's own words
    raw = diff.original  # the resolved value: an interpolation would follow the launch's other values
    prefix = "" if diff.key in generated.raw and (sent is None or sent.prefix == "") else "++"
    text = f"{prefix}{diff.key}={hydra_value(raw)}"
    return text, where or f"verl {result.version}'s default, kept (verl-deploy would send {diff.generated!r})"


_INTERPOLATION = re.compile(r"\$\{[^{}]*\}")


def hydra_value(value: Any) -> str:
    """A composed value back as Hydra override text (an interpolation stays one)."""
    if isinstance(value, str) and _INTERPOLATION.fullmatch(value):
        return value
    if isinstance(value, str) and "${" in value:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return format_value(value)
