"""`import --to 0.9.1` of verl's own launch scripts, then verl 0.9.1's own validation of the result.

Every fixture of tests/fixtures/imported_scripts/manifest.json is imported for its release and migrated to
verl 0.9.1 (what `verl-deploy import SCRIPT --to 0.9.1` does: import_script, migrate_values, the config text
it writes), then planned from that config file (pipeline.prepare, as `plan --config` does: rules and memory) and
checked with verl 0.9.1's own validation: the same program `plan --verify --verify-env` sends (verify.program,
built from the plan's entry, config name and overrides), run by the python of `verify-env 0.9.1` (verl 0.9.1
installed on this CPU box, with the DAPO recipe 0.9.1 pins) in its run directory. The programs run in batches in
one interpreter, so verl and torch are imported once per batch instead of once per script (about 20 minutes
instead of hours on 2 cores); tests/test_migrate.py runs the same scripts through the CLI.

A script that ran the DAPO recipe trainer moves to DAPO in verl's core (main_ppo, V1 sync) and a one-step-off
script to the V1 trainer's separate_async mode, as `migrate` does by default; `--keep` keeps both old trainers
instead (`migrate --dapo-source recipe` / `--mode one-step-off`). The figures count each trainer apart.

It prints how many pass, and for the others the first error, so each is a figure with its cause. A script
refused at import (its own overrides do not compose on its release) is counted apart, and so is a script
whose validation needs a package a CPU box does not have (verl's validate_config imports vLLM to check a LoRA
rank when the rollout is vLLM).

Run (after the README's test install, `pip install '.[test]'`; the first run installs verl 0.9.1):
python benchmarks/migrate_to_091.py [N] [TEXT] [--keep] [--json]   (N: the first N scripts; TEXT: only fixture
paths holding it)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from import_equivalence import ENV, FIXTURES, RECIPES, SCRIPTS, selected_rows  # noqa: E402  (this folder)

TARGET = "0.9.1"
BATCH = 12
NEEDS_VLLM = "vllm version None not supported"  # verl/third_party/vllm/__init__.py: vLLM is not installed here
# runs each program (a verify.program text) in this interpreter and prints its result line as one JSON string
DRIVER = r"""
import contextlib, io, json, sys
for program in json.load(sys.stdin):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(program, "<verify>", "exec"), {"__name__": "__main__"})
    except SystemExit:
        pass
    except BaseException as exc:
        out.write("\nCRASH %r" % (exc,))
    lines = [l for l in out.getvalue().splitlines() if l.startswith("VERL_DEPLOY_VERIFY ") or l.startswith("CRASH")]
    sys.__stdout__.write(json.dumps(lines[-1] if lines else "") + "\n")
    sys.__stdout__.flush()
"""


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")[:200]


def verify_env() -> tuple[str, str]:
    """(python, run_dir) of verl 0.9.1's verify environment (built once by `verl-deploy verify-env`)."""
    from verl_deploy.profiles.recipes import dapo_source

    recipe = FIXTURES / "recipes" / f"verl-recipe-{dapo_source(TARGET).short}"
    ready = subprocess.run([sys.executable, "-m", "verl_deploy", "verify-env", TARGET, "--recipe", str(recipe), "--json"],
                           capture_output=True, text=True, timeout=3600)
    if ready.returncode != 0:
        raise SystemExit(f"verify-env {TARGET} failed: {first_line(ready.stderr)}")
    data = json.loads(ready.stdout)
    return data["python"], data["run_dir"]


TRAINERS: dict[str, str] = {}  # fixture -> the trainer its migration chose (for the recipe DAPO / one-step-off ones)


def kept_trainer(result) -> dict[str, str]:
    """--keep: migrate's flags that keep the DAPO recipe trainer / one-step-off on 0.9.1."""
    if "--keep" not in sys.argv:
        return {}
    if result.mechanism == "dapo":
        return {"dapo_source": "recipe"}
    return {"mode": "one-step-off"} if result.mode == "one-step-off" else {}


def trainer_of(result, migration) -> str:
    """What a recipe DAPO or one-step-off script runs after the migration ("" for the others)."""
    if result.mechanism == "dapo":
        return "DAPO in verl's core" if migration.values.get("dapo_source") == "core" else "the DAPO recipe trainer"
    if result.mode == "one-step-off":
        return "separate-async" if migration.values.get("mode") == "separate-async" else "one-step-off"
    return ""


def by_trainer(outcome: dict[str, dict[str, str]]) -> dict[str, dict[str, int]]:
    """trainer -> {scripts, passed} of the recipe DAPO and one-step-off scripts."""
    counts: dict[str, dict[str, int]] = {}
    for kind, scripts in outcome.items():
        for fixture in scripts:
            trainer = TRAINERS.get(fixture)
            if trainer:
                entry = counts.setdefault(trainer, {"scripts": 0, "passed": 0})
                entry["scripts"] += 1
                entry["passed"] += kind == "passed"
    return counts


def planned(row: dict, folder: Path, run_dir: str):
    """The migrated config's plan, or (kind, why) when it stops before verl's validation."""
    from verl_deploy.findings import UserError
    from verl_deploy.importer.build import ImportProblem, import_script
    from verl_deploy.importer.configout import render, write
    from verl_deploy.importer.migrate import MigrateProblem, migrate_values, render_migrated
    from verl_deploy.pipeline import prepare

    recipes = tuple(str(p) for p in RECIPES[row["fixture"].split("/")[0]])
    try:
        result = import_script(str(SCRIPTS / row["fixture"]), verl_version=row["release"], environ=ENV,
                               recipe_dirs=recipes)
        if result.problem:
            return "refused", result.problem
        migration = migrate_values(result.config_values(), TARGET, check=False, **kept_trainer(result))
    except (ImportProblem, MigrateProblem) as exc:
        return "refused", str(exc).splitlines()[0][:200]
    TRAINERS[row["fixture"]] = trainer_of(result, migration)
    config = write(folder / "migrated.yaml", render_migrated(render(result, row["fixture"]), migration))
    nodes = int(migration.values.get("nnodes") or 1)
    flags = {"run_dir": run_dir, **({"master_addr": "10.0.0.1"} if nodes > 1 else {})}  # no script names its head
    try:
        prepared = prepare(flags=flags, config_file=str(config), environ=dict(os.environ))
    except UserError as exc:
        return "failed", f"{exc.findings[0].field}: {exc.findings[0].message}"[:200]
    errors = [f"{f.field}: {f.message}" for f in prepared.findings if f.level == "error"]
    if errors or prepared.plan is None:
        return "failed", (errors[0] if errors else "no plan")[:200]
    return prepared.plan


def validate(python: str, run_dir: str, plans: list) -> list[dict | None]:
    """verl's own validation of each plan (verify.program), one interpreter per batch."""
    from verl_deploy.verify.program import build_program, parse_output

    programs = [build_program(p.entry_module, p.config_name, [o.text() for o in p.overrides]) for p in plans]
    done = subprocess.run([python, "-c", DRIVER], input=json.dumps(programs), capture_output=True, text=True,
                          cwd=run_dir, timeout=300 * len(programs), env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('"')]
    lines += [""] * (len(plans) - len(lines))
    return [parse_output(line) for line in lines]


def verdict(data: dict | None) -> tuple[str, str]:
    if data is None:
        return "failed", "verl's validation printed no result (it crashed)"
    if data.get("ok"):
        return "passed", ""
    failed = next((s for s in data.get("steps", []) if not s.get("ok")), {})
    why = f"{failed.get('step')}: {failed.get('message', '')}"[:200]
    return ("needs_package" if NEEDS_VLLM in why else "failed"), why


def measure(rows: list[dict]) -> dict:
    python, run_dir = verify_env()
    outcome: dict[str, dict[str, str]] = {"passed": {}, "failed": {}, "needs_package": {}, "refused": {}}
    pending: list[tuple[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, row in enumerate(rows):
            folder = Path(tmp) / str(index)
            folder.mkdir()
            plan = planned(row, folder, run_dir)
            if isinstance(plan, tuple):
                outcome[plan[0]][row["fixture"]] = plan[1]
            else:
                pending.append((row["fixture"], plan))
            if len(pending) == BATCH or (index == len(rows) - 1 and pending):
                for (fixture, _), data in zip(pending, validate(python, run_dir, [p for _, p in pending])):
                    kind, why = verdict(data)
                    outcome[kind][fixture] = why
                pending = []
                print(f"{index + 1}/{len(rows)}: {len(outcome['passed'])} passed", file=sys.stderr, flush=True)
    return {"scripts": len(rows), "passed": len(outcome["passed"]), "failed": outcome["failed"],
            "needs_package": outcome["needs_package"], "refused_at_import": outcome["refused"],
            "by_trainer": by_trainer(outcome)}


def main() -> None:
    figures = measure(selected_rows())
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['passed']} of {figures['scripts']} verl launch scripts, imported and migrated to {TARGET}, pass "
          f"verl {TARGET}'s own validation; {len(figures['refused_at_import'])} refused at import; "
          f"{len(figures['needs_package'])} need vLLM installed for verl's validation")
    for trainer, counts in figures["by_trainer"].items():
        print(f"  {trainer}: {counts['passed']} of {counts['scripts']} recipe DAPO / one-step-off scripts migrated to "
              "it pass")
    for name, why in figures["failed"].items():
        print(f"  - {name}: {why}")
    for name, why in {**figures["needs_package"], **figures["refused_at_import"]}.items():
        print(f"  ! {name}: {why}")


if __name__ == "__main__":
    main()
