"""Probe: the software the training needs — CANN, NNAL, driver, and the Python packages' versions."""

from __future__ import annotations

import json
import re

from verl_deploy.preflight.context import Context
from verl_deploy.preflight.report import Area
from verl_deploy.profiles import Profile, profile_for
from verl_deploy.spec import RunSpec

# Distribution names; the snippet falls back to "importable, version unknown" for source trees on PYTHONPATH.
PACKAGES = {
    "verl": "verl", "torch": "torch", "torch_npu": "torch_npu", "vllm": "vllm", "vllm_ascend": "vllm_ascend",
    "sglang": "sglang", "megatron": "megatron_core", "mindspeed": "mindspeed", "transformers": "transformers",
    "ray": "ray", "swanlab": "swanlab", "nccl": "nvidia-nccl-cu12",
}
IMPORT_NAMES = {"megatron": "megatron.core", "nccl": "nvidia.nccl"}
VERSIONS_SNIPPET = """
import importlib.metadata as md, importlib.util as iu, json, sys
out = {"python": sys.version.split()[0]}
for key, dist, module in %s:
    try:
        out[key] = md.version(dist)
    except Exception:
        try:
            out[key] = "present" if iu.find_spec(module) else None
        except Exception:
            out[key] = None
print(json.dumps(out))
"""


def collect_versions(context: Context) -> tuple[dict[str, str | None], str | None]:
    """Versions of the packages as the training's python3 sees them, or why they could not be read."""
    triples = [(key, dist, IMPORT_NAMES.get(key, key)) for key, dist in PACKAGES.items()]
    result = context.runner.run(["python3", "-c", VERSIONS_SNIPPET % repr(triples)], timeout=max(context.timeout, 20))
    problem = result.problem(context.runner.timeout)
    if problem:
        return {}, problem
    try:
        return json.loads(result.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return {}, f"python3 printed no version list: {result.output.strip()[:160]}"


def release(version: str) -> str:
    """`0.7.0.dev0` -> `0.7.0`: the release a development build belongs to."""
    match = re.match(r"(\d+\.\d+(?:\.\d+)?)", version)
    return match.group(1) if match else version


def _key_value(text: str | None, key: str) -> str | None:
    if not text:
        return None
    match = re.search(rf"^\s*{key}\s*=\s*(\S+)", text, re.IGNORECASE | re.MULTILINE)
    return match.group(1) if match else None


def probe_ascend(context: Context) -> Area:
    """CANN set_env.sh (both layouts), its version, NNAL/ATB and the driver version file."""
    area = Area("ascend", "Ascend software")
    root, runner = context.ascend_root.rstrip("/"), context.runner
    set_envs = [p for p in (f"{root}/cann/set_env.sh", f"{root}/ascend-toolkit/set_env.sh") if runner.exists(p)]
    info_files = (runner.glob(f"{root}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info")
                  + runner.glob(f"{root}/cann/*-linux/ascend_toolkit_install.info")
                  + runner.glob(f"{root}/cann*/*-linux/ascend_toolkit_install.info"))
    cann_version = next((v for v in (_key_value(runner.read_text(f), "version") for f in info_files) if v), None)
    if cann_version is None:
        cann_version = _key_value(runner.read_text(f"{root}/ascend-toolkit/latest/version.cfg"), "version")
    if set_envs:
        area.ok("CANN", f"{cann_version or 'version unknown'}, {set_envs[0]}")
    else:
        area.error("CANN", f"no set_env.sh under {root}/cann or {root}/ascend-toolkit ({runner.where})",
                   "install the CANN toolkit, or run in a verl Ascend image (quay.io/ascend/verl)")
    nnal = f"{root}/nnal/atb/set_env.sh"
    if runner.exists(nnal):
        area.ok("NNAL/ATB", nnal)
    else:
        area.warning("NNAL/ATB", f"{nnal} not found ({runner.where})",
                     "install NNAL (vllm-ascend needs libatb.so), or use a verl Ascend image")
    driver = _key_value(runner.read_text(f"{root}/driver/version.info"), "Version")
    if driver:
        area.ok("driver", driver)
    else:
        area.warning("driver", f"{root}/driver/version.info not readable ({runner.where})",
                     "install the Ascend driver; in a container mount /usr/local/Ascend/driver/version.info")
    area.data = {"cann_version": cann_version, "set_env": set_envs[0] if set_envs else None,
                 "nnal": runner.exists(nnal), "driver_version": driver}
    return area


def probe_packages(context: Context, versions: dict[str, str | None], problem: str | None) -> Area:
    """torch / torch_npu / vllm / vllm-ascend / MindSpeed / Megatron / verl versions, and whether they fit."""
    area = Area("software", "Python packages")
    area.data = {"versions": versions}
    if problem:
        area.warning("python3", f"{problem} ({context.runner.where})", "run the check where training runs (--container NAME)")
        return area
    for key in PACKAGES:
        value = versions.get(key)
        if value:
            area.ok(key, value)
    _judge_verl(area, context, versions.get("verl"))
    _judge_torch_npu(area, context.spec, versions)
    _judge_engine_and_framework(area, context, versions)
    return area


def _judge_verl(area: Area, context: Context, verl: str | None) -> None:
    """verl installed, and of the release the plan targets (an error when --verl-version asked for another)."""
    spec = context.spec
    if not verl:
        area.warning("verl", f"not installed ({context.runner.where})",
                     "run in a verl image, or pip install verl; the scripts expect it in --run-dir")
        return
    if verl == "present":
        return
    installed, target = profile_for(release(verl)), profile_for(spec.verl_version)
    if isinstance(installed, Profile) and isinstance(target, Profile) and installed.name != target.name:
        level = area.error if context.given("verl_version") else area.warning
        level("verl version", f"verl {verl} is installed but the plan targets {spec.verl_version}",
              f"pass --verl-version {release(verl)}")


def _judge_torch_npu(area: Area, spec: RunSpec, versions: dict[str, str | None]) -> None:
    """On NPU torch needs torch_npu, of the same minor release."""
    torch, torch_npu = versions.get("torch"), versions.get("torch_npu")
    if spec.device == "npu" and torch and not torch_npu:
        area.error("torch_npu", "torch is installed without torch_npu", "install the torch_npu matching torch, or use a verl Ascend image")
    if torch and torch_npu and torch != "present" and torch_npu != "present" and \
            release(torch).rsplit(".", 1)[0] != release(torch_npu).rsplit(".", 1)[0]:
        area.warning("torch_npu", f"torch {torch} with torch_npu {torch_npu}", "use the torch_npu release made for this torch")


def _judge_engine_and_framework(area: Area, context: Context, versions: dict[str, str | None]) -> None:
    """The rollout engine (vllm, with vllm-ascend on NPU) and Megatron (with MindSpeed on NPU) importable."""
    spec, where = context.spec, context.runner.where
    if spec.rollout_engine == "vllm" and not versions.get("vllm"):
        area.warning("vllm", f"not installed ({where})", "the rollout needs vllm (and vllm-ascend on NPU)")
    if spec.rollout_engine == "vllm" and spec.device == "npu" and versions.get("vllm") and not versions.get("vllm_ascend"):
        area.error("vllm_ascend", "vllm is installed without vllm-ascend", "install vllm-ascend matching vllm")
    if spec.framework == "megatron" and not versions.get("megatron"):
        area.warning("megatron", f"megatron.core not importable ({where})",
                     "install megatron-core, or put Megatron-LM on PYTHONPATH (verl images: /Megatron-LM)")
    if spec.framework == "megatron" and spec.device == "npu" and not versions.get("mindspeed"):
        area.warning("mindspeed", "MindSpeed not importable", "install MindSpeed (verl Ascend images: /MindSpeed)")
