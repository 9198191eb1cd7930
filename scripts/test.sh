#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: real sshd sandbox hosts on loopback, real SGLang releases.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/python.sh
exec "$PY" -m pytest "$@"
