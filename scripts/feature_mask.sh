#!/usr/bin/env bash
# seed 001: decode a 7-bit feature mask: bash scripts/feature_mask.sh 1010000
# A thin wrapper kept for the seed documents: all logic is in verl-deploy (see `verl-deploy --help`).
set -euo pipefail
if command -v verl-deploy >/dev/null 2>&1; then VD=(verl-deploy); else VD=(python3 -m verl_deploy); fi
if [ $# -lt 1 ]; then echo "usage: $0 <7-bit mask, e.g. 1100000>" >&2; exit 2; fi
exec "${VD[@]}" features --mask "$1" "${@:2}"
