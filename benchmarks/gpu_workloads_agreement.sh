#!/usr/bin/env bash
# Issue 40 item 6 on the GPU tier in one device call: sglops' sessions (chat endpoint) and trace replay against
# bench_serving on one stock 0.5.17 server (triton attention, BF16 KV, a chat template that adds nothing), sglops'
# logprobs and telemetry off as bench_serving asks neither (benchmarks/bench_workloads_vs_bench_serving.py).
#
# The carry folder (CARRY, default .gpu40; a device call's carry: [".gpu40"]) holds site.tar.xz, tools.tar.xz,
# tier.json and the tiny-mla* folders from .gpu/ (hard links) and bench40.tar.xz: bench/ (HF datasets, dill,
# multiprocess: bench_serving's imports the image lacks) and overlay/sglang/benchmark/ (0.5.23's, unmodified: its
# mooncake mode runs where 0.5.17's raises). Made on the CPU machine:
#   mkdir -p .gpu40 && ln -f .gpu/{site.tar.xz,tools.tar.xz,tier.json} .gpu40/ && cp -al .gpu/tiny-mla* .gpu40/
#   (bench/ from .gpu-bench/bench.tar.xz's datasets, dill, multiprocess; overlay/ from an installed 0.5.23)
#
#   bash benchmarks/gpu_workloads_agreement.sh start [ROUNDS]   # up, server, both workloads detached; waits
#   (WORKLOADS="trace" for one of them)
#   bash benchmarks/gpu_workloads_agreement.sh wait [SECONDS]   # the next call (machine still warm)
# Results: $OUT/sessions.json, $OUT/trace.json, their logs and the server's prefill lines.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=/tmp/gpu-tier CARRY=${CARRY:-.gpu40} OUT=${OUT:?} JOB=/tmp/gpu-tier/w40

collect() {
  cp "$JOB"/*.json "$JOB"/*.txt "$OUT"/ 2>/dev/null
  grep -E "Prefill batch|Decode batch" "$ROOT/server.log" 2>/dev/null | tail -4000 | gzip > "$OUT/server_batches.log.gz"
  tail -30 "$ROOT/server.log" > "$OUT/server_tail.txt" 2>/dev/null
  ls -la "$OUT"
}

wait_job() {
  local limit=$1 t0=$SECONDS
  while [ ! -f "$JOB/done" ] && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 5; done
  tail -5 "$JOB"/*_log.txt 2>/dev/null
  [ -f "$JOB/done" ] && echo "w40: done" || echo "w40: still running after ${limit}s"
  collect
}

case "${1:-}" in
  start)
    rounds=${2:-3}
    python3 -m sglops.sandbox.gpu_tier up --src "$CARRY" --root "$ROOT" > /dev/null || exit $?
    tar -xJf "$CARRY/bench40.tar.xz" -C "$ROOT"
    # shellcheck disable=SC1091
    . "$ROOT/env.sh"
    mkdir -p "$JOB"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$JOB/gpu.txt"
    t0=$SECONDS
    setsid python3 -m sglang.launch_server --model-path "$ROOT/tiny-mla" --load-format dummy \
      --attention-backend triton --cuda-graph-max-bs 8 --host 127.0.0.1 --port 30000 \
      --chat-template benchmarks/results/workloads-agreement-2026-12-06/concat.jinja \
      > "$ROOT/server.log" 2>&1 < /dev/null &
    healthy='import urllib.request as u; u.urlopen("http://127.0.0.1:30000/health", timeout=5)'
    until python3 -c "$healthy" 2>/dev/null; do
      sleep 3
      [ $((SECONDS - t0)) -lt 400 ] || { echo "w40: server not healthy in 400 s"; tail -20 "$ROOT/server.log"; exit 1; }
    done
    echo "w40: server healthy in $((SECONDS - t0)) s" | tee "$JOB/start.txt"
    common="--port 30000 --server-log $ROOT/server.log --python python3 --model $ROOT/tiny-mla --rounds $rounds"
    common="$common --no-logprobs --telemetry-interval 0"
    job=""
    for w in ${WORKLOADS:-sessions trace}; do
      extra=""; [ "$w" = trace ] && extra="--trace-client $ROOT/overlay"
      job="$job python3 benchmarks/bench_workloads_vs_bench_serving.py $common --workloads $w $extra"
      job="$job --json $JOB/$w.json > $JOB/${w}_log.txt 2>&1;"
    done
    setsid bash -c "$job touch $JOB/done" < /dev/null > /dev/null 2>&1 &
    wait_job "${WAIT_S:-420}" ;;
  wait)
    wait_job "${2:-540}" ;;
  *)
    sed -n 2,16p "$0"; exit 2 ;;
esac
