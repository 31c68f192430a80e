"""`--json` is the whole contract: every outcome of every command, off a terminal, is one JSON document on
stdout; a failure's document lists every finding with level, field, message and fix.

Each command with --json runs here in a way that fails and in a way that succeeds (the launch and its
run are in tests/test_agent_path.py); commands without --json refuse it as one document too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, VERL_BIN, child_env

BAD_LOG = "RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; " \
          "49.47 GiB already allocated; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch)\n"


def one_document(env: dict, *args: str) -> tuple[int, dict]:
    done = subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=child_env({**os.environ, **env}), timeout=240)
    try:
        document = json.loads(done.stdout)  # the whole of stdout: exactly one document
    except ValueError as exc:
        raise AssertionError(f"`verl-deploy {' '.join(args)}` (exit {done.returncode}): stdout is not one JSON "
                             f"document ({exc}):\n{done.stdout[:1500]}\nstderr: {done.stderr[-1500:]}") from None
    assert isinstance(document, dict)
    assert "printed no JSON document" not in done.stdout, f"`verl-deploy {' '.join(args)}` needed the backstop"
    if done.returncode != 0:
        findings = document.get("findings") or []
        errors = [f for f in findings if f.get("level") == "error"]
        assert document.get("ok") is False or document.get("class"), document
        if "class" not in document:  # diagnose's document is the diagnosis itself
            assert errors, f"`verl-deploy {' '.join(args)}` failed without an error finding: {document}"
            for finding in errors:
                assert set(finding) >= {"level", "field", "message", "fix"} and finding["message"], finding
    return done.returncode, document


@pytest.fixture()
def host(npu_host, tmp_path):
    log = tmp_path / "oom.log"
    log.write_text(BAD_LOG)
    return {"env": npu_host["env"], "root": str(npu_host["root"]), "tmp": tmp_path, "log": str(log)}


CASES = [
    # (name, args, expected exit codes); {root}, {tmp}, {log} are filled in
    ("check ok", ["check", "--search-root", "{root}", "--no-verify", "--json"], {0, 1}),
    ("check fails", ["check", "--search-root", "{root}", "--devices", "0-15", "--no-verify", "--json"], {1}),
    ("plan ok", ["plan", "--json"], {0}),
    ("plan fails", ["plan", "--train-tp", "3", "--json"], {1}),
    ("plan bad value", ["plan", "--train-steps", "many", "--json"], {2}),
    ("plan unknown flag", ["plan", "--no-such-flag", "--json"], {2}),
    ("plan --check fails", ["plan", "--check", "--search-root", "{root}", "--train-tp", "3", "--json"], {1}),
    ("generate ok", ["generate", "--output-dir", "{tmp}/out", "--json"], {0}),
    ("generate fails", ["generate", "--output-dir", "{tmp}/out2", "--train-tp", "3", "--json"], {1}),
    ("launch bad notify", ["launch", "--notify", "notaurl", "--dry-run", "--json"], {1}),
    ("launch dry-run fails", ["launch", "--search-root", "{root}", "--train-tp", "3", "--dry-run", "--json"], {1}),
    ("launch refused", ["launch", "--search-root", "{root}", "--train-tp", "3", "--yes", "--json"], {1}),
    ("runs", ["runs", "--json"], {0}),
    ("status no run", ["status", "--json"], {1}),
    ("status unknown run", ["status", "nosuchrun", "--json"], {1}),
    ("report no run", ["report", "nosuchrun", "--json"], {1}),
    ("evidence no run", ["evidence", "nosuchrun", "--json"], {1}),
    ("resume no run", ["resume", "nosuchrun", "--json"], {1}),
    ("diagnose ok", ["diagnose", "{log}", "--json"], {0, 1}),
    ("diagnose missing file", ["diagnose", "{tmp}/none.log", "--json"], {1, 2}),
    ("features ok", ["features", "--mask", "1010000", "--json"], {0}),
    ("features fails", ["features", "--mask", "12", "--json"], {1, 2}),
    ("verify-env bad version", ["verify-env", "not-a-version", "--json"], {1, 2}),
    ("logs has no --json", ["logs", "--json"], {2}),
    ("stop has no --json", ["stop", "x", "--json"], {2}),
    ("unknown command", ["frobnicate", "--json"], {2}),
]


@pytest.mark.parametrize("name, args, codes", CASES, ids=[c[0] for c in CASES])
def test_every_outcome_is_one_json_document(host, name, args, codes):
    filled = [a.format(root=host["root"], tmp=host["tmp"], log=host["log"]) for a in args]
    code, _ = one_document(host["env"], *filled)
    assert code in codes, (name, code)


def test_the_skill_documents_the_exit_codes():
    text = (Path(__file__).resolve().parents[1] / "skills" / "verl-deploy" / "SKILL.md").read_text()
    assert "## Exit status" in text
    section = text.split("## Exit status", 1)[1].split("\n## ", 1)[0]
    for code in ("`0`", "`1`", "`2`"):
        assert code in section, code


def test_the_diagnosis_of_an_oom_log_has_its_class(host):
    code, document = one_document(host["env"], "diagnose", host["log"], "--json")
    assert document["class"] == "device_oom"


def test_check_findings_name_the_field(host):
    code, document = one_document(host["env"], "check", "--search-root", host["root"], "--devices", "0-15",
                                  "--no-verify", "--json")
    assert code == 1 and all("field" in f for f in document["findings"])
    assert FIXTURES.is_dir()
