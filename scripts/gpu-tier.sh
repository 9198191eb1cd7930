#!/usr/bin/env bash
# The GPU tier (docs/gpu.md): stock SGLang 0.5.17 on a GPU machine with no network, driven by sglops.
#
# On the CPU machine (PyPI reachable):
#   scripts/gpu-tier.sh build             # .gpu/: site.tar.xz (sglang + the wheels it imports, trimmed),
#                                         # tools.tar.xz (sglops' own deps), tiny-mla/ (config + tokenizer)
# On the GPU machine, from the repo root (a device call carrying .gpu/):
#   scripts/gpu-tier.sh up                # unpack into /tmp/gpu-tier, write its inventory and env.sh
#   scripts/gpu-tier.sh loop              # the seeds' investigation as one play (gpu-fp8-kv), in the background
#   scripts/gpu-tier.sh wait [SECONDS]    # follow the play until it ends (or SECONDS pass); rc = the play's
#   scripts/gpu-tier.sh backends          # backends side by side on the same build (bench + identity each)
#   scripts/gpu-tier.sh collect DIR       # run records, analyses, logs -> DIR/gpu-e2e.tar.gz (traces left out)
# The play runs detached (setsid) so that it outlives one device command: follow it with `wait` from the next
# call while the machine is still warm.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=${GPU_TIER_ROOT:-/tmp/gpu-tier}
PROFILE=h200-tiny-mla-fp8

env_up() {
  [ -f "$ROOT/env.sh" ] || python3 -m sglops.sandbox.gpu_tier up --src .gpu --root "$ROOT" >/dev/null || exit 1
  # shellcheck disable=SC1091
  . "$ROOT/env.sh"
  export SGLOPS_ARTIFACTS="$ROOT/artifacts" PYTHONUNBUFFERED=1
  mkdir -p "$ROOT/logs" "$ROOT/traces"
}

inv() { python3 -m invoke "$@"; }

case "${1:-}" in
  build)
    exec python3 -m sglops.sandbox.gpu_tier build ;;
  up)
    t0=$SECONDS; env_up; echo "gpu-tier: up in $((SECONDS - t0)) s ($ROOT)"
    python3 -c 'import torch, sglang, flashinfer; print("torch", torch.__version__, "| sglang", sglang.__version__,
"| flashinfer", flashinfer.__version__, "|", torch.cuda.get_device_name(0))' ;;
  loop)
    env_up
    inv facts --host local > "$ROOT/logs/facts.txt" 2>&1
    inv render "$PROFILE" --host local > "$ROOT/logs/launch.sh" 2>&1
    setsid bash -c "python3 -m invoke play gpu-fp8-kv --host local > '$ROOT/logs/play.txt' 2>&1; echo \$? > '$ROOT/logs/play.rc'" \
      </dev/null >/dev/null 2>&1 &
    echo "gpu-tier: play gpu-fp8-kv started (log $ROOT/logs/play.txt)" ;;
  wait)
    limit=${2:-560}; t0=$SECONDS; seen=0
    while :; do
      n=$(grep -cE '^\[[0-9]+/[0-9]+\]' "$ROOT/logs/play.txt" 2>/dev/null); n=${n:-0}
      if [ "$n" -gt "$seen" ]; then grep -E '^\[[0-9]+/[0-9]+\]' "$ROOT/logs/play.txt" | tail -n $((n - seen)); seen=$n; fi
      [ -f "$ROOT/logs/play.rc" ] && break
      if [ $((SECONDS - t0)) -ge "$limit" ]; then echo "gpu-tier: play still running after ${limit}s"; exit 75; fi
      sleep 5
    done
    tail -40 "$ROOT/logs/play.txt"; exit "$(cat "$ROOT/logs/play.rc")" ;;
  backends)
    env_up
    python3 benchmarks/gpu_tier_backends.py --root "$ROOT" ;;
  collect)
    out=${2:?collect DIR}; mkdir -p "$out"
    tar -C "$ROOT" --exclude='*.trace.json.gz' --exclude='*.pt.trace.json*' -czf "$out/gpu-e2e.tar.gz" artifacts logs 2>/dev/null
    # the traces themselves, while small enough to keep (each analysed in the record above)
    find "$ROOT/artifacts" -name '*.trace.json.gz' -size -6M | head -40 | tar -czf "$out/traces.tar.gz" -T - 2>/dev/null
    ls -la "$out" ;;
  *)
    sed -n 2,14p "$0"; exit 2 ;;
esac
