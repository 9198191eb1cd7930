#!/usr/bin/env bash
# One device call (~6 min) producing every H200 figure in BENCH.md: run from the repo root on the device
# machine with carry [".whl"] (prepared as BENCH.md says). Writes under $OUT.
set -uo pipefail
OUT=${OUT:?}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/fi && tar -xJf .whl/flashinfer-0.7.2-mla.tar.xz -C /tmp/fi
export PYTHONPATH=/tmp/fi:/tmp/site:$PWD/kernels/fp8_mla_decode:$PWD/kernels/gather_cast \
    FLASHINFER_WORKSPACE_BASE=/tmp/fiws TVM_FFI_CACHE_DIR=/tmp/tvm CUDA_HOME=$(readlink -f /usr/local/cuda)
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv > $OUT/gpu.csv
# the kernel's own build step and self-test, as `inv build-kernel fp8_mla_decode` runs them on a host
(cd kernels/fp8_mla_decode && timeout 150 python3 build.py --arch sm_90a && timeout 150 python3 selftest.py) \
    > $OUT/build_selftest.txt 2>&1; echo "build+selftest rc=$?" >> $OUT/build_selftest.txt
timeout 330 python3 benchmarks/gpu_fp8_mla_decode.py --out $OUT --budget 300 --sweep-budget 60 \
    --native-helpers .whl/fp8_native_helpers.py > $OUT/bench.txt 2>&1; echo "bench rc=$?" >> $OUT/bench.txt
H=benchmarks/results/h200_flashinfer_mla_helpers.py
timeout 60 python3 benchmarks/gpu_flashinfer_mla.py --helpers $H --out $OUT/chk --check --backends fa3 \
    > $OUT/check.txt 2>&1; echo "check rc=$?" >> $OUT/check.txt
sed 's/out\[sel\] = pool.view(torch.uint8)\[sel\]/out[sel[:-1]] = pool.view(torch.uint8)[sel[:-1]]/' $H > /tmp/Hb.py
timeout 60 python3 benchmarks/gpu_flashinfer_mla.py --helpers /tmp/Hb.py --out $OUT/brk --check --backends fa3 \
    --check-heads 16 --check-bs 1,4 > $OUT/check_broken.txt 2>&1; echo "broken check rc=$? (must be 1)" >> $OUT/check_broken.txt
ls -la $OUT
