#!/usr/bin/env bash
# seed 001 stage 4: bash scripts/verl_docker_run.sh <image> <container name> [--yes] [--devices 0-7]
# A thin wrapper kept for the seed documents: all logic is in verl-deploy (see `verl-deploy --help`).
set -euo pipefail
if command -v verl-deploy >/dev/null 2>&1; then VD=(verl-deploy); else VD=(python3 -m verl_deploy); fi
if [ $# -lt 2 ]; then echo "usage: $0 <image> <container name> [--yes] [verl-deploy options]" >&2; exit 2; fi
exec "${VD[@]}" container create "$1" "$2" "${@:3}"
