#!/usr/bin/env bash
# The system services the test suite uses, installed from Debian where this is root with apt-get.
# Each one is optional: a test that needs a missing one skips and says why, so this never fails the run.
set -uo pipefail

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
updated=""
install() {  # install PACKAGES... ; WHAT-IS-SKIPPED is the last argument
    local skipped="${*: -1}" packages=("${@:1:$#-1}")
    if ! can_install; then
        echo "not root with apt-get: ${packages[*]} not installed; ${skipped} will be skipped"
        return 0
    fi
    if [ -z "$updated" ]; then apt-get update -qq >/dev/null 2>&1; updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null 2>&1 \
        || echo "${packages[*]} could not be installed: ${skipped} will be skipped"
}

# multi-node tests bring a worker up over real SSH
[ -x /usr/sbin/sshd ] || install openssh-server "the SSH tests"
# container tests start a private dockerd (own socket and data root) and build a small Debian image
{ [ -x /usr/sbin/dockerd ] && [ -x /usr/sbin/debootstrap ]; } || install docker.io debootstrap "the real-engine container tests"
# the report test opens the page in a real headless Chromium
command -v chromium >/dev/null 2>&1 || install chromium "the report's browser test"
# the Slurm tests start a one-node cluster (munged, slurmctld, slurmd on free ports)
[ -x /usr/sbin/slurmctld ] || install slurm-wlm munge "the Slurm tests"
exit 0
