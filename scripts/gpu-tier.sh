#!/usr/bin/env bash
# The GPU tier (docs/gpu.md): stock SGLang 0.5.17 on a GPU machine with no network, driven by sglops.
#
# On the CPU machine (PyPI reachable):
#   scripts/gpu-tier.sh build             # .gpu/: site.tar.xz (sglang + the wheels it imports, trimmed),
#                                         # tools.tar.xz (sglops' own deps), tiny-mla*/ (config + tokenizer);
#                                         # prints what each device call carries (the tree + .gpu, <= 64 MiB);
#                                         # where one call cannot take it all, the rest goes to .gpu-2/
#   scripts/gpu-tier.sh carry             # the same sizes again (after a change to the tree), re-split if needed
#   python3 -m sglops.sandbox.gpu_tier keep-jit DIR/jit.tar.gz   # FlashInfer modules a call built: the next
#                                         # `up` seeds them (a cold restart then compiles nothing)
# On the GPU machine, from the repo root (a device call carrying .gpu/; on a split, a second call carrying .gpu-2/):
#   scripts/gpu-tier.sh up                # unpack into /tmp/gpu-tier, write its inventory and env.sh (on a split's
#                                         # first call: keeps what came and exits 75: carry .gpu-2, `up` again)
#   scripts/gpu-tier.sh start [WHAT...]   # in the background, in order: plays by name (default: gpu-fp8-kv, the
#                                         # seeds' investigation), `backends` (the MLA backends side by side), or
#                                         # any shell command line (one argument)
#   scripts/gpu-tier.sh wait [SECONDS]    # follow the job until it ends (or SECONDS pass: rc 75, call again)
#   scripts/gpu-tier.sh collect DIR       # run records, analyses, server logs -> DIR/gpu-e2e.tar.gz, small traces
#                                         # -> DIR/traces.tar.gz, FlashInfer's JIT-built modules -> DIR/jit.tar.gz
# The job runs detached (setsid) so that it outlives one device command (10 minutes at most): follow it with
# `wait` from the next call while the machine is still warm (it goes back 30 s after a call ends).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=${GPU_TIER_ROOT:-/tmp/gpu-tier}
PROFILE=h200-tiny-mla-fp8

env_up() {
  [ -f "$ROOT/env.sh" ] || python3 -m sglops.sandbox.gpu_tier up --root "$ROOT" >/dev/null || exit $?
  # shellcheck disable=SC1091
  . "$ROOT/env.sh"
  export SGLOPS_ARTIFACTS="$ROOT/artifacts" PYTHONUNBUFFERED=1
  mkdir -p "$ROOT/logs" "$ROOT/traces"
}

inv() { python3 -m invoke "$@"; }

case "${1:-}" in
  build)
    exec python3 -m sglops.sandbox.gpu_tier build ;;
  carry)
    exec python3 -m sglops.sandbox.gpu_tier carry ;;
  up)
    t0=$SECONDS; env_up; echo "gpu-tier: up in $((SECONDS - t0)) s ($ROOT)"
    python3 -c 'import torch, sglang, flashinfer; print("torch", torch.__version__, "| sglang", sglang.__version__,
"| flashinfer", flashinfer.__version__, "|", torch.cuda.get_device_name(0))' ;;
  start)
    # start [WHAT...]: each WHAT in order, in one detached job; a play name (playbooks/WHAT.yaml) runs as
    # `inv play WHAT --host local`, `backends` the backends script, anything else as a shell command line.
    # No WHAT: the seeds' investigation (gpu-fp8-kv). Each one's output: logs/job-N-<name>.txt.
    env_up
    rm -f "$ROOT/logs/job.rc" "$ROOT"/logs/job-*.txt
    inv facts --host local > "$ROOT/logs/facts.txt" 2>&1
    inv render "$PROFILE" --host local > "$ROOT/logs/launch.sh" 2>&1
    shift; [ $# -gt 0 ] || set -- gpu-fp8-kv
    job="rc=0"; n=0
    for what in "$@"; do
      n=$((n + 1)); name=$(printf '%s' "$what" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-40); log="$ROOT/logs/job-$n-$name.txt"
      if [ -f "playbooks/$what.yaml" ]; then cmd="python3 -m invoke play $what --host local"
      elif [ "$what" = backends ]; then cmd="python3 benchmarks/gpu_tier_backends.py --root '$ROOT'"
      else cmd="$what"; fi
      job="$job; echo \"== $what (\$(date -u +%T))\" > '$log'; ( $cmd ) >> '$log' 2>&1 || rc=\$((rc ? rc : \$?))"
    done
    setsid bash -c "$job; echo \$rc > '$ROOT/logs/job.rc'" </dev/null >/dev/null 2>&1 &
    echo "gpu-tier: started $# job(s) (logs in $ROOT/logs)" ;;
  wait)
    limit=${2:-560}; t0=$SECONDS; seen=0
    while :; do
      n=$(cat "$ROOT"/logs/job-*.txt 2>/dev/null | grep -cE '^(== |\[[0-9]+/[0-9]+\]|  inv )')
      if [ "${n:-0}" -gt "$seen" ]; then
        cat "$ROOT"/logs/job-*.txt 2>/dev/null | grep -E '^(== |\[[0-9]+/[0-9]+\]|  inv )' | tail -n $((n - seen)); seen=$n
      fi
      [ -f "$ROOT/logs/job.rc" ] && break
      if [ $((SECONDS - t0)) -ge "$limit" ]; then echo "gpu-tier: play still running after ${limit}s"; exit 75; fi
      sleep 5
    done
    for f in "$ROOT"/logs/job-*.txt; do echo "-- $f"; tail -25 "$f"; done; exit "$(cat "$ROOT/logs/job.rc")" ;;
  backends)
    env_up
    python3 benchmarks/gpu_tier_backends.py --root "$ROOT" ;;
  collect)
    out=${2:?collect DIR}; mkdir -p "$out"
    rm -rf "$ROOT/host-state"; cp -r "$HOME/.local/state/sglops" "$ROOT/host-state" 2>/dev/null  # server logs, ledgers
    tar -C "$ROOT" --exclude='*.trace.json.gz' --exclude='*.pt.trace.json*' -czf "$out/gpu-e2e.tar.gz" \
      artifacts logs host-state backends.json 2>/dev/null
    # the traces themselves, while small enough to keep (each analysed in the record above)
    find "$ROOT/artifacts" -name '*.trace.json.gz' -size -6M | head -40 | tar -czf "$out/traces.tar.gz" -T - 2>/dev/null
    find "$ROOT/flashinfer-jit" -name '*.so' 2>/dev/null | tar -czf "$out/jit.tar.gz" -T - 2>/dev/null
    [ "$(stat -c %s "$out/jit.tar.gz" 2>/dev/null || echo 0)" -lt 16000000 ] || rm -f "$out/jit.tar.gz"
    ls -la "$out" ;;
  *)
    sed -n 2,22p "$0"; exit 2 ;;
esac
