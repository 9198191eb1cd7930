#!/usr/bin/env bash
# Diagnosis to the source line on the GPU tier (docs/trace.md, "On a GPU"): stack traces of the real sglang 0.5.17
# server before and after gather-cast, analysed with the probe's findings, and diffed per SGLang function.
#
# On the GPU machine, from the repo root, after `scripts/gpu-tier.sh up` (a device call carrying .gpu/):
#   benchmarks/gpu_stack_trace.sh start      # `run` detached (setsid): it outlives one device command
#   benchmarks/gpu_stack_trace.sh wait [S]   # follow it until it ends (or S seconds pass: rc 75, call again)
#   benchmarks/gpu_stack_trace.sh run        # in the foreground: probe, eager restart, profile --stack, kernel +
#                                            # patch, restart, profile --stack, diff-trace, revert, one graph-on
#                                            # profile; logs in $ROOT/stack/ (several restarts: > 10 min cold)
#   benchmarks/gpu_stack_trace.sh collect D  # the runs' analyses, reports, diff and small traces -> D/stack*.tar.gz
#
# CUDA graphs are OFF for these profiles (a profile that extends h200-tiny-mla-fp8 with `cuda_graph: {disable:
# true}`): a graph replay's kernels hang off cudaGraphLaunch, whose Python stack is the replay call, not the
# line that captured the kernel; `analyze-trace` says so when it sees one. One graph-on profile is taken too, to
# show that note on real data.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=${GPU_TIER_ROOT:-/tmp/gpu-tier}
BASE=h200-tiny-mla-fp8
EAGER=$BASE-eager
OUT="$ROOT/stack"

env_up() {
  [ -f "$ROOT/env.sh" ] || { echo "gpu_stack_trace: run scripts/gpu-tier.sh up first" >&2; exit 2; }
  # shellcheck disable=SC1091
  . "$ROOT/env.sh"
  export SGLOPS_ARTIFACTS="$ROOT/artifacts" PYTHONUNBUFFERED=1
  # the repo's profiles plus one with CUDA graphs off, in a folder of their own (the repo stays as it is)
  mkdir -p "$ROOT/profiles" "$OUT"
  cp playbooks/profiles/*.yaml "$ROOT/profiles/"
  printf 'extends: %s\ndescription: %s with CUDA graphs off (stack traces reach the launching line)\ncuda_graph: {disable: true}\n' \
    "$BASE" "$BASE" > "$ROOT/profiles/$EAGER.yaml"
  export SGLOPS_PROFILES="$ROOT/profiles"
}

inv() { python3 -m invoke "$@"; }
run_id() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$1"; }

case "${1:-}" in
  run)
    env_up; t0=$SECONDS
    inv probe-backends --host local > "$OUT/probe.txt" 2>&1 || { tail -5 "$OUT/probe.txt"; exit 1; }
    inv restart "$EAGER" --host local > "$OUT/restart-before.txt" 2>&1 || { tail -20 "$OUT/restart-before.txt"; exit 1; }
    inv profile --host local --stack --steps 5 --json > "$OUT/before.json" 2> "$OUT/before.err" || { tail -5 "$OUT/before.err"; exit 1; }
    inv analyze-trace "$SGLOPS_ARTIFACTS/local/$(run_id "$OUT/before.json")/traces" --out "$OUT/before" > "$OUT/before.txt" 2>&1
    inv build-kernel gather_cast --host local > "$OUT/kernel.txt" 2>&1 || { tail -5 "$OUT/kernel.txt"; exit 1; }
    inv apply-patch gather-cast --host local > "$OUT/patch.txt" 2>&1 || { tail -5 "$OUT/patch.txt"; exit 1; }
    inv restart "$EAGER" --host local > "$OUT/restart-after.txt" 2>&1 || { tail -20 "$OUT/restart-after.txt"; exit 1; }
    inv profile --host local --stack --steps 5 --json > "$OUT/after.json" 2> "$OUT/after.err" || { tail -5 "$OUT/after.err"; exit 1; }
    inv analyze-trace "$SGLOPS_ARTIFACTS/local/$(run_id "$OUT/after.json")/traces" --out "$OUT/after" > "$OUT/after.txt" 2>&1
    inv diff-trace "$(run_id "$OUT/before.json")" "$(run_id "$OUT/after.json")" > "$OUT/diff.txt" 2>&1
    inv revert-patch gather-cast --host local > "$OUT/revert.txt" 2>&1
    if [ "${GRAPHS:-0}" = 1 ]; then  # one graph-on profile: the replay note on real data (one more restart)
      inv restart "$BASE" --host local > "$OUT/restart-graphs.txt" 2>&1 && \
        inv profile --host local --stack --steps 5 --json > "$OUT/graphs.json" 2> "$OUT/graphs.err"
    fi
    inv stop --host local > /dev/null 2>&1
    echo "gpu_stack_trace: done in $((SECONDS - t0)) s"
    for f in before after; do echo "== $f"; sed -n 1,6p "$OUT/$f.txt"; done
    echo "== diff"; sed -n 1,3p "$OUT/diff.txt"; grep -A8 "SGLang function" "$OUT/diff.txt" | head -10 ;;
  start)
    env_up; rm -f "$OUT/rc"
    setsid bash -c "'$0' run > '$OUT/run.txt' 2>&1; echo \$? > '$OUT/rc'" </dev/null >/dev/null 2>&1 &
    echo "gpu_stack_trace: started (log $OUT/run.txt)" ;;
  wait)
    limit=${2:-560}; t0=$SECONDS
    until [ -f "$OUT/rc" ]; do
      if [ $((SECONDS - t0)) -ge "$limit" ]; then tail -3 "$OUT/run.txt" 2>/dev/null; echo "gpu_stack_trace: still running"; exit 75; fi
      sleep 5
    done
    tail -40 "$OUT/run.txt"; exit "$(cat "$OUT/rc")" ;;
  collect)
    out=${2:?collect DIR}; mkdir -p "$out"
    tar -C "$ROOT" -czf "$out/stack.tar.gz" stack profiles 2>/dev/null
    for f in before after graphs; do
      [ -f "$OUT/$f.json" ] || continue
      find "$ROOT/artifacts/local/$(run_id "$OUT/$f.json")" -name '*.trace.json.gz' -size -12M
    done | tar -czf "$out/stack-traces.tar.gz" -T - 2>/dev/null
    ls -la "$out" ;;
  *)
    sed -n 2,16p "$0"; exit 2 ;;
esac
