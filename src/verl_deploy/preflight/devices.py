"""Accelerators as `npu-smi info` and `nvidia-smi` print them, parsed into one shape.

Tables are split on `|` and never sliced by column offset: npu-smi's table is 98 characters
wide up to 25.x and 116 in 26.x, A3 hosts print two chips per NPU with a `Chip Phy-ID` header,
and HBM numbers may touch the slash (`54592/ 65536`). Busy comes from the process table, not
from used memory: an idle 910B reports about 3 GB of HBM in use.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
BUS_ID = re.compile(r"^(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d$|^NA$")
NPU_ROW = re.compile(r"^(\d+)\s+(\S.*)$")
CHIP_ROW = re.compile(r"^(\d+)(?:\s+(\d+))?$")
NO_PROCESS = re.compile(r"No running processes found in NPU (\d+)")
VERSION = re.compile(r"Version:\s*(\S+)")
DCMI_ERROR = re.compile(r"dcmi \w+ initiali[sz]ed? failed.*?ret is (-?\d+)", re.IGNORECASE)


@dataclass
class Process:
    pid: int
    name: str
    memory_mb: int | None


@dataclass
class Accelerator:
    id: int  # the index ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES use
    name: str
    health: str
    hbm_used_mb: int | None
    hbm_total_mb: int | None
    npu: int | None = None
    chip: int | None = None
    bus_id: str | None = None
    processes: list[Process] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        return bool(self.processes)

    @property
    def healthy(self) -> bool:
        return self.health.upper() == "OK"

    def as_dict(self) -> dict:
        data = asdict(self)
        data["busy"] = self.busy
        order = ["id", "npu", "chip", "name", "health", "hbm_used_mb", "hbm_total_mb", "busy", "processes", "bus_id"]
        return {key: data[key] for key in order}


@dataclass
class DeviceTable:
    kind: str  # "npu" | "gpu"
    devices: list[Accelerator]
    driver_version: str | None = None
    error: str | None = None  # the tool ran but could not reach the devices

    def as_dict(self) -> dict:
        return {"kind": self.kind, "driver_version": self.driver_version, "error": self.error,
                "devices": [d.as_dict() for d in self.devices]}


def _cells(line: str) -> list[str] | None:
    text = line.strip()
    if not text.startswith("|"):
        return None
    return [cell.strip() for cell in text.strip("|").split("|")]


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def dcmi_error(text: str) -> str | None:
    """npu-smi's own failure lines (`dcmi module initialize failed. ret is -8005`) as one message."""
    match = DCMI_ERROR.search(text)
    if not match:
        return None
    code = match.group(1)
    meaning = {
        "-8005": "the devices are not reachable here (in a container: not mounted, or held by another container)",
        "-8020": "the device is used by another process or container",
    }.get(code, "the driver could not initialise the devices")
    return f"npu-smi: DCMI init failed (ret {code}): {meaning}"


def parse_npu_smi(text: str) -> DeviceTable:
    """`npu-smi info` -> one Accelerator per chip (an A3 NPU with two chips gives two)."""
    version = VERSION.search(text)
    table = DeviceTable("npu", [], version.group(1) if version else None, dcmi_error(text))
    in_processes = False
    pending: tuple[int, str, str] | None = None  # (npu, name, health) from the first row of a chip
    by_chip: dict[tuple[int, int], Accelerator] = {}
    for line in text.splitlines():
        if "Process id" in line or "Process name" in line:
            in_processes = True
            continue
        cells = _cells(line)
        if cells is None:
            continue
        if in_processes:
            _process_row(cells, by_chip, table)
            continue
        if len(cells) < 3:
            continue
        first = NPU_ROW.match(cells[0])
        second = CHIP_ROW.match(cells[0])
        if second and BUS_ID.match(cells[1]) and pending is not None:
            npu, name, health = pending
            chip = int(second.group(1))
            pairs = PAIR.findall(cells[2])
            used, total = (int(pairs[-1][0]), int(pairs[-1][1])) if pairs else (None, None)
            device = Accelerator(id=-1, name=name, health=health, hbm_used_mb=used, hbm_total_mb=total, npu=npu,
                                 chip=chip, bus_id=cells[1] if cells[1] != "NA" else None)
            if second.group(2) is not None:
                device.id = int(second.group(2))  # A3: Phy-ID is the logical device id
            by_chip[(npu, chip)] = device
            table.devices.append(device)
            pending = None
        elif first and not BUS_ID.match(cells[1]):
            pending = (int(first.group(1)), first.group(2).strip(), cells[1])
    _assign_ids(table.devices)
    return table


def _assign_ids(devices: list[Accelerator]) -> None:
    """Single-chip NPUs: the NPU id. Multi-chip without Phy-ID: npu x chips + chip (what verl computes)."""
    chips_per_npu = max((sum(1 for d in devices if d.npu == npu) for npu in {d.npu for d in devices}), default=1)
    for device in devices:
        if device.id < 0 and device.npu is not None:
            device.id = device.npu if chips_per_npu == 1 else device.npu * chips_per_npu + (device.chip or 0)


def _process_row(cells: list[str], by_chip: dict[tuple[int, int], Accelerator], table: DeviceTable) -> None:
    if len(cells) == 1 and NO_PROCESS.search(cells[0]):
        return
    if len(cells) < 4:
        return
    where = re.match(r"^(\d+)\s+(\d+)$", cells[0])
    pid = _int(cells[1])
    if not where or pid is None:
        return
    key = (int(where.group(1)), int(where.group(2)))
    device = by_chip.get(key)
    if device is not None:
        device.processes.append(Process(pid, cells[2], _int(cells[3])))


# -- NVIDIA ------------------------------------------------------------------------------------

GPU_ROW = re.compile(r"^(\d+)\s+(.+?)\s+(On|Off)$")
MIB_PAIR = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
GPU_PROCESS = re.compile(r"^(\d+)\s+(?:\S+\s+\S+\s+)?(\d+)\s+(C|G|C\+G|M|M\+C)\s+(.+?)\s+(\d+)MiB$")
DRIVER = re.compile(r"Driver Version:\s*(\S+)")
QUERY_FIELDS = ("index", "name", "memory.total", "memory.used", "utilization.gpu")
QUERY_ARGS = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]


def parse_nvidia_smi(text: str) -> DeviceTable:
    """The plain `nvidia-smi` table: GPUs, their memory, and the Processes block."""
    driver = DRIVER.search(text)
    table = DeviceTable("gpu", [], driver.group(1) if driver else None)
    by_index: dict[int, Accelerator] = {}
    in_processes = False
    current: Accelerator | None = None
    for line in text.splitlines():
        if "Processes:" in line:
            in_processes = True
            continue
        cells = _cells(line)
        if cells is None:
            current = None if line.startswith("+") else current
            continue
        if in_processes:
            match = GPU_PROCESS.match(cells[0]) if len(cells) == 1 else None
            if match and int(match.group(1)) in by_index:
                by_index[int(match.group(1))].processes.append(
                    Process(int(match.group(2)), match.group(4).strip(), int(match.group(5))))
            continue
        if len(cells) < 3:
            continue
        row = GPU_ROW.match(cells[0])
        if row:
            current = Accelerator(id=int(row.group(1)), name=row.group(2).strip(), health="OK", hbm_used_mb=None,
                                  hbm_total_mb=None, bus_id=cells[1].split()[0] if cells[1] else None)
            if "ERR!" in line:
                current.health = "ERR!"
            by_index[current.id] = current
            table.devices.append(current)
        elif current is not None and current.hbm_total_mb is None:
            pair = MIB_PAIR.search(cells[1])
            if pair:
                current.hbm_used_mb, current.hbm_total_mb = int(pair.group(1)), int(pair.group(2))
            if "ERR!" in line:
                current.health = "ERR!"
    return table


def _number(text: str) -> int | None:
    match = re.match(r"^\s*(\d+(?:\.\d+)?)", text)
    return int(float(match.group(1))) if match else None


def parse_nvidia_csv(text: str) -> DeviceTable:
    """`nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu --format=csv[...]`.

    With or without the header and units. Columns are named by the header when there is one, else
    they are the query's own order; a comma inside a GPU name is folded back into the name.
    """
    table = DeviceTable("gpu", [])
    columns = list(QUERY_FIELDS)
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not parts or not parts[0]:
            continue
        if not parts[0].isdigit():
            if parts[0].startswith("index"):
                columns = [p.split(" [")[0].strip() for p in parts]
            continue
        if len(parts) < len(columns):
            continue
        extra = len(parts) - len(columns)
        name_at = columns.index("name") if "name" in columns else 1
        parts[name_at:name_at + extra + 1] = [", ".join(parts[name_at:name_at + extra + 1])]
        row = dict(zip(columns, parts))
        table.devices.append(Accelerator(
            id=int(row["index"]), name=row.get("name", "?"), health="OK",
            hbm_used_mb=_number(row.get("memory.used", "")), hbm_total_mb=_number(row.get("memory.total", ""))))
    return table
