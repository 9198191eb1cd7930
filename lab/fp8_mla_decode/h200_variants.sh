#!/usr/bin/env bash
# One device call (< 4 min) timing every split-stage variant (benchmarks/gpu_fp8_mla_variants.py's
# DEFAULT_VARIANTS) beside base, (c) gather-cast and (e) the BF16 floor, after checking each against fp32.
# Run from the repo root on the device machine with carry [".whl"] (prepared as BENCH.md says); writes
# $OUT/fp8_mla_variants.json and $OUT/variants.txt.
set -uo pipefail
OUT=${OUT:?}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/fi && tar -xJf .whl/flashinfer-0.7.2-mla.tar.xz -C /tmp/fi
export SGLOPS_FP8_MLA_VARIANTS=1  # the experiment kernels too (a host's build-kernel compiles the picks alone)
export PYTHONPATH=/tmp/fi:/tmp/site:$PWD/kernels/fp8_mla_decode:$PWD/kernels/gather_cast \
    FLASHINFER_WORKSPACE_BASE=/tmp/fiws TVM_FFI_CACHE_DIR=/tmp/tvm CUDA_HOME=$(readlink -f /usr/local/cuda)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv > $OUT/gpu.csv
# the CUDA kernel's resource report per target, from this machine's nvcc
for a in 90a 120; do nvcc -cubin -gencode=arch=compute_$a,code=sm_$a -O3 -DFP8_MLA_VARIANTS -Xptxas -v -o /tmp/fp8mla_$a.cubin \
  kernels/fp8_mla_decode/sglops_kernels/fp8_mla_decode/fp8_mla_decode.cu > $OUT/ptxas_sm_$a.txt 2>&1; done
# MICRO=1: the issue rates of the tile's instructions first (micro/pipe_rates.cu, ~5 s) -> $OUT/pipe_rates.txt
if [ -n "${MICRO:-}" ]; then nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/pipe_rates \
  kernels/fp8_mla_decode/micro/pipe_rates.cu && timeout 60 /tmp/pipe_rates > $OUT/pipe_rates.txt 2>&1; cat $OUT/pipe_rates.txt; fi
# SELFTEST=kernel,kernel: selftest.py's cases (8/16/128 heads, empty requests, page 64, graph replays) with each
# named CUDA kernel before any timing -> $OUT/selftest.txt
if [ -n "${SELFTEST:-}" ]; then (cd kernels/fp8_mla_decode && SGLOPS_FP8_MLA_KERNELS=$SELFTEST timeout 150 \
  python3 selftest.py) > $OUT/selftest.txt 2>&1; echo "selftest rc=$?" >> $OUT/selftest.txt; cat $OUT/selftest.txt; fi
timeout $((${BUDGET:-190} + 40)) python3 benchmarks/gpu_fp8_mla_variants.py --out $OUT --budget ${BUDGET:-190} \
  ${VARIANTS:+--variants $VARIANTS} ${HEADS:+--heads $HEADS} > $OUT/variants.txt 2>&1
echo "variants rc=$?" >> $OUT/variants.txt
tail -60 $OUT/variants.txt
