"""Device memory one NCCL communicator takes, by NCCL release and by what the node's GPUs can do.

Read from NCCL's code at v2.21.5 (what torch 2.5 and 2.6 wheels pin) and v2.26.2 / v2.27.3 (torch 2.7 / 2.8),
for a node of NVLink + NVSwitch GPUs, where NCCL settles on 24 channels (search.cc:855 starts the SM90 search at
60 GB/s, ncclTopoDupChannels and the postset double it twice: 6 -> 12 -> 24; connect.cc:443 / :452):

- every channel holds three small device allocations, each rounded up to the 2 MiB cuMem granularity, over the 24
  channels plus the 8 p2p-only ones (channel.cc:41-55, paths.cc:767, alloc.h:100): 32 x 3 x 2 MiB, and with NVLS
  one more per channel (24 x 2 MiB), plus the 2 MiB device communicator;
- a connection's receiver holds its LL (512 KiB), LL128 (4.69 MiB) and SIMPLE (NCCL_BUFFSIZE, 4 MiB) buffers, 10
  MiB once rounded to 2 MiB, its sender 2 MiB (init.cc:542-544, p2p.cc:354-357 / :419-422; P2P read, which would
  move SIMPLE to the sender, is on for SM80 only, paths.cc:340). The ring needs one of each per channel; the tree,
  a chain inside a node, another pair on all but its two end ranks (transport.cc:47-52);
- NVLS (NVLink SHARP: Hopper and Blackwell GPUs behind NVSwitch, communicators of more than 2 GPUs on a node,
  nvls.cc:236-240) keeps a buffer per channel, direction and head GPU: at 2.21.5 over all 24 channels with a 1 MiB
  buffer and a 2 MiB header each (nvls.cc:292, 311-314); from 2.23 over the 16 NVLS channels with the 1 MiB buffer
  alone (nvls.cc:288-292 at 2.26.2).

verl's own scripts for 96 GB GPUs ask for NVLS off on every node (examples/grpo_trainer/
run_deepseek671b_math_megatron_96gb.sh and run_qwen3-235b_megatron_96gb.sh at v0.6.1 / v0.7.0: NCCL_NVLS_ENABLE "0");
the estimate cannot see a node's environment and counts NVLS as the device name says (a known over-count there).

Until 2.22 all of it is set up when the communicator is made (init.cc:1257-1277 at 2.21.5). From 2.22
(NCCL_RUNTIME_CONNECT, default 1) an algorithm's buffers come with its first use; the ring (all-gather,
reduce-scatter, large all-reduce) and NVLS (large all-reduce) are what training uses, the tree is left out.
"""

from __future__ import annotations

import re

MIB = 2 ** 20
CHANNELS = 24  # collective channels on an NVSwitch node (see above); fewer links give fewer, this is the upper end
NVLS_CHANNELS = 16  # NVLS_NCHANNELS on SM90 from 2.23 (nvls.cc:144 at 2.26.2)
LAZY_FROM = (2, 22)  # NCCL_RUNTIME_CONNECT: buffers on an algorithm's first use
RECEIVER_MIB = 10  # LL + LL128 + SIMPLE of one connection, rounded to the 2 MiB granularity
SENDER_MIB = 2
SMALL_MIB = 32 * 3 * 2 + 2  # per-channel allocations of 24 + 8 p2p channels, and the device communicator

# the NCCL a torch wheel pins (its nvidia-nccl-cu12 requirement); newer torch pins newer NCCL, all lazy
TORCH_NCCL = {(2, 3): (2, 20, 5), (2, 4): (2, 20, 5), (2, 5): (2, 21, 5), (2, 6): (2, 21, 5), (2, 7): (2, 26, 2),
              (2, 8): (2, 27, 3), (2, 9): (2, 27, 5)}
# Hopper and Blackwell data-center GPUs on an NVSwitch board (HGX / DGX / NVL): NVLink SHARP multicast
NVLS_NAMES = re.compile(r"\b(?:G?H(?:100|800|200|20)|G?B(?:100|200|300))\b", re.IGNORECASE)
NO_NVSWITCH = re.compile(r"pcie|\bnvl\b", re.IGNORECASE)  # H100 PCIe, H100 NVL: bridges, no NVSwitch


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """(2, 21, 5) from '2.21.5', '2.21.5-1' or '2.26.2.post1'; None where it is not a version."""
    match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)) if match else None


def version_text(version: tuple[int, int, int]) -> str:
    """(2, 21, 5) -> '2.21.5', the form nccl_version holds."""
    return ".".join(map(str, version))


def nccl_for_torch(torch_version: str | None) -> tuple[int, int, int] | None:
    """The NCCL a torch release's wheel pins (torch 2.6.0+cu124 -> nvidia-nccl-cu12==2.21.5); None if unknown."""
    version = parse_version(torch_version)
    if version is None:
        return None
    if version[:2] in TORCH_NCCL:
        return TORCH_NCCL[version[:2]]
    return max(TORCH_NCCL.values()) if version[:2] > max(TORCH_NCCL) else None


def nvls_capable(device_name: str | None) -> bool:
    """Whether the GPUs sit behind an NVSwitch with multicast (NCCL's NVLS). An unknown name counts as capable:
    the larger figure, since a wrong "fits" costs more than a wrong "does not fit"."""
    if not device_name:
        return True
    return bool(NVLS_NAMES.search(device_name)) and not NO_NVSWITCH.search(device_name)


def communicator_mib(version: tuple[int, int, int] | None, local_ranks: int, nvls: bool) -> tuple[int, str]:
    """(MiB, how) one communicator keeps on a device whose node holds `local_ranks` of its ranks.

    `version` None: a release from 2.22 on (every verl image verl-deploy plans for pins torch 2.7 or newer)."""
    heads = local_ranks if nvls and local_ranks > 2 else 0  # NVLS: one head GPU per local rank
    if version is None or version[:2] >= LAZY_FROM:
        return _on_first_use(version, heads)
    return _at_init(version, local_ranks, heads)


def _on_first_use(version: tuple[int, int, int] | None, heads: int) -> tuple[int, str]:
    """From 2.22: the ring's buffers and (large all-reduce) NVLS's over its 16 channels, no header."""
    ring = CHANNELS * (RECEIVER_MIB + SENDER_MIB)
    multicast = NVLS_CHANNELS * 2 * 1 * heads
    small = SMALL_MIB + 2 + (CHANNELS * 2 + 2 if heads else 0)  # rankToLocalRank; NVLS peers and credits
    release = version_text(version) if version else ">= 2.22"
    how = (f"NCCL {release} (buffers on first use): ring {ring} + small {small}"
           + (f" + NVLS {multicast} ({NVLS_CHANNELS} ch x 2 x 1 MiB x {heads} heads)" if heads else ""))
    return small + ring + multicast, how


def _at_init(version: tuple[int, int, int], local_ranks: int, heads: int) -> tuple[int, str]:
    """Before 2.22: ring, tree (a chain: one more pair per channel past 2 GPUs) and NVLS over all 24 channels with
    a 2 MiB header each."""
    ring = CHANNELS * (RECEIVER_MIB + SENDER_MIB)
    tree = ring if local_ranks > 2 else 0
    multicast = CHANNELS * 2 * (1 + 2) * heads
    small = SMALL_MIB + (CHANNELS * 2 if heads else 0)
    how = (f"NCCL {version_text(version)} (all set up at init): ring + tree {ring + tree} + small {small}"
           + (f" + NVLS {multicast} ({CHANNELS} ch x 2 x 3 MiB x {heads} heads)" if heads else ""))
    return small + ring + tree + multicast, how
