"""Maintainer tool: copy verl's DAPO, GRPO and one-step-off launch scripts (and the one-step-off recipe
configs they name) from git mirrors into tests/fixtures/imported_scripts/, with a manifest of where each
came from. Run: python tools/collect_imported_scripts.py VERL_GIT_DIR VERL_RECIPE_GIT_DIR"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "imported_scripts"
SCRIPTS = re.compile(r"^(recipe/dapo|examples/grpo_trainer|recipe/one_step_off_policy)/.*\.sh$|"
                     r"^(dapo|one_step_off_policy)/.*\.sh$")
CONFIGS = re.compile(r"^recipe/one_step_off_policy/config/.*\.yaml$")
# (name, repository, ref, release the scripts run with, git dir argument index)
SOURCES = [("verl-v0.6.1", "verl-project/verl", "v0.6.1", "0.6.1", 0),
           ("verl-v0.7.0", "verl-project/verl", "v0.7.0", "0.7.0", 0),
           ("verl-recipe-e7f8895", "verl-project/verl-recipe", "e7f889574b8301cc0f0fc1d57c6d67f31ffeb689", "0.8.0", 1)]


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout


def main(git_dirs: list[str]) -> None:
    manifest = []
    for name, repo, ref, release, which in SOURCES:
        git_dir = git_dirs[which]
        commit = git(git_dir, "rev-parse", ref + "^{commit}").strip()
        for path in git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines():
            if not (SCRIPTS.match(path) or CONFIGS.match(path)) or "prepare_" in path:
                continue
            target = OUT / name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                                              check=True, capture_output=True).stdout)
            if path.endswith(".sh"):
                manifest.append({"fixture": f"{name}/{path}", "repository": repo, "ref": ref, "commit": commit,
                                 "path": path, "release": release})
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} scripts")


if __name__ == "__main__":
    main(sys.argv[1:3])
