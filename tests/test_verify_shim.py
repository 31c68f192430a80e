"""The verify environment's `python3` shim: one text for every path that reaches the environment, and a
rewrite that a running `sh` never sees half of (two commands once shared one environment, one through a
symlink, and the verify that ran while the other rewrote the shim printed nothing)."""

from __future__ import annotations

import os
import subprocess
import sys

from verl_deploy.verify import localenv


def _fake_env(tmp_path, version="0.9.1"):
    real_root = tmp_path / "cache"
    site = real_root / f"verl-{version}"
    (site / "verl").mkdir(parents=True)
    (site / "verl" / "__init__.py").write_text("__version__ = '%s'\n" % version)
    (site / ".complete").write_text(localenv._marker(version))
    linked_root = tmp_path / "per-test"
    linked_root.mkdir()
    (linked_root / f"verl-{version}").symlink_to(site)
    return real_root, linked_root, site


def test_the_shim_is_the_same_through_a_symlink_and_is_not_rewritten(tmp_path):
    real_root, linked_root, site = _fake_env(tmp_path)
    first = localenv.find("0.9.1", where=real_root)
    shim = site / "bin" / "python3"
    before = shim.stat()
    through_link = localenv.find("0.9.1", where=linked_root)
    assert through_link is not None and first is not None
    after = shim.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not written again
    assert f'PYTHONPATH="{site.resolve()}' in shim.read_text()
    ran = subprocess.run([str(through_link.python), "-c", "import verl, sys; print(verl.__version__, sys.executable)"],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["0.9.1", sys.executable]
    assert os.access(shim, os.X_OK)


def test_a_rewrite_replaces_the_file_so_a_reader_of_the_old_one_reads_it_whole(tmp_path):
    real_root, _, site = _fake_env(tmp_path)
    shim = site / "bin" / "python3"
    shim.parent.mkdir()
    old = '#!/bin/sh\nexec /an/interpreter/that/moved "$@"\n'
    shim.write_text(old)
    with open(shim, encoding="utf-8") as reader:  # what a running `sh` holds open
        assert localenv.find("0.9.1", where=real_root) is not None
        assert reader.read() == old
    assert sys.executable in shim.read_text()
    assert [p.name for p in shim.parent.iterdir()] == ["python3"]  # no temp file left
