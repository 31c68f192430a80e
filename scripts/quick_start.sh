#!/usr/bin/env bash
# seed 000 quick start: CONTAINER, TRAIN_STEPS, SWANLAB_HOST, SWANLAB_API_KEY, ... from the environment.
# A thin wrapper kept for the seed documents: all logic is in verl-deploy (see `verl-deploy --help`).
set -euo pipefail
if command -v verl-deploy >/dev/null 2>&1; then VD=(verl-deploy); else VD=(python3 -m verl_deploy); fi
exec "${VD[@]}" launch --yes "$@"
