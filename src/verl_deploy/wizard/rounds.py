"""The questions of `verl-deploy init`, in the seeds' rounds, each prefilled with what is known.

Every answer is checked where it is typed (a TP that does not divide the devices is refused at
the prompt with the reason), so the config written at the end resolves. Values that come from
the environment are not asked again (seed 000: environment > config file > prompt).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import questionary

from verl_deploy import features as registry
from verl_deploy.secrets import load_swanlab_key, mask_secret
from verl_deploy.spec import RunSpec, parse_devices

ENTER_PATH = "enter a path…"
NEW_CONTAINER = "create a new container"
NO_CONTAINER = "no container: run on this host"
ENTER_IMAGE = "enter an image…"


class Cancelled(Exception):
    """Ctrl-C or Ctrl-D at a prompt."""


def ask(question: questionary.Question) -> Any:
    answer = question.unsafe_ask()  # raises KeyboardInterrupt/EOFError instead of printing and returning None
    return answer


@dataclass
class Wizard:
    spec: RunSpec  # what is known so far: defaults < detected < config file < environment < flags
    found: dict  # check's areas data: candidates, containers, images, devices, network
    answers: dict[str, Any] = field(default_factory=dict)
    swanlab_key: str | None = None  # typed now; stored in the 0600 key file, never in the config
    environ: dict = field(default_factory=lambda: dict(os.environ))
    say: Callable[[str], None] = print

    def value(self, name: str) -> Any:
        return self.answers.get(name, getattr(self.spec, name))

    def from_env(self, name: str) -> bool:
        return self.spec.sources.get(name, "").startswith("env ")

    # -- helpers -----------------------------------------------------------------------------

    def _text(self, message: str, name: str, validate: Callable[[str], bool | str] | None = None,
              convert: Callable[[str], Any] = str, default: Any = None, **extra: Any) -> Any:
        if self.from_env(name):
            self.say(f"  {name} = {getattr(self.spec, name)} (from {self.spec.sources[name]})")
            return getattr(self.spec, name)
        current = self.value(name) if default is None else default
        shown = ",".join(map(str, current)) if isinstance(current, list) else ("" if current is None else str(current))
        answer = ask(questionary.text(message, default=shown, validate=validate, **extra))
        value = convert(answer.strip()) if answer.strip() else None
        self.answers[name] = value
        return value

    def _path(self, message: str, name: str, candidates: list[str],
              validate: Callable[[str], bool | str] | None = None) -> str:
        current = str(self.value(name))
        choices = list(dict.fromkeys([current, *candidates])) if candidates else []
        if choices:
            picked = ask(questionary.select(message, choices=[*choices, ENTER_PATH], default=current))
            if picked != ENTER_PATH:
                self.answers[name] = picked
                return picked
        return self._text(message, name, validate=validate or (lambda t: bool(t.strip()) or "a path is needed"))

    def _undetected(self, name: str) -> bool:
        """Nothing gave this value (no flag, file, environment or probe of this host): ask for it."""
        return self.spec.sources.get(name, "default") == "default"

    def verl(self) -> None:
        """The device kind, the verl checkout and the verl version, when check could not tell them.

        The checkout and version are asked when this host has no container either (with one, its image
        carries verl, and round 2 picks it)."""
        if self._undetected("device") and not self.found.get("accelerators", {}).get("kind"):
            self.answers["device"] = ask(questionary.select("Device kind (none was found on this host)", default=self.value("device"), choices=[
                questionary.Choice("npu: Ascend (torch_npu, vllm-ascend, HCCL)", "npu"),
                questionary.Choice("gpu: NVIDIA (CUDA, vLLM, NCCL)", "gpu")]))
        if self.found.get("docker", {}).get("containers"):
            return
        if self._undetected("verl_dir"):
            self._text("verl checkout on this host (empty: none, the image's /verl)", "verl_dir", _verl_dir)
        from verl_deploy.verl_release import checkout_version

        read = checkout_version(self.value("verl_dir")) if self.value("verl_dir") else None
        if read:
            self.say(f"  verl_version = {read} (read from {self.value('verl_dir')})")
        elif self._undetected("verl_version"):
            self.answers["verl_version"] = ask(questionary.select(
                "verl version", choices=list(VERL_RELEASES), default=self.value("verl_version")
                if self.value("verl_version") in VERL_RELEASES else None))

    # -- rounds ------------------------------------------------------------------------------

    def basics(self) -> None:
        self.say("Round 1/6 — basics")
        self.verl()
        nodes = ask(questionary.select("Training on", choices=["single node", "multi-node"],
                                       default="multi-node" if self.spec.nnodes > 1 else "single node"))
        if nodes == "multi-node":
            self._text("Number of nodes", "nnodes", _int_at_least(2), int,
                       default=max(2, self.spec.nnodes))
            suggested = self.found.get("network", {}).get("suggested_master_addr") or self.spec.master_addr
            self._text("Head node address (this host if it is the head)", "master_addr",
                       lambda t: bool(t.strip()) or "an address is needed", default=suggested)
        else:
            self.answers["nnodes"] = 1
        known = [d["id"] for d in self.found.get("accelerators", {}).get("devices", [])]
        self._text("Device ids (e.g. 0-7 or 0,1,2,3)", "devices", _devices_validator(known), parse_devices)
        self._path("Model directory", "model_path", self.found.get("models", {}).get("candidates", []), _model_dir)
        data = self.found.get("datasets", {}).get("candidates", [])
        self._path("Training data (parquet)", "train_file", data)
        self._path("Test data (parquet)", "test_file", data)
        mode = ask(questionary.select("Mode", default=self.value("mode"), choices=[
            questionary.Choice("colocated DAPO (trainer and rollout share the devices)", "dapo"),
            questionary.Choice("one-step-off-policy (separate trainer and rollout devices)", "one-step-off")]))
        self.answers["mode"] = mode
        if mode == "one-step-off":
            total = len(self.value("devices"))
            self._text("Trainer devices", "trainer_gpus", _int_between(1, total - 1), int)
            rest = total - self.answers["trainer_gpus"]
            self._text("Rollout devices", "rollout_gpus", _int_between(1, rest, f"trainer + rollout <= {total} devices"),
                       int, default=min(self.value("rollout_gpus"), rest))
        if self.from_env("framework"):
            self.say(f"  framework = {self.spec.framework} (from {self.spec.sources['framework']})")
        else:
            self.answers["framework"] = ask(questionary.select("Framework", choices=["megatron", "fsdp"],
                                                               default=self.value("framework")))
        # asked after mode and framework: the derived directory names them (…-fsdp-npu, …-megatron-gpu)
        self._text("Checkpoint directory", "ckpts_dir", lambda t: bool(t.strip()) or "a directory is needed",
                   default=self.spec.ckpts_dir or self.with_answers().effective_ckpts_dir)

    def with_answers(self) -> RunSpec:
        """The spec as answered so far (for values derived from several answers)."""
        return self.spec.model_copy(update={k: v for k, v in self.answers.items() if k in RunSpec.model_fields})

    def container(self) -> bool:
        """Returns whether a new container will be created (the proxy round then follows)."""
        self.say("Round 2/6 — container")
        containers = self.found.get("docker", {}).get("containers", [])
        choices = [questionary.Choice(f"{c['name']} ({c['state']}, {c['image']})", c["name"]) for c in containers]
        choices += [questionary.Choice(NEW_CONTAINER, NEW_CONTAINER), questionary.Choice(NO_CONTAINER, NO_CONTAINER)]
        current = self.spec.container if self.spec.container in {c["name"] for c in containers} else None
        picked = ask(questionary.select("Container for the run", choices=choices, default=current))
        if picked == NO_CONTAINER:
            self.answers["container"] = None
            return False
        if picked != NEW_CONTAINER:
            self.answers["container"] = picked
            return False
        images = [i["ref"] for i in self.found.get("docker", {}).get("images", [])]
        pull = f"pull {self.spec.image}"  # the official image of this verl release and device (images.py)
        image = ask(questionary.select("Image", choices=[*images, pull, ENTER_IMAGE]))
        if image == pull:
            image = self.spec.image
        elif image == ENTER_IMAGE:
            image = ask(questionary.text("Image", validate=lambda t: bool(t.strip()) or "an image is needed")).strip()
        self.answers["image"] = image
        taken = {c["name"] for c in containers}
        self._text("Container name", "container", lambda t: (bool(t.strip()) and t.strip() not in taken)
                   or f"pick a new name (taken: {', '.join(sorted(taken)) or 'none'})", default=self.spec.container or "verl")
        return True

    def proxy(self) -> None:
        self.say("Round 3/6 — proxy (empty for none)")
        self._text("http_proxy", "http_proxy", default=self.spec.http_proxy or "")
        self._text("https_proxy", "https_proxy", default=self.spec.https_proxy or self.answers.get("http_proxy") or "")

    def swanlab(self) -> None:
        self.say("Round 4/6 — SwanLab")
        on = ask(questionary.confirm("Log to SwanLab?", default=bool(self.spec.swanlab_on)))
        self.answers["swanlab"] = on
        if not on:
            return
        self._text("SwanLab host (e.g. http://10.0.0.1:8000)", "swanlab_host",
                   lambda t: t.strip().startswith(("http://", "https://")) or "a URL starting with http:// or https://")
        if self.from_env("swanlab_api_key"):
            self.say("  API key from SWANLAB_API_KEY")
        elif _saved_key():
            self.say("  API key: the remembered one (" + mask_secret(_saved_key() or "") + ")")
        else:
            self.swanlab_key = ask(questionary.password("SwanLab API key (hidden)",
                                                        validate=lambda t: bool(t.strip()) or "the key is required")).strip()
        if not self.from_env("swanlab_mode"):
            self.answers["swanlab_mode"] = ask(questionary.select("SwanLab mode", choices=["cloud", "local"],
                                                                  default=self.value("swanlab_mode")))
        self._text("Workspace", "swanlab_workspace")
        self._text("Log directory", "swanlab_log_dir",
                   default=self.value("swanlab_log_dir") or f"{str(self.value('run_dir')).rstrip('/')}/swanlog")
        self._text("Project name", "project_name")

    def features(self) -> None:
        self.say("Round 5/6 — features")
        framework, device = self.value("framework"), self.value("device")
        before, _ = registry.resolve(framework=framework, device=device, mask=self.spec.mask,
                                     user_features=self.spec.features, no_default_features=self.spec.no_default_features)
        current = "mask" if self.spec.mask else ("choose" if self.spec.features or self.spec.no_default_features
                                                 else "default")
        how = ask(questionary.select("Features", default=current, choices=[
            questionary.Choice("default: performance features on, memory features off (added on OOM)", "default"),
            questionary.Choice("choose features", "choose"),
            questionary.Choice("enter a 7-bit mask (RmvPad DynBSZ Offload PfxCache Recompute SwapOpt VPP)", "mask")]))
        if how == "default":
            self.answers.update(mask=None, features=[], no_default_features=False)
            return
        if how == "mask":
            def toolbar() -> str:
                text = questionary_buffer_text()
                return decode_mask(text, framework, device)

            mask = ask(questionary.text("Mask (leftmost = bit 0)", default=self.spec.mask or "1100000",
                                        validate=lambda t: not registry.parse_mask(t)[1]
                                        or registry.parse_mask(t)[1][0].message, rprompt=toolbar))
            self.answers.update(mask=mask.strip(), features=[], no_default_features=False)
        else:
            states, _ = registry.resolve(framework=framework, device=device, mask=self.spec.mask,
                                         user_features=self.spec.features,
                                         no_default_features=self.spec.no_default_features)
            on = {s.name for s in states if s.on}
            choices = [questionary.Choice(f"{f.name} — {f.description}", f.name, checked=f.name in on)
                       for f in registry.REGISTRY if f.applies_to(framework, device)]
            picked = ask(questionary.checkbox("Features (space to toggle, enter to accept)", choices=choices))
            chosen = [f.name if f.name in picked else f"-{f.name}" for f in registry.REGISTRY
                      if f.applies_to(framework, device)]
            self.answers.update(mask=None, features=chosen, no_default_features=False)
        states, findings = registry.resolve(framework=framework, device=device, mask=self.answers["mask"],
                                            user_features=self.answers["features"])
        if [(s.name, s.on) for s in states] == [(s.name, s.on) for s in before]:
            # the same features as the config's: keep them as the user wrote them there
            for name in ("mask", "features", "no_default_features"):
                self.answers.pop(name, None)
        for finding in findings:
            self.say(f"  note: {finding.message}")
        self.say("  on: " + (", ".join(s.name for s in states if s.on) or "none"))

    def hyper_parameters(self) -> None:
        self.say("Round 6/6 — hyper-parameters")
        self._text("Training steps", "train_steps", _int_at_least(1), int)
        self._text("Batch size (prompts per step)", "batch_size", _int_at_least(1), int)
        self._text("Learning rate", "lr", _float_positive, float)
        devices = self.value("trainer_gpus") if self.value("mode") == "one-step-off" else len(self.value("devices"))
        if self.value("framework") == "fsdp":  # FSDP shards the model: no training TP/PP, only the rollout's TP
            rollout = self.value("rollout_gpus") if self.value("mode") == "one-step-off" else devices
            self._text("Rollout tensor parallel (vLLM TP)", "gen_tp", _divides(rollout, "rollout TP", whose="rollout"), int,
                       default=self.with_answers().rollout_tp)
        else:
            self._megatron_layout(devices)
        self._text("Responses per prompt", "n_resp_per_prompt", _int_at_least(1), int)
        self._text("Max prompt length", "max_prompt_length", _int_at_least(16), int)
        self._text("Max response length", "max_response_length", _int_at_least(16), int)

    def _megatron_layout(self, devices: int) -> None:
        self._text("Tensor parallel (TP)", "train_tp", _divides(devices, "TP"), int)
        tp = self.value("train_tp")
        if self.value("mode") == "one-step-off":
            self.answers["train_pp"] = self.value("train_pp") if devices % (tp * self.value("train_pp")) == 0 else 1
            self._text("Pipeline parallel (PP)", "train_pp", _divides(devices, "TP x PP", tp), int)
        else:
            self._text("Pipeline parallel (PP)", "train_pp", _divides(devices, "TP x PP", tp), int)

    def run(self) -> dict[str, Any]:
        self.basics()
        new_container = self.container()
        no_network = not self.found.get("network", {}).get("default_route")
        if new_container or no_network:
            self.proxy()
        self.swanlab()
        self.features()
        self.hyper_parameters()
        return self.answers


# -- validators (True or the reason, shown at the prompt) ------------------------------------------

VERL_RELEASES = ("0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")  # the profiles' releases


def _model_dir(text: str) -> bool | str:
    path = os.path.expanduser(text.strip())
    if not path:
        return "model_path: a directory is needed (the one holding config.json)"
    if not os.path.isdir(path):
        return f"model_path: no directory {path} on this host — give the directory holding the model's config.json"
    return True


def _verl_dir(text: str) -> bool | str:
    path = os.path.expanduser(text.strip())
    if path and not os.path.isdir(os.path.join(path, "verl")):
        return f"verl_dir: {path} is not a verl checkout (no verl/ inside) — give the checkout's top folder, or leave it empty"
    return True

def _int_at_least(low: int) -> Callable[[str], bool | str]:
    def check(text: str) -> bool | str:
        return (text.strip().isdigit() and int(text) >= low) or f"a whole number >= {low}"
    return check


def _int_between(low: int, high: int, why: str = "") -> Callable[[str], bool | str]:
    def check(text: str) -> bool | str:
        ok = text.strip().isdigit() and low <= int(text) <= high
        return ok or f"a whole number from {low} to {high}" + (f" ({why})" if why else "")
    return check


def _float_positive(text: str) -> bool | str:
    try:
        return float(text) > 0 or "a number > 0, e.g. 1e-6"
    except ValueError:
        return "a number > 0, e.g. 1e-6"


def _divides(devices: int, what: str, times: int = 1, whose: str = "trainer") -> Callable[[str], bool | str]:
    def check(text: str) -> bool | str:
        if not text.strip().isdigit() or int(text) < 1:
            return "a whole number >= 1"
        product = int(text) * times
        return devices % product == 0 or f"{what} = {product} does not divide the {devices} {whose} devices"
    return check


def _devices_validator(known: list[int]) -> Callable[[str], bool | str]:
    def check(text: str) -> bool | str:
        try:
            ids = parse_devices(text)
        except ValueError as exc:
            return str(exc)
        missing = [i for i in ids if known and i not in known]
        return not missing or f"not on this host: {','.join(map(str, missing))} (found {','.join(map(str, known))})"
    return check


def decode_mask(text: str, framework: str, device: str) -> str:
    """The live line under the mask prompt: what each bit turns on, or what is wrong."""
    decoded, problems = registry.parse_mask(text)
    if problems:
        return f"{len(text.strip())}/7 bits — " + " ".join(
            f"{i}:{registry.BY_BIT[i].mask_label}" for i in range(registry.MASK_LENGTH))
    states, findings = registry.resolve(framework=framework, device=device, mask=text)
    on = [s.name for s in states if s.on and registry.BY_NAME[s.name].bit is not None]
    note = f" — {findings[0].message}" if findings else ""
    return "on: " + (", ".join(on) or "none") + note


def questionary_buffer_text() -> str:
    """The text being typed at the current prompt (for the live mask decode)."""
    from prompt_toolkit.application.current import get_app

    try:
        return get_app().current_buffer.text
    except Exception:  # no application running: nothing typed
        return ""


def _saved_key() -> str | None:
    """The remembered key; a damaged key file counts as none here (the wizard asks, and saving replaces it)."""
    from verl_deploy.boundedread import UnreadableFile

    try:
        return load_swanlab_key()
    except UnreadableFile:
        return None
