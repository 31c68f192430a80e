"""How much memory one device has, and how much of it a training process can really use.

Order: ``--device-memory-gb`` (or the ``device_memory_gb`` field) > what `check` read from
npu-smi / nvidia-smi (``hbm_total_mb``, kept as the detected ``device_memory_gb``) > the default
of a known device name > the default of the device kind. The driver and runtime keep part of it:
a "64 GB" 910B reports 60.96 GiB total capacity in OOM messages, an 80 GB H100 79.11 GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (pattern on the device name, GiB). First match wins, so the longer names come first.
KNOWN_DEVICES: tuple[tuple[str, float], ...] = (
    (r"910b4", 32.0),
    (r"910b[123]?\b|910b[123]", 64.0),
    (r"910_?9[35]|910c|\ba3\b|atlas ?800t ?a3|^(ascend ?)?910$", 64.0),  # A3 dies; npu-smi names them Ascend910
    (r"h200", 141.0),
    (r"h100", 80.0),
    (r"h800", 80.0),
    (r"h20\b|h20[^0-9]", 96.0),
    (r"a100.*40|a100-sxm4-40|a100-pcie-40", 40.0),
    (r"a100", 80.0),
    (r"a800", 80.0),
    (r"l20\b|l20[^0-9]", 48.0),
    (r"4090", 24.0),
    (r"a6000", 48.0),
)
KIND_DEFAULT = {"npu": 64.0, "gpu": 80.0}
# What the driver/runtime keeps back from torch (GiB): 64 GiB 910B -> 60.96 usable; GPU context ~1 GiB.
RESERVED_GB = {"npu": 3.04, "gpu": 0.9}


@dataclass(frozen=True)
class DeviceMemory:
    total_gb: float  # what the device reports
    usable_gb: float  # what a process can allocate
    source: str


def by_name(name: str | None) -> float | None:
    if not name:
        return None
    text = name.lower()
    for pattern, gb in KNOWN_DEVICES:
        if re.search(pattern, text):
            return gb
    return None


def device_memory(kind: str, given_gb: float | None, given_source: str, name: str | None) -> DeviceMemory:
    reserved = RESERVED_GB.get(kind, 1.0)
    if given_gb:
        total, source = float(given_gb), f"device_memory_gb from {given_source}"
    elif by_name(name):
        total, source = float(by_name(name) or 0), f"default for {name}"
    else:
        total, source = KIND_DEFAULT.get(kind, 64.0), f"default for an unnamed {kind.upper()} (--device-memory-gb to set it)"
    return DeviceMemory(total, max(0.0, total - reserved), source)
