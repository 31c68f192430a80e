"""The static bash reader against real bash: for each script, the argv `python3` would receive when bash
runs it equals what the reader reads without running it. bash runs here with a `python3` on PATH that
only writes its argv as JSON (the reader itself never runs anything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_deploy.importer.launch import find_launch
from verl_deploy.importer.shell import Unknown, read_script, read_text

PREFIX = "python3 -m verl.trainer.main_ppo"

SCRIPTS = {
    "defaults": """
        A=${A:-7}
        B=${UNSET_B:-"with space"}
        C=${UNSET_C-dash}
        : ${D:=assigned}
        E=${A:+alt}
        F=${#B}
        export G="$A-$D"
        python3 -m verl.trainer.main_ppo k.a=$A k.b="$B" k.c=$C k.d=$D k.e=$E k.f=$F k.g=$G
    """,
    "arithmetic": """
        max_prompt_length=$((1024 * 2))
        max_response_length=$((1024 * 20))
        sp=3
        tok=$(((max_prompt_length + max_response_length) / sp))
        neg=$(( -7 / 2 ))
        mod=$(( -7 % 3 ))
        t=$(( sp > 2 ? 10 : 20 ))
        p=$(( 2 ** 10 << 1 ))
        python3 -m verl.trainer.main_ppo a=$tok b=$neg c=$mod d=$t e=$p f=$((max_prompt_length+max_response_length))
    """,
    "arrays and splitting": """
        ARGS="x.a=1   x.b=2"
        arr=(y.a=1 "y.b=two words" y.c=3)
        arr+=(y.d=4)
        python3 -m verl.trainer.main_ppo $ARGS "${arr[@]}" z.first=${arr[0]} z.n=${#ARGS}
    """,
    "quoting and continuation": """
        name='DAPO-Qwen3'
        python3 -m verl.trainer.main_ppo \\
            trainer.logger=['console','wandb'] \\
            trainer.project_name="${name}" \\
            'quoted.single=$name' \\
            "quoted.double=$name" \\
            esc=a\\ b \\
            +new.key=1 \\
            ++forced.key=2 \\
            ~deleted.key
    """,
    "ray job submit": """
        export RUNTIME_ENV=${RUNTIME_ENV:-/tmp/runtime_env.yaml}
        ray job submit --no-wait --runtime-env="${RUNTIME_ENV}" \\
            -- python3 -m verl.trainer.main_ppo --config-path=config --config-name='ppo_trainer.yaml' \\
            data.train_batch_size=16
    """,
    "set-flags and pipes": """
        set -xeuo pipefail
        LR=1e-6
        python3 -m verl.trainer.main_ppo actor.lr=$LR 2>&1 | tee log.txt
    """,
    "name-like defaults": """
        actor_lr=${ACTOR_LR:-1e-6}
        kl=${KL_COEF:-1e-3}
        name=${NAME:-qwen3-8b.run_1}
        python3 -m verl.trainer.main_ppo a.lr=${actor_lr} a.kl=$kl a.name=$name a.inline=${UNSET_X:-2e-5}
    """,
    "branches bash takes": """
        DEVICE=${DEVICE:-npu}
        INFER_BACKEND=vllm
        NNODES=2
        if [ "$DEVICE" = gpu ]; then
            tp=2
        elif [[ "${DEVICE}" == n* && $NNODES -gt 1 ]]; then
            tp=4
        else
            tp=8
        fi
        case "${DEVICE}" in
            gpu | cuda) util=0.8 ;;
            npu*) util=0.6
                  EXTRA=(x.npu=1 "x.quoted=a b") ;;
            *) echo "unknown device"; exit 1 ;;
        esac
        [ "${NNODES}" -gt 1 ] && pp_override=2 || pp_override=null
        [ -z "${UNSET_Q:-}" ] && q=empty
        [[ -n "$INFER_BACKEND" ]] || q=never
        if (( NNODES * 4 > 6 )); then big=yes; fi
        if ! [ "$INFER_BACKEND" != vllm ]; then engine=vllm-ok; fi
        python3 -m verl.trainer.main_ppo r.tp=$tp r.util=$util a.pp=$pp_override q=$q big=$big e=$engine "${EXTRA[@]}"
        exit 0
        echo never reached
    """,
    "arrays with comments and functions": """
        DATA=(
            # the data
            data.train_batch_size=64  # inline
            data.max_prompt_length=$((512 * 2))
        )
        launch() {
            local extra=$1
            shift
            python3 -m verl.trainer.main_ppo "${DATA[@]}" extra=$extra rest="$*" n=$# count=${#DATA[@]}
        }
        LATE+=(late.key=1)
        launch first second third "${LATE[@]}"
    """,
    "parameter transforms": """
        MODEL_PATH=/models/Qwen/Qwen3-8B-Base.v2
        name=${MODEL_PATH##*/}
        stem=${name%.*}
        dir=${MODEL_PATH%/*}
        first=${MODEL_PATH#/*/}
        dashed=${name//-/_}
        one=${name/-/+}
        sub=${name:0:5}
        tail=${name:6}
        upper=${stem^^}
        lower=${stem,,}
        ( inside=1; export NOT_OUTSIDE=1 )
        python3 -m verl.trainer.main_ppo n=$name s=$stem d=$dir f=$first x=$dashed o=$one b=$sub t=$tail \\
            u=$upper l=$lower i=${inside:-unset}
    """,
}


def _bash_argv(tmp_path: Path, text: str) -> list[str]:
    """What `python3` receives when real bash runs the script (python3 and ray are argv recorders)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    out = tmp_path / "argv.json"
    recorder = bin_dir / "python3"
    recorder.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import json,sys; '
                        f'json.dump(sys.argv[1:], open(\'{out}\', \'w\'))" "$@"\n')
    recorder.chmod(0o755)
    ray = bin_dir / "ray"  # `ray job submit ... -- CMD`: the recorder sees CMD, as the job would run it
    ray.write_text('#!/bin/bash\nwhile [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n')
    ray.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(text)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(["bash", str(script)], check=True, env=env, cwd=tmp_path, capture_output=True, timeout=60)
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_reader_reads_what_bash_runs(tmp_path, name):
    text = "\n".join(line[8:] if line.startswith(" " * 8) else line for line in SCRIPTS[name].splitlines())
    expected = _bash_argv(tmp_path, text)
    reading = read_script(tmp_path / "run.sh")
    launch = find_launch(reading)
    words = [w.text for w in next(c for c in reading.commands if c.line == launch.line).words]
    start = words.index("python3")
    assert words[start + 1:] == expected
    assert not [u for u in reading.unreadable if "not set" in u.why and "UNSET" not in u.why]


def test_settings_keep_prefix_key_value_and_line(tmp_path):
    text = "\n".join(line[8:] for line in SCRIPTS["quoting and continuation"].splitlines())
    launch = find_launch(read_text(text))
    by_key = {s.key: s for s in launch.settings}
    assert by_key["new.key"].prefix == "+" and by_key["forced.key"].prefix == "++"
    assert by_key["deleted.key"].prefix == "~" and by_key["deleted.key"].value is None
    assert by_key["trainer.project_name"].value == "DAPO-Qwen3" and by_key["trainer.project_name"].line == 5
    ray = find_launch(read_text("\n".join(line[8:] for line in SCRIPTS["ray job submit"].splitlines())))
    assert ray.via_ray_job and ray.config_path == "config" and ray.config_name == "ppo_trainer"


def test_what_cannot_be_read_is_listed_with_its_line_never_guessed(tmp_path):
    (tmp_path / "common.sh").write_text("FROM_SOURCED=42\n")
    script = tmp_path / "run.sh"
    script.write_text("\n".join([
        "source ./common.sh",  # 1: present: read
        "source ./missing.sh",  # 2: missing: listed
        "NOW=$(date +%s)",  # 3: command substitution
        "for i in 1 2; do X=$i; done",  # 4: a loop
        f"{PREFIX} a.sourced=$FROM_SOURCED a.now=$NOW a.home=$HOME_DIR_UNSET a.loop=$X b.ok=1",  # 5
    ]) + "\n")
    reading = read_script(script)
    lines = {(u.line, u.why.split(" ")[0]) for u in reading.unreadable}
    assert any(line == 2 and "missing.sh" in u.why for u in reading.unreadable for line in [u.line])
    assert (3, "command") in lines and any(u.line == 4 and "loop" in u.why for u in reading.unreadable)
    launch = find_launch(reading)
    assert {s.key: s.value for s in launch.settings} == {"a.sourced": "42", "b.ok": "1"}  # nothing guessed
    assert "HOME_DIR_UNSET" in reading.environment  # read from the environment; X is the loop's, not known
    assert isinstance(reading.variables["X"], Unknown) and "a for loop at line 4" in reading.variables["X"].why


def test_environment_values_given_are_used_and_recorded(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f'MODEL_PATH=${{MODEL_PATH:-"$HOME/models/Qwen3-8B"}}\n{PREFIX} m=$MODEL_PATH\n')
    reading = read_script(script, {"HOME": "/home/me"})
    assert find_launch(reading).settings[0].value == "/home/me/models/Qwen3-8B"
    assert reading.environment["MODEL_PATH"][1] == "/home/me/models/Qwen3-8B"  # the default the script used
    assert not reading.unreadable
    assert os.environ.get("MODEL_PATH") is None  # the reader reads no real environment


def test_a_branch_the_reader_cannot_decide_is_listed_with_what_decides_it():
    text = "\n".join([
        "DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}",
        "EXTRA=(a.fixed=1)",
        'case "${DEVICE}" in',  # 3
        "    gpu) tp=2 ;;",
        "    npu) tp=4; EXTRA+=(a.npu=1) ;;",
        "esac",
        f'{PREFIX} r.tp=$tp "${{EXTRA[@]}}" keep=1',
    ]) + "\n"
    reading = read_text(text)
    # nothing the branch sets is guessed: tp and the element it may add are left out, the rest is read
    assert {s.key: s.value for s in find_launch(reading).settings} == {"a.fixed": "1", "keep": "1"}
    note = next(u for u in reading.unreadable if u.line == 3)
    assert "$DEVICE" in note.why and "--env DEVICE=VALUE" in note.why and "(tp, EXTRA)" in note.why, note.why
    given = read_text(text, environ={"DEVICE": "npu"})  # the environment decides it: followed as bash would
    assert {s.key: s.value for s in find_launch(given).settings} == {"r.tp": "4", "a.fixed": "1", "a.npu": "1",
                                                                      "keep": "1"}
    assert given.unreadable == []  # the default's command substitution is not run when DEVICE is given


def test_a_script_that_exits_before_its_launch_has_no_launch_and_says_where():
    from verl_deploy.importer.launch import NoLaunch

    reading = read_text('if [ "$#" -lt 1 ]; then\n  echo "usage: run.sh MODEL"\n  exit 1\nfi\n'
                        f"{PREFIX} m=$1\n")
    with pytest.raises(NoLaunch, match="exits at line 3"):
        find_launch(reading)


def test_a_setting_from_an_array_keeps_the_line_it_is_written_on():
    launch = find_launch(read_text("ARGS=(\n  a.one=1\n  a.two=2\n)\nX=3\n"
                                   f'{PREFIX} "${{ARGS[@]}}" a.three=$X\n'))
    assert [(s.key, s.line) for s in launch.settings] == [("a.one", 2), ("a.two", 3), ("a.three", 6)]


def test_python_options_before_the_module_are_read_past():
    for head in ("python3 -u -m", "python3 -X faulthandler -m", "PYTHONUNBUFFERED=1 python -B -Wignore -m"):
        launch = find_launch(read_text(f"{head} verl.trainer.main_ppo a.b=1\n"))
        assert (launch.entry, [s.text for s in launch.settings]) == ("verl.trainer.main_ppo", ["a.b=1"]), head
