"""Maintainer tool: import every fixture script (tests/fixtures/imported_scripts) and print the figures:
how many are read, how many compose to a config, how many are equivalent, and which keys still differ.
Run: python tools/import_figures.py [FILTER]   (slow: composes each script's config with Hydra)"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from verl_deploy.importer.build import ImportProblem, import_script  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SCRIPTS = FIXTURES / "imported_scripts"
RECIPES = {"verl-v0.6.1": (FIXTURES / "recipes" / "verl-v0.6.1", SCRIPTS / "verl-v0.6.1"),
           "verl-v0.7.0": (FIXTURES / "recipes" / "verl-v0.7.0", SCRIPTS / "verl-v0.7.0"),
           "verl-recipe-e7f8895": (FIXTURES / "recipes" / "verl-recipe-e7f8895",)}
ENV = {"HOME": "/home/user", "PWD": "/verl"}


def main(only: str = "") -> None:
    counts: collections.Counter = collections.Counter()
    keys: collections.Counter = collections.Counter()
    for row in json.loads((SCRIPTS / "manifest.json").read_text()):
        if only not in row["fixture"]:
            continue
        source = row["fixture"].split("/")[0]
        try:
            result = import_script(str(SCRIPTS / row["fixture"]), verl_version=row["release"], environ=ENV,
                                   recipe_dirs=tuple(str(p) for p in RECIPES[source]))
        except ImportProblem as exc:
            kind = "refused by its own release" if "refuses the script" in str(exc) else "not importable"
            counts[kind] += 1
            print(f"{row['fixture']}: {kind}: {exc}")
            continue
        if result.problem:
            counts["read; no mode runs its entry (GRPO main_ppo)"] += 1
            continue
        if result.equivalent:
            counts["equivalent"] += 1
        else:
            counts["differs only on keys a field or feature owns"] += 1
            keys.update(d.key for d in result.remaining)
        print(f"{row['fixture']}: {len(result.remaining)} key(s) differ", flush=True)
    print(json.dumps(dict(counts), indent=1))
    print("keys that still differ (scripts):")
    for key, count in keys.most_common():
        print(f"  {count:3d} {key}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
