#!/usr/bin/env python3
"""Write the per-release inventory of verl's configuration checks (docs/inventory/verl-X.md).

    python tools/rule_inventory.py --tree DIR --release 0.9.1     # one release, from a tree holding verl/
    python tools/rule_inventory.py --all                          # every release, from its wheel (pip download)

A tree is a checkout at the release's tag or the wheel's contents. For a new release: generate its
table, diff it against the last release's, and write a rule (or a profile change) for each check
that is new and "not covered".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from verl_deploy.rules import RULES
from verl_deploy.rules.inventory import RELEASES, table

OUT = Path(__file__).resolve().parents[1] / "docs" / "inventory"


def wheel_tree(release: str, into: Path) -> Path:
    """verl==release's wheel, unpacked (only verl/ is needed)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
                    "-d", str(into), f"verl=={release}"], check=True, timeout=300)
    wheel = next(into.glob("verl-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into / "tree", [n for n in archive.namelist() if n.startswith("verl/")])
    return into / "tree"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="a directory holding verl/ (checkout or unpacked wheel)")
    parser.add_argument("--release", help="the release that tree is, e.g. 0.9.1")
    parser.add_argument("--all", action="store_true", help=f"every release ({', '.join(RELEASES)}) from its wheel")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the tables go (default {OUT})")
    args = parser.parse_args()
    if not args.all and not (args.tree and args.release):
        parser.error("give --tree DIR --release X, or --all")
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(args.release, args.tree)] if not args.all else [(r, None) for r in RELEASES]
    for release, tree in jobs:
        with tempfile.TemporaryDirectory() as tmp:
            root = tree or wheel_tree(release, Path(tmp))
            if not (root / "verl").is_dir():
                print(f"error: {root} holds no verl/ directory", file=sys.stderr)
                return 2
            text = table(release, root, RULES)
            (args.out / f"verl-{release}.md").write_text(text)
            print(f"verl {release}: {text.splitlines()[3]} -> {args.out / f'verl-{release}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
