"""Renderer: Plan -> start_verl.sh, run_training.sh, plan.json (and swanlab.env, trackers.env for the secrets).

Everything is rendered in memory first and written only when complete, each file through a
temporary file and an atomic rename, so an interrupted write never leaves half a script.
The same plan always gives byte-identical files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verl_deploy import __version__, rayauth
from verl_deploy.dirlock import locked_directory
from verl_deploy.compiler import GROUPS, Override, Plan
from verl_deploy.findings import Finding, error
from verl_deploy.hydra_text import format_value
from verl_deploy.secrets import mask_secret
from verl_deploy.profiles import modes
from verl_deploy.trackers import FILE as TRACKER_FILE, environment as tracker_environment
from verl_deploy.trackers import file_text as tracker_file_text, tracker_names
from verl_deploy.watch.handover import HANDOVER  # printed by run_training.sh, read back by the supervisor

SCRIPT_NAMES = ("start_verl.sh", "run_training.sh", "plan.json", "swanlab.env", "ray_auth_token", "trackers.env")
SECRET_FILE = "swanlab.env"


class ShellText(str):
    """Text that is safe where a template puts it: made only by `shell_quote` (or from its parts).

    The Jinja environment's finalize hook lets nothing else into a script (fail closed): a spec value
    that reaches a template without the `sh` filter stops the render instead of being pasted raw.
    """


class UnquotedValue(TypeError):
    """A template tried to output a value that did not go through the quoting filter."""


def shell_quote(value: object) -> ShellText:
    """One bash word that reads back as `value`, on one line (so it is safe in a comment too).

    shlex quoting where the text has no control character; else ANSI-C `$'...'` quoting, which bash
    reads the same way and which keeps a newline from ending the line it is on.
    """
    text = str(value)
    if not any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return ShellText(shlex.quote(text))
    out = []
    for c in text:
        if c in "\\'":
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return ShellText("$'" + "".join(out) + "'")


def _sh(value: object) -> ShellText:
    return shell_quote(value)


def _shvalue(value: object) -> ShellText:
    """A variable's value for bash: Hydra-style literals for bool/None, quoted text otherwise."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return _sh(format_value(value))
    return _sh(value)


ARITHMETIC = re.compile(r"\$\(\([A-Z0-9_ +*/()<>?:-]+\)\)")


def _arithmetic(expression: str) -> ShellText:
    """A derived variable's bash arithmetic (compiler.derived_expressions): names, numbers, operators only."""
    if not ARITHMETIC.fullmatch(expression):
        raise UnquotedValue(f"not a bash arithmetic expression over variables: {expression!r}")
    return ShellText(expression)


def _directive(value: object) -> ShellText:
    """A value on an `#SBATCH` line: sbatch reads it, bash sees a comment, so it must be one plain token.

    The scheduler options are validated to such tokens already (backends/scheduler_options.py); this refuses
    anything else at render time, so no value can end the comment line and start a command.
    """
    text = str(value)
    if not text or not re.fullmatch(r"[A-Za-z0-9_.,:+@%=/|&()*-]+", text):
        raise UnquotedValue(f"not a plain #SBATCH value: {text[:60]!r}")
    return ShellText(text)


def _finalize(value: object) -> object:
    """Every `{{ ... }}` of a template passes here: quoted text and plain integers only."""
    if isinstance(value, ShellText) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise UnquotedValue(f"a template outputs {type(value).__name__} {str(value)[:60]!r} without the `sh` filter")


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("verl_deploy", "templates"), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
                      finalize=_finalize)
    env.filters["sh"] = _sh
    env.filters["shvalue"] = _shvalue
    env.filters["arithmetic"] = _arithmetic
    env.filters["directive"] = _directive
    return env


VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def override_line(override: Override) -> ShellText:
    """One override as bash text: variables go through `hq` (strings) or plain expansion; the key is quoted."""
    if override.var is not None:
        if not VARIABLE_NAME.fullmatch(override.var):
            raise UnquotedValue(f"not a variable name: {override.var!r}")
        head = shell_quote(f"{override.prefix}{override.key}=")
        if isinstance(override.value, str):
            return ShellText(f'{head}"$(hq "${{{override.var}}}")"')
        return ShellText(f'{head}"${{{override.var}}}"')
    return shell_quote(override.text())


def summary(plan: Plan) -> str:
    spec = plan.spec
    return f"{spec.mode}, {spec.framework}, {len(spec.devices)} {spec.device.upper()}"


def swanlab_env(plan: Plan) -> list[tuple[str, str]]:
    """What start_verl.sh exports for SwanLab: the names the swanlab package really reads (swanlab_env.py)."""
    from verl_deploy.swanlab_env import swanlab_environment

    return swanlab_environment(plan.spec)


def entry_fix(plan: Plan) -> str:
    """How to get an entry module that imports with this release (the recipe source and the command)."""
    from verl_deploy.profiles.recipes import dapo_source

    spec = plan.spec
    source = dapo_source(spec.verl_version) if plan.mechanism == "dapo" else None
    if source is None:
        return "recipes are not in verl wheels; use a verl source checkout of this release as --run-dir"
    return f"{source.checkout_command(spec.run_dir, spec.verl_version)} ({source.why})"


def render_scripts(plan: Plan) -> dict[str, str]:
    """{file name: content} for the two scripts."""
    spec = plan.spec
    env = _environment()
    states = ", ".join(f"{s.name}={'on' if s.on else 'off'}" for s in plan.features if s.why != "n/a")
    groups = [(g, [v for v in plan.variables if v.group == g]) for g in GROUPS]
    entry_file = None
    entry_hint = ""
    if plan.profile.is_recipe_entry(plan.mechanism):
        entry_file = plan.entry_module.replace(".", "/") + ".py"
        entry_hint = entry_fix(plan)
    common = {"tool_version": __version__, "verl_version": spec.verl_version, "summary": summary(plan)}
    start = env.get_template("start_verl.sh.j2").render(
        **common, set_env_scripts=plan.platform.set_env_scripts, env=plan.env, master_addr=spec.master_addr,
        ray_port=spec.ray_port, swanlab_env=swanlab_env(plan), trackers=tracker_names(spec), run_dir=spec.run_dir, entry_module=plan.entry_module,
        entry_fix=entry_fix(plan),
        ray_auth=spec.ray_auth or "disabled", token_file=rayauth.TOKEN_FILE,
        token_fix=rayauth.HOW_TO_SET.replace("`", "") + "; or generate the scripts with --ray-auth disabled",
        ray_resources=plan.platform.ray_resource_args(len(spec.devices)), nnodes=spec.nnodes,
        devices_per_node=len(spec.devices), ray_resource=plan.platform.ray_resource, nodes=spec.nodes)
    run = env.get_template("run_training.sh.j2").render(
        **common, feature_line=f"mask {plan.mask}; {states}", groups=[g for g in groups if g[1]],
        run_dir=spec.run_dir, entry_file=entry_file, entry_hint=entry_hint,
        entry_module=plan.entry_module, config_name=plan.config_name, handover=HANDOVER,
        override_lines=[override_line(o) for o in plan.overrides])
    return {"start_verl.sh": start, "run_training.sh": run}


def plan_document(plan: Plan, findings: list[Finding], checked_against: str | None, memory=None) -> dict:
    """plan.json: the resolved spec with sources, the overrides, the verl version, the memory estimate. No secrets."""
    spec = plan.spec
    values = spec.model_dump(mode="json")
    if spec.swanlab_api_key is not None:
        values["swanlab_api_key"] = mask_secret(spec.swanlab_api_key.get_secret_value())
    return {
        "tool": {"name": "verl-deploy", "version": __version__},
        "verl": {"version": spec.verl_version, "profile": plan.profile.name, "checked_against": checked_against},
        "entry": {"module": plan.entry_module, "config_name": plan.config_name, "run_dir": spec.run_dir},
        "spec": values,
        "sources": spec.sources,
        "derived": {
            "rollout_tp": spec.rollout_tp, "experiment_name": spec.effective_experiment_name,
            "ckpts_dir": spec.effective_ckpts_dir, "mini_batch_size": spec.effective_mini_batch_size,
            "gen_batch_size": spec.effective_gen_batch_size, "token_budget": spec.token_budget,
            "swanlab_on": spec.swanlab_on, "overlong_buffer_len": spec.effective_overlong_buffer_len,
            "trainer": modes.mechanism(spec), "dapo_source": modes.dapo_source_for(spec) if spec.algorithm == "dapo"
            and spec.mode == "dapo" else None,
        },
        "not_used": modes.ignored_settings(spec),  # settings the chosen trainer ignores, and what it does instead
        "features": [s.as_dict() for s in plan.features],
        "mask": plan.mask,
        "overrides": [o.text() for o in plan.overrides],
        "superseded": dict(plan.superseded),
        "environment": dict(plan.env),
        "swanlab_environment": dict(swanlab_env(plan)),
        "trackers": {"logger": list(spec.loggers), "environment": sorted(tracker_environment(spec))},  # names only
        "findings": [f.as_dict() for f in findings],
        "memory": memory.to_dict() if memory is not None else None,
    }


def hands_over_token(spec, extra: dict[str, str]) -> bool:
    """Whether the scripts carry the Ray token (ray_auth_token, 0600; start_verl.sh points RAY_AUTH_TOKEN_PATH
    at it): token auth, and start_verl.sh runs where this host's environment and ~/.ray are not: on other
    nodes (SSH workers, a Slurm job's nodes) or in a container. Not for a Ray job on a cluster (the scripts
    start no Ray) nor KubeRay (the operator or a Secret gives the pods the token)."""
    if spec.ray_auth != "token":
        return False
    if "submit.sbatch" in extra:
        return True
    return not spec.head_from_scheduler and (spec.nnodes > 1 or bool(spec.container))


@dataclass
class Written:
    directory: Path
    files: list[str]


def existing_outputs(directory: Path, extra_names: tuple[str, ...] = ()) -> list[str]:
    """The files of a set (and of a scheduler's extra files) already in `directory`."""
    return [name for name in (*SCRIPT_NAMES, *extra_names) if (directory / name).exists()]


LOCK_WAIT_SECONDS = 30.0


def write_outputs(plan: Plan, directory: Path, document: dict, *, force: bool,
                  extra: dict[str, str] | None = None) -> Written | Finding:
    """Write the scripts, plan.json, (if there is a key) swanlab.env and a scheduler's `extra` files
    (submit.sbatch, rayjob.yaml) as one set, or nothing.

    Under an exclusive lock on the parent directory (two `generate` into one directory take turns:
    the second sees the first's files and needs --force), every file is written and synced into a
    staging directory on the same file system first, so a full disk fails before anything is
    touched. A new directory is then the staging directory renamed; an existing one gets the files
    renamed in, and any failure puts the old files back. plan.json is 0600 like swanlab.env: it
    holds the whole spec, proxy URLs (which may carry a password) included; the scripts are 0755.
    """
    files = render_scripts(plan)
    files["plan.json"] = json.dumps(document, indent=2, sort_keys=False) + "\n"
    secret = plan.spec.swanlab_api_key
    if plan.spec.swanlab_on and secret is not None:
        files[SECRET_FILE] = "SWANLAB_API_KEY=" + _sh(secret.get_secret_value()) + "\n"
    tracker_values = tracker_environment(plan.spec)
    if tracker_values:  # the trackers' settings and credentials: 0600, sourced by start_verl.sh, never in a script
        files[TRACKER_FILE] = tracker_file_text(tracker_values)
    if hands_over_token(plan.spec, extra or {}):
        try:
            files[rayauth.TOKEN_FILE] = rayauth.token_file_text()
        except rayauth.AuthError as exc:
            return error("ray_auth", exc.problem, exc.fix)
    files.update(extra or {})
    directory = Path(os.path.abspath(directory))
    fix = "choose a writable --output-dir with free space (nothing was changed)"
    try:
        if os.path.lexists(directory) and not os.path.isdir(directory):
            return error("output_dir", f"{directory} exists and is not a directory", "choose another --output-dir")
        directory.parent.mkdir(parents=True, exist_ok=True)
        with locked_directory(directory.parent, wait=LOCK_WAIT_SECONDS) as locked:
            if not locked:
                return error("output_dir", f"another verl-deploy is writing to {directory.parent} (waited "
                             f"{LOCK_WAIT_SECONDS:g} s)", "wait until it has finished, or choose another --output-dir")
            present = existing_outputs(directory, tuple(extra or ())) if directory.is_dir() else []
            if present and not force:
                return error("output_dir", f"{directory} already has {', '.join(present)}",
                             "pass --force to overwrite, or choose another --output-dir")
            _write_set(directory, files)
    except OSError as exc:
        return error("output_dir", f"cannot write to {directory}: {exc.strerror or exc}", fix)
    return Written(directory, sorted(files))


def _mode(name: str) -> int:
    return 0o755 if name.endswith(".sh") else 0o600


def _write_set(directory: Path, files: dict[str, str]) -> None:
    exists = directory.is_dir()
    staging = Path(tempfile.mkdtemp(dir=directory if exists else directory.parent, prefix=".verl-deploy-staging-"))
    try:
        for name, content in files.items():
            fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode(name))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(staging / name, _mode(name))
        if not exists:
            os.chmod(staging, 0o755 & ~_umask())
            os.rename(staging, directory)  # the whole set appears at once
            _fsync_dir(directory.parent)
            return
        _swap_in(directory, staging, files)
        _fsync_dir(directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _swap_in(directory: Path, staging: Path, files: dict[str, str]) -> None:
    """Rename the staged files over the old ones; on any failure restore every old file."""
    backup = staging / ".old"
    backup.mkdir()
    done: list[str] = []
    try:
        for name in sorted(set(SCRIPT_NAMES) | set(files)):
            target = directory / name
            if os.path.lexists(target):
                os.link(target, backup / name, follow_symlinks=False)
            if name in files:
                os.replace(staging / name, target)
            elif os.path.lexists(target):
                os.unlink(target)  # a stale swanlab.env must not outlive --swanlab no (kept in backup)
            done.append(name)
    except OSError:
        for name in done:
            if os.path.lexists(backup / name):
                os.replace(backup / name, directory / name)
            elif os.path.lexists(directory / name):
                os.unlink(directory / name)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
