#!/usr/bin/env bash
# Set up (idempotent), bring up a local sandbox GPU host, run the investigation end to end, tear it down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
. scripts/python.sh
exec "$PY" -m invoke demo "$@"
