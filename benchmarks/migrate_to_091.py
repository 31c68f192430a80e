"""`import --to 0.9.1` of verl's own launch scripts, then verl 0.9.1's own validation of the result.

Every fixture of tests/fixtures/imported_scripts/manifest.json is imported for its release and migrated
to verl 0.9.1 (`verl-deploy import SCRIPT --to 0.9.1`), then planned with `plan --verify --verify-env`:
verl 0.9.1's config classes validate the composed config on this CPU box (verl 0.9.1 installed by
`verify-env`, with the DAPO recipe 0.9.1 pins). It prints how many pass, and for the others the first
error, so each is a figure with its cause. A script refused at import (its own overrides do not compose
on its release) is counted apart.

Run (after the README's test install, `pip install '.[test]'`; the first run installs verl 0.9.1):
python benchmarks/migrate_to_091.py [N] [TEXT] [--json]   (N: the first N scripts; TEXT: only fixture paths
holding it; all 186 take about 20 minutes on 2 cores)
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
from import_equivalence import FIXTURES, RECIPES, SCRIPTS, selected_rows  # noqa: E402  (this folder)

ENV = ["--env", "HOME=/home/user", "--env", "PWD=/verl"]  # what the scripts read from the environment


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_deploy", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=900)


def first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")[:200]


def measure(rows: list[dict]) -> dict:
    from verl_deploy.profiles.recipes import dapo_source

    source = dapo_source("0.9.1")
    recipe = FIXTURES / "recipes" / f"verl-recipe-{source.short}"
    ready = cli("verify-env", "0.9.1", "--recipe", str(recipe), "--json")
    if ready.returncode != 0:
        raise SystemExit(f"verify-env 0.9.1 failed: {first_line(ready.stderr)}")
    run_dir = json.loads(ready.stdout)["run_dir"]
    passed, failed, refused = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, row in enumerate(rows):
            out = Path(tmp) / f"{index}.yaml"
            recipes = [arg for path in RECIPES[row["fixture"].split("/")[0]] for arg in ("--recipe-dir", str(path))]
            imported = cli("import", str(SCRIPTS / row["fixture"]), "--output", str(out), "--verl-version",
                           row["release"], "--to", "0.9.1", *ENV, *recipes, "--json")
            if imported.returncode != 0:
                refused[row["fixture"]] = first_line(imported.stderr)
                continue
            findings = json.loads(imported.stdout)["migrated"]["findings"]
            head = ["--master-addr", "10.0.0.1"] if any(f["field"] == "master_addr" for f in findings) else []
            planned = cli("plan", "--config", str(out), "--run-dir", run_dir, *head, "--verify", "--verify-env",
                          "--json")
            try:
                result = json.loads(planned.stdout)
            except json.JSONDecodeError:
                failed[row["fixture"]] = first_line(planned.stderr)
                continue
            errors = [f"{f['field']}: {f['message']}" for f in result.get("findings", []) if f["level"] == "error"]
            if planned.returncode == 0 and result.get("verify", {}).get("status") == "passed":
                passed.append(row["fixture"])
            else:
                failed[row["fixture"]] = (errors[0] if errors else str(result.get("verify")))[:200]
            print(f"{index + 1}/{len(rows)} {row['fixture']}: {'passed' if row['fixture'] in passed else 'FAILED'}",
                  file=sys.stderr, flush=True)
    return {"scripts": len(rows), "passed": len(passed), "failed": failed, "refused_at_import": refused}


def main() -> None:
    figures = measure(selected_rows())
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['passed']} of {figures['scripts']} verl launch scripts, imported and migrated to 0.9.1, pass "
          f"verl 0.9.1's own validation; {len(figures['refused_at_import'])} refused at import")
    for name, why in figures["failed"].items():
        print(f"  - {name}: {why}")
    for name, why in figures["refused_at_import"].items():
        print(f"  ! {name}: {why}")


if __name__ == "__main__":
    main()
