"""`verl-deploy init` through a real pseudo-terminal (pexpect), the blocking confirmation, SwanLab login.

The host is test_check's fake Ascend host (npu-smi, docker, ray fakes speaking real formats);
the wizard is driven with real keys: Enter, arrows, typing.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import pyte
import yaml

from conftest import VERL_BIN, child_env, run_cli

DOWN, UP = "\x1b[B", "\x1b[A"
CLEAR = "\x7f" * 300  # backspaces: erase the prefilled text


class Terminal:
    """The CLI on a real pseudo-terminal; its output also drawn on a pyte screen, as a user would see it."""

    def __init__(self, args: list[str], env: dict):
        # the host's fakes, and the tree under test
        full = child_env(dict(os.environ, **env, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", COLUMNS="140", LINES="50"))
        self.child = pexpect.spawn(VERL_BIN[0], [*VERL_BIN[1:], *args], env=full, encoding="utf-8",
                                   dimensions=(50, 140), timeout=30)
        self.raw = ""
        self.seen = 0
        self.screen = pyte.Screen(140, 50)
        self.stream = pyte.Stream(self.screen)

    def _feed(self, text: str) -> None:
        self.raw += text
        self.stream.feed(text)

    def _read(self, timeout: float) -> bool:
        try:
            self._feed(self.child.read_nonblocking(65536, timeout=timeout))
            return True
        except pexpect.TIMEOUT:
            return False
        except pexpect.EOF:
            raise AssertionError("the command ended early:\n" + "\n".join(self.screen.display)) from None

    def answer(self, question: str, keys: str = "\r", timeout: float = 30) -> None:
        """Wait for the next prompt containing `question`, let it draw itself, then type `keys`."""
        deadline = time.monotonic() + timeout
        while question not in self.raw[self.seen:]:
            assert time.monotonic() < deadline, f"no {question!r} on:\n" + "\n".join(self.screen.display)
            self._read(0.2)
        self.seen = self.raw.index(question, self.seen) + len(question)
        while self._read(0.15):  # keys typed before the prompt is up would be echoed by the terminal
            pass
        self.child.send(keys)

    def shows(self, text: str, timeout: float = 10) -> bool:
        """Wait until `text` is on the screen (drawn, whatever the escape codes in between)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.screen.display):
                return True
            self._read(0.2)
        return False

    def expect_on_screen(self, text: str) -> None:
        assert self.shows(text), f"{text!r} not on:\n" + "\n".join(self.screen.display)

    def finish(self) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self._feed(self.child.read_nonblocking(65536, timeout=0.5))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                break
        self.child.close()
        return self.child.exitstatus


def start(host, config: Path, *extra: str) -> Terminal:
    return Terminal(["init", "--search-root", str(host["root"]), "--config", str(config), *extra], host["env"])


HYPER_PARAMETERS = ("Training steps", "Batch size", "Learning rate", "Tensor parallel", "Pipeline parallel",
                    "Responses per prompt", "Max prompt length", "Max response length")


def accept(term: Terminal, questions: tuple[str, ...] = HYPER_PARAMETERS) -> None:
    for question in questions:
        term.answer(question)


def basics(term: Terminal, model_answers: tuple[str, ...] = ("\r",)) -> None:
    term.answer("Training on")
    term.answer("Device ids")
    for keys in model_answers:
        term.answer("Model directory", keys)
    term.answer("Training data")
    term.answer("Test data")
    term.answer("Mode")
    term.answer("Framework")
    term.answer("Checkpoint directory")  # after the framework: the derived directory names it
    term.answer("Container for the run")  # the running verl-npu container is first


def test_accepting_every_prefilled_value_writes_a_config_that_reloads(npu_host):
    config = npu_host["tmp"] / "run.yaml"
    term = start(npu_host, config)
    basics(term)
    term.answer("Log to SwanLab")
    term.answer("Features")
    accept(term)
    assert term.finish() == 0, term.raw[-2000:]
    data = yaml.safe_load(config.read_text())
    assert data["model_path"] == str(npu_host["root"] / "models" / "Qwen3-8B")
    assert data["devices"] == list(range(8)) and data["container"] == "verl-npu" and data["swanlab"] is False
    assert config.read_text().startswith("# verl-deploy configuration")
    assert "one-step-off-policy" in term.raw and "colocate-async" not in term.raw  # verl 0.7.0's modes only
    plan = json.loads(run_cli("plan", "--config", str(config), "--json", "--ignore-detected", env=npu_host["env"]).stdout)
    for name in ("model_path", "train_file", "test_file", "container", "train_tp", "train_pp", "train_steps"):
        assert plan["spec"][name] == data[name], name
        assert plan["sources"][name] == f"file {config}"


def test_the_mode_question_offers_the_async_modes_of_the_release_and_asks_the_device_split(npu_host):
    """#25: on verl 0.9.1 init offers every mode the release has; a split mode asks the trainer/rollout devices,
    and the layout questions that follow are checked against the trainer's share."""
    config = npu_host["tmp"] / "run.yaml"
    term = start(npu_host, config, "--verl-version", "0.9.1")
    for question in ("Training on", "Device ids", "Model directory", "Training data", "Test data"):
        term.answer(question)
    for label in ("colocated DAPO", "one-step-off-policy", "colocate-async: V1 trainer", "separate-async: V1 trainer",
                  "fully-async: rollout and training fully apart"):
        term.expect_on_screen(label)
    term.answer("Mode", DOWN * 3 + "\r")  # dapo, one-step-off, colocate-async, separate-async
    term.answer("Trainer devices", CLEAR + "8\r")
    term.expect_on_screen("a whole number from 1 to 7")  # the rollout needs a device of its own
    term.child.send(CLEAR + "6\r")
    term.answer("Rollout devices", CLEAR + "3\r")
    term.expect_on_screen("a whole number from 1 to 2 (trainer + rollout <= 8 devices)")
    term.child.send(CLEAR + "2\r")
    for question in ("Framework", "Checkpoint directory", "Container for the run", "Log to SwanLab", "Features",
                     "Training steps", "Batch size", "Learning rate"):
        term.answer(question)
    term.answer("Tensor parallel", CLEAR + "4\r")
    term.expect_on_screen("TP = 4 does not divide the 6 trainer devices")
    term.child.send(CLEAR + "2\r")
    term.answer("Pipeline parallel", CLEAR + "3\r")  # prefilled 1: TP 2 x PP 2 does not divide 6 either
    accept(term, HYPER_PARAMETERS[-3:])
    assert term.finish() == 0, term.raw[-2000:]
    data = yaml.safe_load(config.read_text())
    assert (data["mode"], data["trainer_gpus"], data["rollout_gpus"]) == ("separate-async", 6, 2)
    assert (data["train_tp"], data["train_pp"]) == (2, 3)
    result = run_cli("plan", "--config", str(config), "--verl-version", "0.9.1", "--json", "--ignore-detected",
                     env=npu_host["env"])
    plan = json.loads(result.stdout)
    assert plan["spec"]["mode"] == "separate-async" and plan["sources"]["trainer_gpus"] == f"file {config}"
    assert "trainer.v1.trainer_mode=separate_async" in plan["overrides"]
    assert "actor_rollout_ref.rollout.n_gpus_per_node=2" in plan["overrides"]
    assert "trainer.n_gpus_per_node=6" in plan["overrides"]


def test_changing_the_model_and_the_mask_with_a_live_decode(npu_host):
    other = npu_host["tmp"] / "other-model"
    other.mkdir()  # init refuses a model directory that is not there
    config = npu_host["tmp"] / "run.yaml"
    term = start(npu_host, config)
    basics(term, model_answers=(DOWN + "\r", CLEAR + f"{other}\r"))  # "enter a path…", then the text
    term.answer("Log to SwanLab")
    term.answer("Features", DOWN + DOWN + "\r")  # "enter a 7-bit mask"
    term.answer("Mask", CLEAR + "1010000")
    assert term.shows("on: remove_padding, offload")  # decoded beside the prompt as it is typed
    term.child.send("\r")
    accept(term)
    assert term.finish() == 0, term.raw[-2000:]
    data = yaml.safe_load(config.read_text())
    assert data["model_path"] == str(other) and data["mask"] == "1010000"


def test_a_tp_that_does_not_divide_the_devices_is_refused_at_the_prompt(npu_host):
    config = npu_host["tmp"] / "run.yaml"
    term = start(npu_host, config)
    basics(term)
    term.answer("Log to SwanLab")
    term.answer("Features")
    term.answer("Training steps", CLEAR + "12\r")
    term.answer("Batch size")
    term.answer("Learning rate")
    term.answer("Tensor parallel", CLEAR + "3\r")
    term.expect_on_screen("TP = 3 does not divide the 8 trainer devices")
    term.child.send(CLEAR + "2\r")
    term.answer("Pipeline parallel", CLEAR + "3\r")
    term.expect_on_screen("TP x PP = 6 does not divide the 8 trainer devices")
    term.child.send(CLEAR + "4\r")
    accept(term, HYPER_PARAMETERS[-3:])
    assert term.finish() == 0
    data = yaml.safe_load(config.read_text())
    assert (data["train_tp"], data["train_pp"], data["train_steps"]) == (2, 4, 12)


def test_the_swanlab_key_is_hidden_kept_0600_and_never_in_the_config(npu_host):
    secret = "sk-wizard-secret-9876"
    config = npu_host["tmp"] / "run.yaml"
    term = start(npu_host, config)
    basics(term)
    term.answer("Log to SwanLab", "y")
    term.answer("SwanLab host", "http://10.0.0.1:8000\r")
    term.answer("SwanLab API key", secret + "\r")
    term.answer("SwanLab mode")
    term.answer("Workspace")
    term.answer("Log directory")
    term.answer("Project name")
    term.answer("Features")
    accept(term)
    assert term.finish() == 0, term.raw[-2000:]
    assert secret not in term.raw and not any(secret in line for line in term.screen.display)
    text = config.read_text()
    assert secret not in text and yaml.safe_load(text)["swanlab_host"] == "http://10.0.0.1:8000"
    key_file = Path(npu_host["env"]["VERL_DEPLOY_CONFIG_DIR"]) / "swanlab_api_key"
    assert key_file.read_text().strip() == secret
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # plan uses the kept key (masked), and the key is not asked again
    plan = json.loads(run_cli("plan", "--config", str(config), "--json", env=npu_host["env"]).stdout)
    assert plan["sources"]["swanlab_api_key"] == "secret file" and secret not in json.dumps(plan)


def test_init_without_a_terminal_says_so(npu_host):
    result = run_cli("init", env=npu_host["env"])
    assert result.returncode == 1 and "needs a terminal" in result.stderr and "Traceback" not in result.stderr


# -- the confirmation --------------------------------------------------------------------------------

def recording_docker(tmp_path: Path) -> tuple[Path, Path]:
    """A docker that records every call (and knows no container, so `create` would run it)."""
    bin_dir = tmp_path / "rec-bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.calls"
    (bin_dir / "docker").write_text(f"""#!/usr/bin/env bash
printf '%s\\n' "$*" >> {log}
case "$1" in
  inspect|container) echo '[]'; echo "Error: No such object: ${{@: -1}}" >&2; exit 1 ;;
  image) exit 0 ;;
  run) echo 0123456789abcdef; exit 0 ;;
esac
exit 0
""")
    (bin_dir / "docker").chmod(0o755)
    return bin_dir, log


def ascend_nodes(tmp_path: Path) -> Path:
    """Stand-in NPU device nodes (character devices made with mknod), as /dev has them on an Ascend host."""
    if os.geteuid() != 0:
        pytest.skip("mknod of the stand-in NPU device nodes needs root")
    devs = tmp_path / "dev"
    devs.mkdir()
    for node in [f"davinci{i}" for i in range(8)] + ["davinci_manager", "devmm_svm", "hisi_hdc"]:
        os.mknod(devs / node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return devs


CHANGING = re.compile(r"^(run|start|pull|load|create|rm|cp|exec|stop|restart)\b")


def test_no_side_effect_before_yes(tmp_path, npu_host):
    bin_dir, log = recording_docker(tmp_path)
    devs = ascend_nodes(tmp_path)
    driver = tmp_path / "driver"
    (driver / "usr/local/bin").mkdir(parents=True)
    (driver / "usr/local/bin/npu-smi").write_text("")
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{npu_host['env']['PATH']}", VERL_DEPLOY_DEV_ROOT=str(devs),
               VERL_DEPLOY_DRIVER_ROOT=str(driver))

    def changing_calls() -> list[str]:
        return [c for c in log.read_text().splitlines() if CHANGING.match(c)] if log.exists() else []

    result = run_cli("container", "create", "my/image:1", "c1", env=env)  # no terminal, no --yes
    assert result.returncode == 2 and "pass --yes" in result.stderr
    assert not changing_calls()  # only read-only questions (does c1 exist?) before the answer
    term = Terminal(["container", "create", "my/image:1", "c1"], env)
    term.answer("Proceed? [y/N]", "n\r")
    assert term.finish() == 1 and "nothing was changed" in term.raw
    assert not changing_calls()
    result = run_cli("container", "create", "my/image:1", "c1", "--yes", "--devices", "0,1",
                     "--http-proxy", "http://user:pw@proxy:3128", env=env)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    run = next(c for c in calls if c.startswith("run "))
    assert f"--device {devs}/davinci0:/dev/davinci0 --device {devs}/davinci1:/dev/davinci1 " \
           f"--device {devs}/davinci_manager:/dev/davinci_manager" in run
    assert f"-v {driver}/usr/local/bin/npu-smi:/usr/local/bin/npu-smi" in run and "--net=host" in run
    assert "/usr/local/dcmi" not in run  # absent on this host: not mounted (docker would create it empty)
    assert "--env-file" in run and "user:pw" not in run  # the proxy goes through a file
    assert run.endswith("-- my/image:1 sleep infinity")


def test_the_summary_shows_sources_and_masks_the_key(tmp_path, npu_host):
    bin_dir, log = recording_docker(tmp_path)
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{npu_host['env']['PATH']}", SWANLAB_API_KEY="sk-abcdefgh1234",
               VERL_DEPLOY_DEV_ROOT=str(ascend_nodes(tmp_path)))
    result = run_cli("container", "create", "img", "c1", "--swanlab", "yes", "--swanlab-host", "http://h:1", env=env)
    assert "****1234" in result.stderr and "sk-abcdefgh1234" not in result.stderr
    assert "env SWANLAB_API_KEY" in result.stderr and "flag --swanlab-host" in result.stderr


# -- SwanLab login -------------------------------------------------------------------------------------

def recording_swanlab(tmp_path: Path, home: Path) -> Path:
    """A `python3` first on PATH that stands in for swanlab's Python API the way `swanlab login` calls it
    (`python3 -c PROBE`, then `python3 -c LOGIN` with the key on stdin): it records argv, the key it read and
    the host swanlab would use, writes the login file swanlab writes, and contacts nothing. Anything else runs
    the test environment's real python."""
    bin_dir = tmp_path / "swan-bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"""#!/usr/bin/env bash
printf '%s\\0' "$@" >> {tmp_path}/python3.argv
if [ "$1" = -c ]; then
  case "$2" in
    *"import swanlab; print("*) echo "0.10.3"; exit 0 ;;
    *"swanlab.login("*)
      IFS= read -r key
      printf '%s' "$key" > {tmp_path}/swanlab.stdin
      printf '%s' "${{SWANLAB_API_HOST:-}}" > {tmp_path}/swanlab.host
      mkdir -p "$HOME/.swanlab" && printf 'machine x\\n' > "$HOME/.swanlab/.netrc"
      echo 'LOGIN {{"ok": true, "saved": null}}'
      exit 0 ;;
  esac
fi
exec "{sys.executable}" "$@"
""")
    (bin_dir / "python3").chmod(0o755)
    return bin_dir


def test_swanlab_login_key_only_on_stdin(tmp_path, npu_host):
    home = Path(npu_host["env"]["HOME"])
    bin_dir = recording_swanlab(tmp_path, home)
    secret = "sk-login-5555"
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{npu_host['env']['PATH']}", SWANLAB_API_KEY=secret)
    result = run_cli("swanlab", "login", "--swanlab-host", "http://127.0.0.1:9", env=env)
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / "python3.argv").read_text()
    assert "swanlab.login(" in argv and secret not in argv  # swanlab's API, the key never in argv
    assert (tmp_path / "swanlab.stdin").read_text() == secret
    assert (tmp_path / "swanlab.host").read_text() == "http://127.0.0.1:9/api"  # the private host, as swanlab reads it
    assert "login verified" in result.stdout and secret not in result.stdout + result.stderr


def test_swanlab_login_env_wins_over_the_kept_key(tmp_path, npu_host, monkeypatch):
    from verl_deploy.secrets import save_swanlab_key

    bin_dir = recording_swanlab(tmp_path, Path(npu_host["env"]["HOME"]))
    config_dir = tmp_path / "cfg"
    monkeypatch.setenv("VERL_DEPLOY_CONFIG_DIR", str(config_dir))
    save_swanlab_key("sk-kept-1111")
    assert stat.S_IMODE((config_dir / "swanlab_api_key").stat().st_mode) == 0o600
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{npu_host['env']['PATH']}", VERL_DEPLOY_CONFIG_DIR=str(config_dir))
    assert run_cli("swanlab", "login", env=env).returncode == 0
    assert (tmp_path / "swanlab.stdin").read_text() == "sk-kept-1111"
    assert run_cli("swanlab", "login", env=dict(env, SWANLAB_API_KEY="sk-env-2222")).returncode == 0
    assert (tmp_path / "swanlab.stdin").read_text() == "sk-env-2222"
    no_key = run_cli("swanlab", "login", env=dict(env, VERL_DEPLOY_CONFIG_DIR=str(tmp_path / "empty")))
    assert no_key.returncode == 1 and "no API key" in no_key.stderr


def test_values_from_the_environment_are_not_asked_again(npu_host):
    config = npu_host["tmp"] / "run.yaml"
    env = dict(npu_host["env"], SWANLAB_HOST="http://10.9.9.9:8000", SWANLAB_API_KEY="sk-env-key-4321", TRAIN_STEPS="7")
    term = Terminal(["init", "--search-root", str(npu_host["root"]), "--config", str(config)], env)
    basics(term)
    term.answer("Log to SwanLab", "y")
    term.answer("SwanLab mode")  # host and key come from the environment: not asked
    term.answer("Workspace")
    term.answer("Log directory")
    term.answer("Project name")
    term.answer("Features")
    accept(term, HYPER_PARAMETERS[1:])  # steps come from TRAIN_STEPS
    assert term.finish() == 0, term.raw[-2000:]
    assert "SwanLab host" not in term.raw and "API key (hidden)" not in term.raw and "Training steps" not in term.raw
    assert "from env SWANLAB_HOST" in term.raw and "sk-env-key-4321" not in term.raw


# -- the seeds' script names ----------------------------------------------------------------------------

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def script(name: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    full["PATH"] = f"{Path(sys.executable).parent}:{full['PATH']}"
    return subprocess.run(["bash", str(SCRIPTS / name), *args], capture_output=True, text=True, env=full, timeout=240)


def test_seed_scripts_are_thin_wrappers_that_work(tmp_path, npu_host):
    decoded = script("feature_mask.sh", "1010000", "--json", env=npu_host["env"])
    bits = {row["feature"]: row["on"] for row in json.loads(decoded.stdout)["bits"]}
    assert bits["offload"] and bits["remove_padding"] and not bits["dynamic_batch"]
    assert script("feature_mask.sh", env=npu_host["env"]).returncode == 2
    assert script("preflight_check.sh", "--search-root", str(npu_host["root"]), env=npu_host["env"]).returncode == 0
    assert script("pre_check.sh", "--search-root", str(npu_host["root"]), "--json", env=npu_host["env"]).returncode == 0
    out = tmp_path / "verl_scripts"
    generated = script("generate_training.sh", "--mask", "1100000", "--output-dir", str(out), "--npu-devices",
                       "0,1,2,3,4,5,6,7", "--train-steps", "4", "--train-tp", "4", "--train-pp", "2", "--swanlab", "no",
                       env=npu_host["env"])
    assert generated.returncode == 0, generated.stderr
    assert (out / "start_verl.sh").exists() and (out / "run_training.sh").exists()
    bin_dir, log = recording_docker(tmp_path)
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{npu_host['env']['PATH']}",
               VERL_DEPLOY_DEV_ROOT=str(ascend_nodes(tmp_path)))
    created = script("verl_docker_run.sh", "my/image:2", "c2", "--yes", env=env)
    assert created.returncode == 0, created.stderr
    assert any(c.startswith("run -d --name=c2") for c in log.read_text().splitlines())
    for name in SCRIPTS.iterdir():
        assert len(name.read_text().splitlines()) <= 10, f"{name.name} should only call verl-deploy"


def test_on_a_host_where_nothing_was_detected_init_says_which_errors_asks_device_and_verl_and_refuses_a_missing_model(
        npu_host):
    """No accelerator tool, no container: init names each error it opens with, asks the device kind, the verl
    checkout and the verl version, and refuses a model path that does not exist at the prompt, in one line."""
    import shutil

    from conftest import FAKES

    bin_dir = npu_host["tmp"] / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "ray"):  # no npu-smi, no nvidia-smi: the device kind cannot be detected
        shutil.copy(FAKES / tool, bin_dir / tool)
    (npu_host["tmp"] / "ps.jsonl").write_text("")  # no container either
    env = dict(npu_host["env"], PATH=f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    env.pop("FAKE_NPU_SMI")
    verl = npu_host["tmp"] / "verl-checkout"
    (verl / "verl").mkdir(parents=True)
    config = npu_host["tmp"] / "run.yaml"
    term = Terminal(["init", "--search-root", str(npu_host["root"]), "--config", str(config)], env)
    term.answer("Device kind (none was found on this host)", DOWN + "\r")  # gpu
    opening = term.raw[:term.raw.index("Device kind")]
    count = int(re.search(r"not ready: (\d+) error\(s\)", opening).group(1))
    named = re.findall(r"error: ([\w.-]+): ", opening)
    assert count >= 1 and len(named) == count, opening  # each error the verdict counts, by field
    term.answer("verl checkout on this host", CLEAR + str(npu_host["tmp"] / "nope") + "\r")
    term.expect_on_screen("is not a verl checkout (no verl/ inside)")
    term.child.send(CLEAR + str(verl) + "\r")
    term.answer("verl version", DOWN + "\r")  # the one after the default
    term.answer("Training on")
    term.answer("Device ids", CLEAR + "0,1\r")
    term.answer("Model directory", UP + "\r")  # the last entry: "enter a path…"
    term.answer("Model directory", CLEAR + "/nonexistent/model\r")
    term.expect_on_screen("model_path: no directory /nonexistent/model on this host — give the directory holding "
                          "the model's config.json")
    model = npu_host["root"] / "models" / "Qwen3-8B"
    term.child.send(CLEAR + f"{model}\r")
    term.answer("Training data")
    term.answer("Test data")
    term.answer("Mode")
    term.answer("Framework", DOWN + "\r")  # fsdp
    term.answer("Checkpoint directory")
    term.answer("Container for the run", UP + "\r")  # no container: run on this host
    term.answer("Log to SwanLab")
    term.answer("Features")
    accept(term, ("Training steps", "Batch size", "Learning rate"))
    term.answer("Rollout tensor parallel", CLEAR + "2\r")  # two devices
    accept(term, ("Responses per prompt", "Max prompt length", "Max response length"))
    assert term.finish() == 0, term.raw[-3000:]
    data = yaml.safe_load(config.read_text())
    assert data["device"] == "gpu" and data["verl_dir"] == str(verl) and data["model_path"] == str(model)
    assert data["verl_version"] == "0.7.1"
