"""How much memory one device has, and how much of it a training process can really use.

Order: ``--device-memory-gb`` (or the ``device_memory_gb`` field) > what `check` read from
npu-smi / nvidia-smi (``hbm_total_mb``, kept as the detected ``device_memory_gb``) > the default
of a known device name > the default of the device kind. The driver and runtime keep part of it:
a "64 GB" 910B reports 60.96 GiB total capacity in OOM messages, an 80 GB H100 79.11 GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (pattern on the device name, GiB, kind, the name shown in a warning). First match wins, so the
# longer names come first. Sizes: Huawei Atlas 800T A2 / A3 specifications (910B1-3 64 GB, 910B4
# 32 GB HBM); NVIDIA product datasheets (H200 141 GB, H100/H800 80 GB, H20 96 GB, A100 40/80 GB,
# L40S/L40/L20/A40/RTX A6000 48 GB GDDR6, L4/A10/RTX 4090/RTX 3090 24 GB).
KNOWN_DEVICES: tuple[tuple[str, float, str, str], ...] = (
    (r"910b4", 32.0, "npu", "910B4"),
    (r"910b[123]?\b|910b[123]", 64.0, "npu", "910B1/2/3"),
    (r"910_?9[35]|910c|\ba3\b|atlas ?800t ?a3|^(ascend ?)?910$", 64.0, "npu", "Ascend910 (A3)"),  # npu-smi's name for A3 dies
    (r"h200", 141.0, "gpu", "H200"),
    (r"h100", 80.0, "gpu", "H100"),
    (r"h800", 80.0, "gpu", "H800"),
    (r"h20\b|h20[^0-9]", 96.0, "gpu", "H20"),
    (r"a100.*40|a100-sxm4-40|a100-pcie-40", 40.0, "gpu", "A100 40GB"),
    (r"a100", 80.0, "gpu", "A100"),
    (r"a800", 80.0, "gpu", "A800"),
    (r"l40s?\b", 48.0, "gpu", "L40S/L40"),
    (r"l20\b|l20[^0-9]", 48.0, "gpu", "L20"),
    (r"\bl4\b", 24.0, "gpu", "L4"),
    (r"\ba40\b", 48.0, "gpu", "A40"),
    (r"\ba10g?\b", 24.0, "gpu", "A10"),
    (r"4090", 24.0, "gpu", "RTX 4090"),
    (r"3090", 24.0, "gpu", "RTX 3090"),
    (r"a6000", 48.0, "gpu", "RTX A6000"),
)
KIND_DEFAULT = {"npu": 64.0, "gpu": 80.0}
# What the driver/runtime keeps back from torch (GiB): 64 GiB 910B -> 60.96 usable; GPU context ~1 GiB.
RESERVED_GB = {"npu": 3.04, "gpu": 0.9}


@dataclass(frozen=True)
class DeviceMemory:
    total_gb: float  # what the device reports
    usable_gb: float  # what a process can allocate
    source: str
    unknown_name: str | None = None  # the warning when --device-name is not in KNOWN_DEVICES and nothing gave a size


def by_name(name: str | None) -> float | None:
    if not name:
        return None
    text = name.lower()
    for pattern, gb, _, _ in KNOWN_DEVICES:
        if re.search(pattern, text):
            return gb
    return None


def known_names(kind: str) -> list[str]:
    return [label for _, _, of, label in KNOWN_DEVICES if of == kind]


def unknown_name(kind: str, given_gb: float | None, name: str | None) -> str | None:
    """The warning when a device name the table does not know leaves the estimate on the kind's default."""
    if given_gb or not name or by_name(name):
        return None
    assumed = KIND_DEFAULT.get(kind, 64.0)
    return (f"--device-name {name[:60]!r} is not a device whose memory verl-deploy knows (known {kind.upper()}s: "
            f"{', '.join(known_names(kind))}); the memory estimate assumed {assumed:g} GB per device")


def device_memory(kind: str, given_gb: float | None, given_source: str, name: str | None) -> DeviceMemory:
    reserved = RESERVED_GB.get(kind, 1.0)
    if given_gb:
        total, source = float(given_gb), f"device_memory_gb from {given_source}"
    elif by_name(name):
        total, source = float(by_name(name) or 0), f"default for {name}"
    elif name:
        total = KIND_DEFAULT.get(kind, 64.0)
        source = f"default for an unknown {kind.upper()} {name[:60]!r} (--device-memory-gb to set it)"
    else:
        total, source = KIND_DEFAULT.get(kind, 64.0), f"default for an unnamed {kind.upper()} (--device-memory-gb to set it)"
    return DeviceMemory(total, max(0.0, total - reserved), source, unknown_name(kind, given_gb, name))
