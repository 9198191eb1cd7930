#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: real sshd sandbox hosts on loopback, real SGLang releases.
# pytest-xdist spreads whole modules over workers (tests/suite_schedule.py); most of the suite waits on servers,
# sshd and subprocesses rather than computing, so there is one worker more than there are cores (at most one per
# 6 GB of memory: a worker may hold two real servers). SGLOPS_TEST_WORKERS=N sets the count (0: no xdist); extra
# arguments go to pytest after ours (`./scripts/test.sh -n 0 -k bench` runs serially). The wall time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash scripts/setup.sh test
t1=$SECONDS
. scripts/python.sh
if [ -z "${SGLOPS_TEST_WORKERS:-}" ]; then
  cores=$(nproc)
  mem_gb=$(awk '/^MemTotal:/ {print int($2 / 1048576)}' /proc/meminfo)
  SGLOPS_TEST_WORKERS=$(( cores + 1 ))
  [ $(( mem_gb / 6 )) -lt "$SGLOPS_TEST_WORKERS" ] && SGLOPS_TEST_WORKERS=$(( mem_gb / 6 ))
  [ "$SGLOPS_TEST_WORKERS" -lt 1 ] && SGLOPS_TEST_WORKERS=1
fi
rc=0
# the run ends with the slowest modules and each worker's total (tests/suite_timing.py); the same as JSON here
export SGLOPS_SUITE_TIMES="${SGLOPS_SUITE_TIMES:-.cache/suite-times.json}"
mkdir -p "$(dirname "$SGLOPS_SUITE_TIMES")"
"$PY" -m pytest -n "$SGLOPS_TEST_WORKERS" "$@" || rc=$?
echo "test.sh: set-up $(( t1 - t0 )) s, tests $(( SECONDS - t1 )) s, total $(( SECONDS - t0 )) s" \
  "(pytest -n $SGLOPS_TEST_WORKERS, exit $rc)" >&2
exit "$rc"
