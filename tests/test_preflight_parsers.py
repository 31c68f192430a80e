"""Parsers of npu-smi, nvidia-smi, ray status and docker output, on the real captures in fixtures/hw/."""

import json
from pathlib import Path

import pytest

from verl_deploy.preflight.containers import container_devices, image_ref, parse_json_lines
from verl_deploy.preflight.devices import dcmi_error, parse_npu_smi, parse_nvidia_csv, parse_nvidia_smi
from verl_deploy.preflight.models import parameter_count
from verl_deploy.preflight.ray_cluster import parse_ray_status

HW = Path(__file__).parent / "fixtures" / "hw"


def text(name: str) -> str:
    return (HW / name).read_text()


def summary(table):
    return [(d.id, d.npu, d.chip, d.name, d.health, d.hbm_used_mb, d.hbm_total_mb, d.busy) for d in table.devices]


def test_910b3_idle_eight_npus():
    table = parse_npu_smi(text("npu-smi-910b3-8npu-idle.txt"))
    assert table.driver_version == "25.3.rc1" and table.error is None
    assert [d.id for d in table.devices] == list(range(8))
    assert summary(table)[0] == (0, 0, 0, "910B3", "OK", 3440, 65536, False)
    assert summary(table)[7] == (7, 7, 0, "910B3", "OK", 3439, 65536, False)
    assert table.devices[2].bus_id == "0000:81:00.0"


def test_busy_container_rows_with_empty_names_and_touching_slash():
    table = parse_npu_smi(text("npu-smi-910b3-8npu-busy-container.txt"))
    assert all(d.busy for d in table.devices)
    first = table.devices[0]
    assert (first.hbm_used_mb, first.hbm_total_mb) == (54592, 65536)
    assert [(p.pid, p.name, p.memory_mb) for p in first.processes] == [(277624, "", 51270)]
    assert [(p.pid, p.memory_mb) for p in table.devices[5].processes] == [(1008594, 50007)]


def test_vllm_workers_on_every_npu():
    table = parse_npu_smi(text("npu-smi-910b2-8npu-vllm-workers.txt"))
    assert {d.name for d in table.devices} == {"910B2"}
    assert [p.name for d in table.devices for p in d.processes] == ["VLLMWorker_DP"] * 8
    assert table.devices[6].processes[0].memory_mb == 30113


def test_two_processes_on_one_npu_are_consecutive_rows():
    table = parse_npu_smi(text("npu-smi-910b2c-2npu-multiproc.txt"))
    assert [(p.pid, p.name, p.memory_mb) for p in table.devices[0].processes] == [
        (6513, "rayWorkerDict", 617), (33776, "VLLMWorker_TP", 31747)]
    assert [p.pid for p in table.devices[1].processes] == [33777]
    assert table.devices[0].name == "910B2C"


def test_a3_gives_one_entry_per_chip_with_phy_id():
    table = parse_npu_smi(text("npu-smi-a3-16chip-idle.txt"))
    assert [d.id for d in table.devices] == list(range(16))
    assert summary(table)[1] == (1, 0, 1, "Ascend910", "OK", 2887, 65536, False)
    assert summary(table)[15] == (15, 7, 1, "Ascend910", "OK", 2880, 65536, False)


def test_26x_wide_table_single_910b4():
    table = parse_npu_smi(text("npu-smi-910b4-1npu-v26-wide.txt"))
    assert table.driver_version == "26.0.rc1"
    assert summary(table) == [(0, 0, 0, "910B4", "OK", 2871, 32768, False)]


@pytest.mark.parametrize("name, code", [("npu-smi-error-dcmi-8005.txt", "-8005"), ("npu-smi-error-device-busy.txt", "-8020")])
def test_dcmi_failures_are_recognised(name, code):
    table = parse_npu_smi(text(name))
    assert table.devices == [] and code in table.error
    assert dcmi_error(text(name)) == table.error


def test_other_npu_smi_subcommands_are_not_taken_for_a_device_table():
    for name in ("npu-smi-info-l-8npu.txt", "npu-smi-info-m-910b4.txt", "npu-smi-t-board-i0-910b.txt",
                 "npu-smi-t-usages-i0-910b.txt"):
        assert parse_npu_smi(text(name)).devices == []


A3_BUSY_26X = """\
+------------------------------------------------------------------------------------------------------------------+
| npu-smi 26.1.0                              Version: 26.1.0                                                      |
+---------------------------+---------------+----------------------------------------------------------------------+
| NPU   Name                | Health        | Power(W)             Temp(C)                 Hugepages-Usage(page)   |
| Chip  Phy-ID              | Bus-Id        | AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)           |
+===========================+===============+======================================================================+
| 0     Ascend910           | OK            | 170.1                38                      0    / 0                |
| 0     0                   | 0000:9D:00.0  | 12                   0    / 0                52553/ 65536            |
+------------------------------------------------------------------------------------------------------------------+
| 0     Ascend910           | Warning       | -                    39                      0    / 0                |
| 1     1                   | 0000:9F:00.0  | 0                    0    / 0                2887 / 65536            |
+===========================+===============+======================================================================+
+---------------------------+---------------+----------------------------------------------------------------------+
| NPU     Chip              | Process id    | Process name       | Process memory(MB)    | Process id in container |
+===========================+===============+======================================================================+
| 0       0                 | 692318        | pt_main_thread     | 49207                 | NA                      |
+===========================+===============+======================================================================+
| No running processes found in NPU 0 chip 1                                                                       |
+===========================+===============+======================================================================+
"""


def test_hand_made_a3_26x_busy_chip_and_warning_health():
    table = parse_npu_smi(A3_BUSY_26X)
    assert summary(table) == [(0, 0, 0, "Ascend910", "OK", 52553, 65536, True),
                              (1, 0, 1, "Ascend910", "Warning", 2887, 65536, False)]
    assert table.devices[0].processes[0].name == "pt_main_thread"
    assert not table.devices[1].healthy


def test_nvidia_table_h100():
    table = parse_nvidia_smi(text("nvidia-smi-8xh100-570-idle.txt"))
    assert table.driver_version == "570.195.03"
    assert [d.id for d in table.devices] == list(range(8))
    assert (table.devices[0].name, table.devices[0].hbm_used_mb, table.devices[0].hbm_total_mb) == (
        "NVIDIA H100 80GB HBM3", 0, 81559)
    assert table.devices[3].bus_id == "00000000:41:00.0" and not any(d.busy for d in table.devices)


NVIDIA_BUSY = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.158.01             Driver Version: 570.158.01     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   33C    P0             61W /  400W |   15500MiB /  81920MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  |   00000000:0B:00.0 Off |                    0 |
| N/A   31C    P0             59W /  400W |       4MiB /  81920MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|    0   N/A  N/A          937829      C   python                                15496MiB |
+-----------------------------------------------------------------------------------------+
"""


def test_nvidia_table_process_block():
    table = parse_nvidia_smi(NVIDIA_BUSY)
    assert [(d.id, d.busy) for d in table.devices] == [(0, True), (1, False)]
    assert [(p.pid, p.name, p.memory_mb) for p in table.devices[0].processes] == [(937829, "python", 15496)]
    assert table.devices[0].hbm_used_mb == 15500


@pytest.mark.parametrize("name, total6, used6, name0", [
    ("nvidia-smi-query-gpu-csv-8xv100-header-units.txt", 32768, 13928, "Tesla V100-SXM2-32GB"),
    ("nvidia-smi-query-gpu-csv-8xv100-noheader-nounits.DERIVED.txt", 32768, 13928, "Tesla V100-SXM2-32GB"),
    ("nvidia-smi-query-gpu-csv-8x3090-header-units.txt", 24576, 12, "NVIDIA GeForce RTX 3090"),
    ("nvidia-smi-query-gpu-csv-8x3090-noheader-nounits.DERIVED.txt", 24576, 12, "NVIDIA GeForce RTX 3090"),
])
def test_nvidia_csv_with_and_without_header_and_units(name, total6, used6, name0):
    table = parse_nvidia_csv(text(name))
    assert [d.id for d in table.devices] == list(range(8))
    assert (table.devices[6].hbm_total_mb, table.devices[6].hbm_used_mb) == (total6, used6)
    assert table.devices[0].name == name0


def test_nvidia_csv_comma_inside_a_name():
    table = parse_nvidia_csv("0, NVIDIA H100, PCIe, 81559, 10, 0\n")
    assert (table.devices[0].name, table.devices[0].hbm_total_mb, table.devices[0].hbm_used_mb) == (
        "NVIDIA H100, PCIe", 81559, 10)


def test_ray_status_both_layouts():
    old = parse_ray_status(text("ray-status-2node-16npu.txt"))
    assert old["nodes"] == 2 and old["resources"]["NPU"] == {"used": 0.0, "total": 16.0}
    assert old["resources"]["memory"]["total"] == "2.58TiB"
    new = parse_ray_status(text("ray-status-2node-8gpu-total-usage.txt"))
    assert new["nodes"] == 2 and new["resources"]["GPU"] == {"used": 0.0, "total": 8.0}
    assert new["resources"]["CPU"]["total"] == 576.0


def test_docker_json_lines_and_inspect_shapes():
    rows = parse_json_lines(text("docker-ps-format-json-docker-docs.jsonl"))
    assert rows[0]["Names"] == "boring_keldysh" and rows[0]["State"] == "running"
    images = parse_json_lines(text("docker-images-format-json-newer-no-virtualsize.jsonl"))
    assert [image_ref(i) for i in images] == ["ubuntu:latest", "alpine:latest"]
    ascend = container_devices(json.loads(text("docker-inspect-ascend-SYNTHETIC-shape.json"))[0])
    assert ascend["npu_devices"] == ["/dev/davinci0"] and len(ascend["npu_management"]) == 3
    assert ascend["running"] and ascend["network"] == "host" and not ascend["gpus"]
    gpu = container_devices(json.loads(text("docker-inspect-nvidia-DeviceRequests-SYNTHETIC-shape.json"))["gpus_all"])
    assert gpu["gpus"] and gpu["npu_devices"] == []


def test_parameter_count_from_real_configs():
    configs = Path(__file__).parent / "fixtures"
    qwen3_8b = json.loads((configs / "Qwen3-8B.config.json").read_text())
    assert 8.0e9 < parameter_count(qwen3_8b) < 8.4e9
