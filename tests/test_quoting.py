"""Any string reaches verl unchanged through bash and Hydra, and never executes."""

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from verl_deploy.hydra_text import format_value, quote
from verl_deploy.pipeline import prepare
from verl_deploy.render import plan_document, write_outputs

from conftest import recorded_argv, run_scripts

PARSER = OverridesParser.create()
TEMPLATE = Path(__file__).resolve().parents[1] / "src/verl_deploy/templates/run_training.sh.j2"
# printable text without control characters (the spec refuses those with a clear error)
TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=40)
# a run name becomes a directory (checkpoints/PROJECT/EXPERIMENT): no '/', no leading '.' (the spec refuses those)
DIR_NAME = TEXT.filter(lambda text: "/" not in text and not text.startswith(".") and text.strip())
NASTY = ["/data/it's \"my\" $(model)", "a\\", "\\'", "${oc.env:HOME}", "\\${x}", "a,b", "[1,2]", "x=y",
         "`touch pwned`", "$(touch pwned)", "'; touch pwned; '", "null", "True", "1e-6", " lead", "ü/模型"]


def through_hydra(encoded: str):
    """What verl's config holds after Hydra parses `k=<encoded>` and OmegaConf resolves it."""
    override = PARSER.parse_override(f"k={encoded}")
    cfg = OmegaConf.create({"k": override.value()})
    return cfg.k


def bash_hq(values: list[str]) -> list[str]:
    body = TEMPLATE.read_text()
    function = body[body.index("hq() {"):body.index("{% endraw %}")]
    script = function + '\nfor v in "$@"; do hq "$v"; printf "\\0"; done\n'
    out = subprocess.run(["bash", "-c", script, "hq", *values], capture_output=True, timeout=60)
    return out.stdout.decode().split("\0")[:-1]


@given(TEXT)
@settings(max_examples=300, deadline=None)
def test_python_quote_round_trips_through_hydra_and_omegaconf(text):
    assert through_hydra(quote(text)) == text


@given(st.lists(TEXT, min_size=1, max_size=30))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_bash_hq_matches_python_quote(values):
    assert bash_hq(values) == [quote(v) for v in values]


@pytest.mark.parametrize("text", NASTY)
def test_nasty_values_round_trip(text):
    assert through_hydra(quote(text)) == text
    assert bash_hq([text]) == [quote(text)]


def test_plain_literals_stay_readable():
    assert format_value("grpo") == "grpo"
    assert format_value(True) == "True" and format_value(None) == "null"
    assert format_value(["console", "swanlab"]) == "[console,swanlab]"
    assert format_value("null") == "'null'"


@given(path=TEXT.filter(lambda t: not t.startswith("-")), name=DIR_NAME)  # a leading '-' is refused (an option to tools)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
def test_every_string_field_reaches_verl_unchanged_and_never_executes(tmp_path_factory, path, name):
    tmp = tmp_path_factory.mktemp("q")
    from conftest import STUB_PYTHON, STUB_RAY

    stubs = {"bin": tmp / "bin", "log": tmp / "log", "verl_root": tmp / "root"}
    for d in stubs.values():
        d.mkdir()
    for stub_name, text in (("python3", STUB_PYTHON), ("ray", STUB_RAY)):
        (stubs["bin"] / stub_name).write_text(text)
        (stubs["bin"] / stub_name).chmod(0o755)
    (stubs["verl_root"] / "recipe/dapo").mkdir(parents=True)
    (stubs["verl_root"] / "recipe/dapo/main_dapo.py").write_text("")
    values = {"model_path": path, "train_file": path + ".parquet", "test_file": "/t/" + path,
              "ckpts_dir": path, "project_name": name, "experiment_name": name}
    prepared = prepare(flags={**values, "run_dir": str(stubs["verl_root"])}, environ={}, check_verl=False)
    assert prepared.ok, [f.line() for f in prepared.findings]
    out = tmp / "out"
    write_outputs(prepared.plan, out, plan_document(prepared.plan, [], None), force=False)
    result = run_scripts(out, stubs)
    assert result.returncode == 0, result.stderr
    parsed = {}
    for arg in recorded_argv(stubs)[3:]:
        override = PARSER.parse_override(arg)
        parsed[override.key_or_group] = OmegaConf.create({"v": override.value()}).v
    a = "actor_rollout_ref."
    assert parsed[a + "model.path"] == path
    assert parsed["data.train_files"] == path + ".parquet"
    assert parsed["data.val_files"] == "/t/" + path
    assert parsed["trainer.default_local_dir"] == path
    assert parsed["trainer.project_name"] == name
    assert parsed["trainer.experiment_name"] == name
    assert not list(tmp.rglob("pwned")) and not Path("pwned").exists()
