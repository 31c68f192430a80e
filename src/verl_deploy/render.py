"""Renderer: Plan -> start_verl.sh, run_training.sh, plan.json (and swanlab.env for the secret).

Everything is rendered in memory first and written only when complete, each file through a
temporary file and an atomic rename, so an interrupted write never leaves half a script.
The same plan always gives byte-identical files.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verl_deploy import __version__
from verl_deploy.compiler import GROUPS, Override, Plan
from verl_deploy.findings import Finding, error
from verl_deploy.hydra_text import format_value

SCRIPT_NAMES = ("start_verl.sh", "run_training.sh", "plan.json", "swanlab.env")
SECRET_FILE = "swanlab.env"


def _sh(value: object) -> str:
    return shlex.quote(str(value))


def _shvalue(value: object) -> str:
    """A variable's value for bash: Hydra-style literals for bool/None, quoted text otherwise."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return _sh(format_value(value))
    return _sh(value)


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(loader=PackageLoader("verl_deploy", "templates"), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["sh"] = _sh
    env.filters["shvalue"] = _shvalue
    return env


def override_line(override: Override) -> str:
    """One override as bash text: variables go through `hq` (strings) or plain expansion."""
    if override.var is not None:
        if isinstance(override.value, str):
            return f'{override.prefix}{override.key}="$(hq "${{{override.var}}}")"'
        return f'{override.prefix}{override.key}="${{{override.var}}}"'
    return _sh(override.text())


def summary(plan: Plan) -> str:
    spec = plan.spec
    return f"{spec.mode}, {spec.framework}, {len(spec.devices)} {spec.device.upper()}"


def swanlab_env(plan: Plan) -> list[tuple[str, str]]:
    spec = plan.spec
    if not spec.swanlab_on:
        return []
    env = [("SWANLAB_MODE", spec.swanlab_mode), ("SWANLAB_WORKSPACE", spec.swanlab_workspace),
           ("SWANLAB_LOG_DIR", spec.swanlab_log_dir), ("SWANLAB_PROJECT", spec.project_name)]
    if spec.swanlab_host:
        env.insert(0, ("SWANLAB_HOST", spec.swanlab_host))
    return env


def entry_fix(plan: Plan) -> str:
    """How to get an entry module that imports with this release (the recipe source and the command)."""
    from verl_deploy.profiles.recipes import dapo_source

    spec = plan.spec
    source = dapo_source(spec.verl_version) if spec.mode == "dapo" else None
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
    if plan.profile.is_recipe_entry(spec.mode):
        entry_file = plan.entry_module.replace(".", "/") + ".py"
        entry_hint = entry_fix(plan)
    common = {"tool_version": __version__, "verl_version": spec.verl_version, "summary": summary(plan)}
    start = env.get_template("start_verl.sh.j2").render(
        **common, set_env_scripts=plan.platform.set_env_scripts, env=plan.env, master_addr=spec.master_addr,
        ray_port=spec.ray_port, swanlab_env=swanlab_env(plan), run_dir=spec.run_dir, entry_module=plan.entry_module,
        entry_fix=entry_fix(plan),
        ray_resources=plan.platform.ray_resource_args(len(spec.devices)), nnodes=spec.nnodes,
        devices_per_node=len(spec.devices), ray_resource=plan.platform.ray_resource, nodes=spec.nodes)
    run = env.get_template("run_training.sh.j2").render(
        **common, feature_line=f"mask {plan.mask}; {states}", groups=[g for g in groups if g[1]],
        run_dir=spec.run_dir, entry_file=entry_file, entry_hint=entry_hint,
        entry_module=plan.entry_module, config_name=plan.config_name,
        override_lines=[override_line(o) for o in plan.overrides])
    return {"start_verl.sh": start, "run_training.sh": run}


def plan_document(plan: Plan, findings: list[Finding], checked_against: str | None) -> dict:
    """plan.json: the resolved spec with sources, the overrides, the verl version. No secrets."""
    spec = plan.spec
    values = spec.model_dump(mode="json")
    if spec.swanlab_api_key is not None:
        values["swanlab_api_key"] = "****" + spec.swanlab_api_key.get_secret_value()[-4:]
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
        },
        "features": [s.as_dict() for s in plan.features],
        "mask": plan.mask,
        "overrides": [o.text() for o in plan.overrides],
        "environment": dict(plan.env),
        "findings": [f.as_dict() for f in findings],
    }


@dataclass
class Written:
    directory: Path
    files: list[str]


def existing_outputs(directory: Path) -> list[str]:
    return [name for name in SCRIPT_NAMES if (directory / name).exists()]


def write_outputs(plan: Plan, directory: Path, document: dict, *, force: bool) -> Written | Finding:
    """Write the scripts, plan.json and (if there is a key) swanlab.env; refuse to overwrite without force."""
    files = render_scripts(plan)
    files["plan.json"] = json.dumps(document, indent=2, sort_keys=False) + "\n"
    secret = plan.spec.swanlab_api_key
    if plan.spec.swanlab_on and secret is not None:
        files[SECRET_FILE] = "SWANLAB_API_KEY=" + _sh(secret.get_secret_value()) + "\n"
    if directory.exists() and not directory.is_dir():
        return error("output_dir", f"{directory} exists and is not a directory", "choose another --output-dir")
    present = existing_outputs(directory) if directory.is_dir() else []
    if present and not force:
        return error("output_dir", f"{directory} already has {', '.join(present)}",
                     "pass --force to overwrite, or choose another --output-dir")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            mode = 0o600 if name == SECRET_FILE else (0o755 if name.endswith(".sh") else 0o644)
            _write_atomic(directory / name, content, mode)
        if SECRET_FILE not in files and (directory / SECRET_FILE).exists():
            (directory / SECRET_FILE).unlink()  # a stale key must not outlive --swanlab no
    except OSError as exc:
        return error("output_dir", f"cannot write to {directory}: {exc.strerror or exc}",
                     "choose a writable --output-dir")
    return Written(directory, sorted(files))


def _write_atomic(path: Path, content: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
