"""`verl-deploy import` against verl's own launch scripts: how many import to an equivalent config.

Every fixture of tests/fixtures/imported_scripts/manifest.json (verl v0.6.1 and v0.7.0 DAPO, GRPO and
one-step-off scripts, and verl-recipe's, each with its source commit) is imported for its release, and
the importer's own check composes both launches with Hydra against that release's real config tree.
A script is *equivalent* when no key the check compares is left different. It prints the count, the
keys still left (how many scripts each), the scripts that have no verl-deploy mode and the scripts
refused because their own overrides do not compose on their release.

Run (after the README's test install, `pip install '.[test]'`): python benchmarks/import_equivalence.py [N] [TEXT] [--json]
(N: only the first N scripts of the manifest, for a quick look; TEXT: only the scripts whose fixture path holds
it, e.g. grpo_trainer; all 186 take about 54 s on 2 cores, 4 minutes before verlconfig/compose_cache.py)
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
FIXTURES = ROOT / "tests" / "fixtures"
SCRIPTS = FIXTURES / "imported_scripts"
RECIPES = {"verl-v0.6.1": (FIXTURES / "recipes" / "verl-v0.6.1", SCRIPTS / "verl-v0.6.1"),
           "verl-v0.7.0": (FIXTURES / "recipes" / "verl-v0.7.0", SCRIPTS / "verl-v0.7.0"),
           "verl-recipe-e7f8895": (FIXTURES / "recipes" / "verl-recipe-e7f8895",)}
ENV = {"HOME": "/home/user", "PWD": "/verl"}  # what the scripts read from the environment for their paths


def selected_rows() -> list[dict]:
    """The manifest's rows the command line asks for: N (the first N) and TEXT (fixture paths holding it)."""
    numbers = [int(arg) for arg in sys.argv[1:] if arg.isdigit()]
    words = [arg for arg in sys.argv[1:] if not arg.isdigit() and not arg.startswith("--")]
    only = words[0] if words else ""
    rows = [row for row in json.loads((SCRIPTS / "manifest.json").read_text()) if only in row["fixture"]]
    return rows[:numbers[0]] if numbers else rows


def measure(rows: list[dict]) -> dict:
    from verl_deploy.importer.build import import_script

    equivalent, left, no_mode, refused = [], collections.Counter(), [], []
    per_script: dict[str, list[str]] = {}
    mirrored = 0
    for row in rows:
        source = row["fixture"].split("/")[0]
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                result = import_script(str(SCRIPTS / row["fixture"]), verl_version=row["release"], environ=ENV,
                                       recipe_dirs=tuple(str(p) for p in RECIPES[source]))
        except Exception as exc:  # noqa: BLE001 - a script refused is a figure, not a crash
            refused.append(f"{row['fixture']}: {str(exc).splitlines()[0][:160]}")
            continue
        if result.problem:
            no_mode.append(f"{row['fixture']}: {result.problem[:120]}")
            continue
        mirrored += bool(result.mirrored)
        if result.equivalent:
            equivalent.append(row["fixture"])
        else:
            keys = sorted({d.key for d in result.remaining})
            per_script[row["fixture"]] = keys
            left.update(keys)
    return {"scripts": len(rows), "equivalent": len(equivalent), "with_mirrored_additions": mirrored,
            "left_keys": dict(left.most_common()), "not_equivalent": per_script, "no_mode": no_mode,
            "refused": refused}


def main() -> None:
    figures = measure(selected_rows())
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=2))
        return
    print(f"{figures['equivalent']} of {figures['scripts']} verl launch scripts import to an equivalent config "
          f"({figures['with_mirrored_additions']} with a key verl-deploy adds as a copy of one the script sets)")
    print(f"not equivalent: {len(figures['not_equivalent'])}; no verl-deploy mode: {len(figures['no_mode'])}; "
          f"refused (the script's own overrides do not compose): {len(figures['refused'])}")
    for key, count in figures["left_keys"].items():
        print(f"  {count:3d}  {key}")
    for name, keys in figures["not_equivalent"].items():
        print(f"  - {name}: {', '.join(keys)}")
    for line in figures["no_mode"] + figures["refused"]:
        print(f"  ! {line}")


if __name__ == "__main__":
    main()
