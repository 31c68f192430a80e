#!/usr/bin/env bash
# seed 001 stage 1: environment pre-check.
# A thin wrapper kept for the seed documents: all logic is in verl-deploy (see `verl-deploy --help`).
set -euo pipefail
if command -v verl-deploy >/dev/null 2>&1; then VD=(verl-deploy); else VD=(python3 -m verl_deploy); fi
exec "${VD[@]}" check "$@"
