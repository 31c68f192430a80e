"""Each RunSpec field is declared once (spec.py), and what is generated from the declarations holds together."""

from __future__ import annotations

from collections import Counter

import pytest

from verl_deploy.declared import FieldMeta, sections, spec_field
from verl_deploy.spec import DECLARED, RunSpec, env_vars


def test_every_flag_has_help_and_a_panel_and_names_one_field():
    flags = Counter(flag for meta in DECLARED.values() for flag in meta.flags)
    assert [flag for flag, count in flags.items() if count > 1] == []
    for name, meta in DECLARED.items():
        if meta.flags:
            assert meta.help and meta.panel, name
            assert all(flag.startswith("-") for flag in meta.flags), name


def test_an_environment_variable_names_one_field_and_the_later_one_wins():
    declared = [variable for meta in DECLARED.values() for variable in meta.env]
    assert len(declared) == len(set(declared))
    names = list(env_vars())
    assert env_vars()["TEST_FILE"] == env_vars()["VAL_FILE"] == "test_file"
    assert names.index("VAL_FILE") < names.index("TEST_FILE")  # the seeds' TEST_FILE wins over verl's VAL_FILE


def test_the_cli_options_are_the_declared_flags():
    from verl_deploy.cli.options import SPEC_OPTIONS

    options = {name: option for name, _, option in SPEC_OPTIONS}
    for name, meta in DECLARED.items():
        if meta.flags:
            assert tuple(options[name].param_decls) == meta.flags and options[name].help == meta.help, name
        else:
            assert name not in options, name


def test_a_generic_wizard_round_can_ask_each_of_its_fields():
    from verl_deploy.wizard.rounds import ASKED_BY, ROUND_FIELDS

    for round_name, names in ROUND_FIELDS.items():
        for name in names:
            assert name in ASKED_BY or DECLARED[name].ask, f"{round_name}: {name} has no question"


def test_a_field_placed_after_another_of_its_section_lands_there():
    metas = {"a": FieldMeta(view="S"), "b": FieldMeta(view="S"), "c": FieldMeta(view="S", follows={"view": "a"}),
             "d": FieldMeta(view="S", follows={"view": "a"}), "e": FieldMeta(view="S", follows={"view": "start"}),
             "f": FieldMeta(view="T")}
    assert sections(metas, "view", ("T", "S")) == [("T", ["f"]), ("S", ["e", "a", "c", "d", "b"])]
    with pytest.raises(AssertionError, match="not in their section"):
        sections({**metas, "g": FieldMeta(view="T", follows={"view": "a"})}, "view", ("S", "T"))
    with pytest.raises(AssertionError, match="not among"):
        sections(metas, "view", ("S",))


def test_a_declaration_keeps_the_fields_pydantic_limits():
    field = RunSpec.model_fields["train_steps"]
    assert FieldMeta.of(field).flag == "--train-steps" and any(getattr(m, "ge", None) == 1 for m in field.metadata)
    declared = FieldMeta.of(spec_field(3, ge=1, flags=("--x", "-x"), env="X", help="X.", panel="Run"))
    assert (declared.flags, declared.env, declared.follows, declared.view) == (("--x", "-x"), ("X",), {}, None)
