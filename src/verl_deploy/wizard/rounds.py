"""The questions of `verl-deploy init`, in the seeds' rounds, each prefilled with what is known.

Every answer is checked where it is typed (a TP that does not divide the devices is refused at
the prompt with the reason), so the config written at the end resolves. Values that come from
the environment are not asked again (seed 000: environment > config file > prompt).

The proxy, SwanLab and hyper-parameter rounds ask the fields declared in them (spec.py `round=`,
`ask=`), in their declared order: a field with a question of its own has a method in ASKED_BY, the
others are plain text checked against the field's limits. The basics, container and features rounds
ask questions that depend on each other, so they are written out.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import questionary

from verl_deploy import features as registry
from verl_deploy.profiles.modes import modes_of
from verl_deploy.secrets import load_swanlab_key, mask_secret
from verl_deploy.spec import DECLARED, SPLIT_MODES, RunSpec, listing, parse_devices
from verl_deploy.verl_release import checkout_version

ENTER_PATH = "enter a path…"
NEW_CONTAINER = "create a new container"
NO_CONTAINER = "no container: run on this host"
ENTER_IMAGE = "enter an image…"
ROUND_TITLES = {"proxy": "Round 3/6 — proxy (empty for none)", "swanlab": "Round 4/6 — SwanLab",
                "hyper-parameters": "Round 6/6 — hyper-parameters"}
# the fields each generic round asks, in order (spec.py `round=`)
ROUND_FIELDS = dict(listing("round", tuple(ROUND_TITLES)))
MODE_CHOICES = {
    "dapo": "colocated DAPO (trainer and rollout share the devices)",
    "one-step-off": "one-step-off-policy (separate trainer and rollout devices)",
    "colocate-async": "colocate-async: V1 trainer, rollout runs ahead on the shared devices (verl 0.9.0+)",
    "separate-async": "separate-async: V1 trainer and a rollout pool on their own devices (verl 0.9.0+)",
    "fully-async": "fully-async: rollout and training fully apart, bounded staleness (verl.experimental, 0.7.1+)",
}
END_ROUND = object()  # an asker's answer that ends its round (SwanLab off: nothing more to ask)


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
        self._mode()
        if self.from_env("framework"):
            self.say(f"  framework = {self.spec.framework} (from {self.spec.sources['framework']})")
        else:
            self.answers["framework"] = ask(questionary.select("Framework", choices=["megatron", "fsdp"],
                                                               default=self.value("framework")))
        # asked after mode and framework: the derived directory names them (…-fsdp-npu, …-megatron-gpu)
        self._text("Checkpoint directory", "ckpts_dir", lambda t: bool(t.strip()) or "a directory is needed",
                   default=self.spec.ckpts_dir or self.with_answers().effective_ckpts_dir)

    def _mode(self) -> None:
        """The modes the chosen verl release has (profiles/modes.py); a split mode then asks the device split."""
        total = len(self.value("devices"))
        offered = [mode for mode in modes_of(self.release()) if total > 1 or mode not in SPLIT_MODES]
        current = self.value("mode") if self.value("mode") in offered else "dapo"
        mode = ask(questionary.select("Mode", default=current, choices=[
            questionary.Choice(MODE_CHOICES[name], name) for name in offered]))
        self.answers["mode"] = mode
        if mode in SPLIT_MODES:  # the trainer and the rollout each own part of this node's devices
            self._text("Trainer devices", "trainer_gpus", _int_between(1, total - 1), int)
            rest = total - self.value("trainer_gpus")
            self._text("Rollout devices", "rollout_gpus", _int_between(1, rest, f"trainer + rollout <= {total} devices"),
                       int, default=min(self.value("rollout_gpus"), rest))

    def release(self) -> str:
        """The verl release the run will use: read from the checkout answered, else the spec's (or the answer)."""
        read = checkout_version(self.value("verl_dir")) if self.value("verl_dir") else None
        return read or str(self.value("verl_version"))

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
        self.ask_round("proxy")

    def swanlab(self) -> None:
        self.ask_round("swanlab")

    def ask_round(self, name: str) -> None:
        """One generic round: its fields in their declared order, each by its own question or as plain text."""
        self.say(ROUND_TITLES[name])
        for field_name in ROUND_FIELDS[name]:
            asker = ASKED_BY.get(field_name)
            if (asker(self) if asker else self._plain(field_name)) is END_ROUND:
                return

    def _plain(self, name: str) -> Any:
        """A field's declared question, checked against the field's declared limits."""
        validate, convert = _limits(name)
        return self._text(DECLARED[name].ask or name, name, validate, convert)

    # -- the questions of their own (ASKED_BY) ----------------------------------------------------

    def _https_proxy(self) -> Any:
        default = self.spec.https_proxy or self.answers.get("http_proxy") or ""
        return self._text(DECLARED["https_proxy"].ask or "", "https_proxy", default=default)

    def _swanlab_on(self) -> Any:
        on = ask(questionary.confirm(DECLARED["swanlab"].ask or "", default=bool(self.spec.swanlab_on)))
        self.answers["swanlab"] = on
        return None if on else END_ROUND

    def _swanlab_host(self) -> Any:
        return self._text(DECLARED["swanlab_host"].ask or "", "swanlab_host", lambda t: t.strip().startswith(
            ("http://", "https://")) or "a URL starting with http:// or https://")

    def _swanlab_key(self) -> None:
        if self.from_env("swanlab_api_key"):
            self.say("  API key from SWANLAB_API_KEY")
        elif _saved_key():
            self.say("  API key: the remembered one (" + mask_secret(_saved_key() or "") + ")")
        else:
            self.swanlab_key = ask(questionary.password(
                DECLARED["swanlab_api_key"].ask or "", validate=lambda t: bool(t.strip()) or "the key is required")).strip()

    def _swanlab_mode(self) -> None:
        if not self.from_env("swanlab_mode"):
            self.answers["swanlab_mode"] = ask(questionary.select(DECLARED["swanlab_mode"].ask or "",
                                                                  choices=["cloud", "local"],
                                                                  default=self.value("swanlab_mode")))

    def _swanlab_log_dir(self) -> Any:
        return self._text(DECLARED["swanlab_log_dir"].ask or "", "swanlab_log_dir",
                          default=self.value("swanlab_log_dir") or f"{str(self.value('run_dir')).rstrip('/')}/swanlog")

    def _trainer_devices(self) -> int:
        return self.value("trainer_gpus") if self.value("mode") in SPLIT_MODES else len(self.value("devices"))

    def _train_tp(self) -> Any:
        if self.value("framework") == "fsdp":  # FSDP shards the model: no training TP/PP, only the rollout's TP
            return None
        return self._text(DECLARED["train_tp"].ask or "", "train_tp", _divides(self._trainer_devices(), "TP"), int)

    def _train_pp(self) -> Any:
        if self.value("framework") == "fsdp":
            return None
        devices, tp = self._trainer_devices(), self.value("train_tp")
        if self.value("mode") in SPLIT_MODES:  # the trainer's own devices: a PP that no longer divides them starts at 1
            self.answers["train_pp"] = self.value("train_pp") if devices % (tp * self.value("train_pp")) == 0 else 1
        return self._text(DECLARED["train_pp"].ask or "", "train_pp", _divides(devices, "TP x PP", tp), int)

    def _gen_tp(self) -> Any:
        if self.value("framework") != "fsdp":  # Megatron: the rollout's TP follows the training's
            return None
        rollout = self.value("rollout_gpus") if self.value("mode") in SPLIT_MODES else self._trainer_devices()
        return self._text(DECLARED["gen_tp"].ask or "", "gen_tp", _divides(rollout, "rollout TP", whose="rollout"), int,
                          default=self.with_answers().rollout_tp)

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
            self.answers.update(mask=self._mask(framework, device), features=[], no_default_features=False)
        else:
            chosen = self._checklist(before, framework, device)
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

    def _mask(self, framework: str, device: str) -> str:
        """A 7-bit mask, decoded beside the prompt as it is typed."""
        def toolbar() -> str:
            return decode_mask(questionary_buffer_text(), framework, device)

        mask = ask(questionary.text("Mask (leftmost = bit 0)", default=self.spec.mask or "1100000",
                                    validate=lambda t: not registry.parse_mask(t)[1]
                                    or registry.parse_mask(t)[1][0].message, rprompt=toolbar))
        return mask.strip()

    def _checklist(self, states: list, framework: str, device: str) -> list[str]:
        """Every feature that applies here, checked as it is now: the answer names each one on or off."""
        on = {s.name for s in states if s.on}
        offered = [f for f in registry.REGISTRY if f.applies_to(framework, device)]
        choices = [questionary.Choice(f"{f.name} — {f.description}", f.name, checked=f.name in on) for f in offered]
        picked = ask(questionary.checkbox("Features (space to toggle, enter to accept)", choices=choices))
        return [f.name if f.name in picked else f"-{f.name}" for f in offered]

    def hyper_parameters(self) -> None:
        self.ask_round("hyper-parameters")

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


# fields whose question is more than text checked against the field's limits
ASKED_BY: dict[str, Callable[[Wizard], Any]] = {
    "https_proxy": Wizard._https_proxy, "swanlab": Wizard._swanlab_on, "swanlab_host": Wizard._swanlab_host,
    "swanlab_api_key": Wizard._swanlab_key, "swanlab_mode": Wizard._swanlab_mode,
    "swanlab_log_dir": Wizard._swanlab_log_dir, "train_tp": Wizard._train_tp, "train_pp": Wizard._train_pp,
    "gen_tp": Wizard._gen_tp,
}


def _limits(name: str) -> tuple[Callable[[str], bool | str] | None, Callable[[str], Any]]:
    """(validator, converter) of a plain question from the field's type and declared bounds (ge / gt)."""
    info = RunSpec.model_fields[name]
    bounds = {type(m).__name__: m for m in info.metadata}
    kinds = typing.get_args(info.annotation) or (info.annotation,)
    if int in kinds:
        return _int_at_least(getattr(bounds.get("Ge"), "ge", 0)), int
    if float in kinds and getattr(bounds.get("Gt"), "gt", None) == 0:
        return _float_positive, float
    return None, str


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
