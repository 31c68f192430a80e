"""verify: verl's own validation of a plan, run where the training will run.

`verify_plan` sends the program from `program.py` to `python3 -` on the host (from the run
directory), inside the container (`docker exec -i -w RUN_DIR`), and turns the JSON it prints into
a `VerifyResult`; `findings_for` turns that into findings: verl's own message, the key, the fix.
Rules (checks.py) mirror verl's asserts everywhere; this runs verl's code itself where verl is.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from verl_deploy.verl_release import release_of
from verl_deploy.findings import Finding, error, info, warning
from verl_deploy.verify.entry_import import MISSING, docker_down, missing_package_fix
from verl_deploy.verify.program import build_program, parse_output

DEFAULT_TIMEOUT = 240.0


@dataclass
class VerifyResult:
    """What was verified where, by which verl, and how it went."""

    where: str
    status: str  # "passed" | "failed" | "unavailable" (no verl / no python there) | "error" (the run itself failed)
    verl_version: str | None = None
    verl_path: str | None = None
    entry: str = ""
    config_name: str = ""
    run_dir: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])[:500]


def command_for(run_dir: str, container: str | None, python: str) -> tuple[list[str], str | None, str]:
    """(argv, cwd, where) for running `python -` with the program on stdin."""
    if container:
        return ["docker", "exec", "-i", "-w", run_dir, container, python, "-"], None, f"container {container}"
    return [python, "-"], run_dir, "host"


def verify_plan(plan, *, container: str | None = None, python: str | None = None,
                timeout: float = DEFAULT_TIMEOUT, run_dir: str | None = None) -> VerifyResult:
    """Run verl's validation for this plan where it will run. Never raises for a missing verl or host.

    `run_dir` replaces the plan's run directory (a verify-env's tree when the run dir is not on this host)."""
    spec = plan.spec
    python = python or os.environ.get("VERL_DEPLOY_VERIFY_PYTHON", "python3")
    run_dir = run_dir or spec.run_dir
    argv, cwd, where = command_for(run_dir, container, python)
    base = dict(entry=plan.entry_module, config_name=plan.config_name, run_dir=run_dir)
    if cwd is not None and not os.path.isdir(cwd):
        return VerifyResult(where, "unavailable", detail=f"the run directory {run_dir} does not exist on this host", **base)
    program = build_program(plan.entry_module, plan.config_name, [o.text() for o in plan.overrides],
                            sections=plan.profile.dataclass_sections)
    env = dict(os.environ)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        done = subprocess.run(argv, input=program, capture_output=True, text=True, cwd=cwd, env=env,
                              timeout=timeout, errors="replace")
    except FileNotFoundError:
        return VerifyResult(where, "unavailable", detail=f"{argv[0]} not found", **base)
    except subprocess.TimeoutExpired:
        return VerifyResult(where, "error", detail=f"verl's validation did not finish within {timeout:g} s", **base)
    except OSError as exc:
        return VerifyResult(where, "unavailable", detail=str(exc), **base)
    return _result(parse_output(done.stdout), done.returncode, done.stderr, where, python, plan, base)


def _result(data: dict | None, returncode: int | None, stderr: str, where: str, python: str, plan,
            base: dict) -> VerifyResult:
    """The program's JSON (or its absence) as a VerifyResult."""
    run_dir = base["run_dir"]
    if data is not None and data.get("run_dir_missing"):
        return VerifyResult(where, "unavailable", detail=f"the run directory {run_dir} does not exist there", **base)
    if data is None:
        missing = returncode in (0, 126, 127) or "executable file not found" in stderr or "not found" in stderr[-300:]
        absent = "No such container" in stderr or "is not running" in stderr  # started (or made) by launch later
        status = "unavailable" if missing or absent else "error"
        return VerifyResult(where, status, detail=_tail(stderr) or f"exit status {returncode}", **base)
    if data.get("verl_missing"):
        return VerifyResult(where, "unavailable", detail=f"{python} there cannot import verl ({data['verl_missing']})",
                            **base)
    steps = [s for s in data.get("steps", []) if isinstance(s, dict)]
    return VerifyResult(where, "passed" if data.get("ok") else "failed", data.get("verl_version"),
                        data.get("verl_path"), plan.entry_module, plan.config_name, data.get("run_dir") or run_dir,
                        steps)


def verify_on_ray(plan, address: str, *, python: str = "python3", timeout: float = DEFAULT_TIMEOUT) -> VerifyResult:
    """Run the program as a Ray job (it runs on the head node), from the run directory there."""
    import shlex
    import tempfile
    import time
    from pathlib import Path

    spec = plan.spec
    where = f"Ray head ({address})"
    base = dict(entry=plan.entry_module, config_name=plan.config_name, run_dir=spec.run_dir)
    program = build_program(plan.entry_module, plan.config_name, [o.text() for o in plan.overrides], spec.run_dir,
                            plan.profile.dataclass_sections)
    try:
        from verl_deploy.backends.rayjobs import client

        jobs = client(address)
        with tempfile.TemporaryDirectory(prefix="verl-deploy-verify-") as tmp:
            Path(tmp, "verl_deploy_verify.py").write_text(program, encoding="utf-8")
            job = jobs.submit_job(entrypoint=f"{shlex.quote(python)} verl_deploy_verify.py",
                                  runtime_env={"working_dir": tmp})
        deadline = time.monotonic() + timeout
        while str(jobs.get_job_status(job)).rsplit(".", 1)[-1] not in ("SUCCEEDED", "FAILED", "STOPPED"):
            if time.monotonic() > deadline:
                jobs.stop_job(job)
                return VerifyResult(where, "error", detail=f"verl's validation did not finish within {timeout:g} s",
                                    **base)
            time.sleep(0.5)
        logs = jobs.get_job_logs(job)
        failed = str(jobs.get_job_status(job)).endswith("FAILED")
    except Exception as exc:  # an unreachable or refusing cluster is a result, not a crash
        return VerifyResult(where, "unavailable", detail=f"cannot run a job on {address}: {exc}"[:500], **base)
    return _result(parse_output(logs), 1 if failed else 0, logs, where, python, plan, base)


def check_area(plan, container: str | None):
    """check's "verl's own validation" area: verify where the run happens, as rows."""
    from verl_deploy.preflight.report import Area

    area = Area("verify", "verl's own validation")
    result = verify_plan(plan, container=container)
    area.data = result.as_dict()
    for finding in findings_for(result, plan, required=False):
        getattr(area, finding.level)(finding.field, finding.message, finding.fix)
    return area


# verl's words -> (our field, the knob whose verl key it names, the fix). First match wins; the message itself is
# always shown. The profile answers with the key (profiles are the one place that knows verl's keys).
HINTS: tuple[tuple[str, str, str, str], ...] = (
    (r"temperature", "temperature", "temperature",
     "set --temperature above 0 (verl samples the validation set with do_sample)"),
    (r"ppo_mini_batch_size|mini.?batch", "mini_batch_size", "mini_batch_size",
     "pick --mini-batch-size so that it and --batch-size divide as verl requires"),
    (r"real_train_batch_size|train_batch_size|minimal possible batch size", "batch_size", "train_batch_size",
     "pick --batch-size (x --n-resp-per-prompt) divisible by the data-parallel size"),
    (r"micro_batch", "micro_batch_size", "actor_micro_batch_size",
     "turn dynamic_batch on, or set a micro batch size that divides the mini batch"),
    (r"tensor_model_parallel|model_parallel_size|context_parallel|n_gpus", "train_tp", "train_tp",
     "choose --train-tp/--train-pp/--train-cp whose product divides the trainer devices"),
    (r"max_model_len|max_num_batched_tokens|max_token_len", "max_response_length", "max_model_len",
     "lower --max-response-length/--max-prompt-length or raise the token budget"),
)


def _key_of(plan, knob: str) -> str:
    spec = plan.spec
    try:
        found = plan.profile.keys_for(knob, spec.framework, spec.device, plan.mechanism)
    except KeyError:
        return ""
    return found[0].path if found else ""


def _hint(message: str, step: str, plan) -> tuple[str, str, str]:
    for pattern, field_name, knob, fix in HINTS:
        if re.search(pattern, message):
            return field_name, _key_of(plan, knob), fix
    section = step.split(":", 1)[1] if ":" in step else ""
    return "verl", section, "change the value verl names above (see `verl-deploy plan --json` for every override)"


def _entry_fix(plan) -> str:
    from verl_deploy.profiles.recipes import dapo_source, wheel_lacks_entry_note

    version = plan.spec.verl_version
    if plan.mechanism in plan.profile.wheel_lacks_entry.get(version, ()):
        return wheel_lacks_entry_note(version, plan.mechanism)

    if plan.mechanism == "dapo" and plan.entry_module.startswith("recipe."):
        source = dapo_source(plan.spec.verl_version)
        if source is not None:
            return source.checkout_command(plan.spec.run_dir, plan.spec.verl_version) + f" ({source.why})"
    return f"make {plan.entry_module} importable from {plan.spec.run_dir} (--run-dir: the verl source root)"


def _status_findings(result: VerifyResult, required: bool) -> list[Finding] | None:
    """Findings for a verify that did not run to the end (None: it did)."""
    where = result.where
    if result.status in ("unavailable", "error") and docker_down(result.detail):  # the environment, not the config
        return [error("docker", f"the Docker daemon does not answer, so verl's own validation could not run in the "
                                f"{where}: {result.detail}", "start Docker (`sudo systemctl start docker`), or pass "
                                                            "--no-verify to launch without verl's validation",
                      area="environment")]
    if result.status == "unavailable":
        level = error if required else info
        return [level("verify", f"verl's own validation did not run on the {where}: {result.detail}",
                      "run where verl is installed (--container NAME), or install verl there", area="verify")]
    if result.status == "error":
        return [error("verify", f"verl's own validation could not finish on the {where}: {result.detail}",
                      "run the same with `verl-deploy plan --verify --json` to see the output", area="verify")]
    return None


def _entry_step(step: dict, message: str, origin: str, missing, result: VerifyResult, plan) -> Finding:
    spec, where, version = plan.spec, result.where, result.verl_version or "?"
    ours = missing is not None and plan.entry_module.startswith(missing.group(1).split(".")[0] + ".")
    fix = missing_package_fix(missing.group(1), plan.entry_module, where, spec.container) \
        if missing and not ours else _entry_fix(plan)
    return error("entry", f"verl {version} on the {where}: {plan.entry_module} does not import: "
                 f"{step.get('error')}: {message}{origin}", fix,
                 area="environment" if missing and not ours else "verify")


def _import_step(step: dict, message: str, origin: str, missing, result: VerifyResult, plan) -> Finding:
    """verl's own code cannot be imported there: an incomplete install, never a fault in the user's config."""
    spec, where, version = plan.spec, result.where, result.verl_version or "?"
    module = missing.group(1) if missing else "a module"
    return error("verl", f"verl {version} on the {where} is not importable as a whole ({step.get('step', '')} needs "
                         f"{module}: {step.get('error')}: {message}{origin}); this is the environment, not the run's "
                         "config",
                 missing_package_fix(module, plan.entry_module, where, spec.container) if missing
                 else "install verl completely there, or pass --no-verify", area="environment")


def _step_finding(step: dict, result: VerifyResult, plan) -> Finding:
    """One failed step of verl's validation as a finding: verl's message, where it failed, the fix."""
    name = step.get("step", "")
    message = " ".join(str(step.get("message", "")).split())[:600]
    origin = f" ({step['where']})" if step.get("where") else ""
    import_error = step.get("error") in ("ModuleNotFoundError", "ImportError")
    missing = MISSING.search(message) if import_error else None
    version, where = result.verl_version or "?", result.where
    if name in ("locate_entry", "import_entry"):
        return _entry_step(step, message, origin, missing, result, plan)
    if missing or import_error:
        return _import_step(step, message, origin, missing, result, plan)
    if name == "compose" and (step.get("error") == "MissingConfigException" or "config directory" in message):
        return error("entry", f"the run directory {result.run_dir or plan.spec.run_dir} on the {where} lacks "
                              f"verl's config for {plan.entry_module}: {message}", _entry_fix(plan), area="environment")
    if name == "compose":
        return error("override", f"verl {version} on the {where} cannot compose {plan.config_name}: {message}",
                     "fix or drop the override Hydra names above", area="verify")
    field_name, key, fix = _hint(message, name, plan)
    at = f" [{key}]" if key else ""
    return error(field_name, f"verl {version} rejects the config in {name}{at}: {message}{origin}", fix, area="verify")


def findings_for(result: VerifyResult, plan, *, required: bool) -> list[Finding]:
    """Findings for a verify result. `required`: an unavailable verify is an error (asked for explicitly)."""
    stopped = _status_findings(result, required)
    if stopped is not None:
        return stopped
    found: list[Finding] = []
    planned = plan.spec.verl_version
    if result.verl_version and release_of(result.verl_version) != release_of(planned):
        found.append(error("verl_version", f"the {result.where} has verl {result.verl_version}, the plan is for verl "
                           f"{planned}", f"pass --verl-version {result.verl_version.split('+')[0]}, or use an image "
                           f"with verl {planned}", area="verify"))
    found += [_step_finding(step, result, plan) for step in result.steps if not step.get("ok")]
    if not found and result.status == "passed":
        checked = ", ".join(s["step"] for s in result.steps)
        found.append(info("verify", f"verl {result.verl_version or '?'} on the {result.where} accepts the config "
                          f"({checked})", area="verify"))
    return found
