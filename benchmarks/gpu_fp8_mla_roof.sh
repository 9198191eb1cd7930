#!/usr/bin/env bash
# One device call for issue 37 items 2 and 3, and the table of record on whatever card came: the package's cubin,
# the mma.sync roof (lab/fp8_mla_decode/micro/mma_roof.cu), the 128-head cells against cuBLAS of the same shape
# (benchmarks/gpu_fp8_mla_roof.py), Nsight Compute on the 128-head cell (pipes, issue, stalls) and on the small
# cells (each kernel's own time: decode vs merge), then gpu_fp8_mla_record.sh (self-test + the table).
# Run from the repo root on the device machine with carry [".whl"] (the vLLM file, see gpu_fp8_mla_record.sh).
# Everything lands in $OUT/run.tgz (re-packed after each step, so a call cut short still brings back what ran).
#   tar xzf run.tgz; python3 benchmarks/fp8_mla_table.py record.json
set -uo pipefail
OUT=${OUT:?}
R=/tmp/roof-run
rm -rf $R && mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH PYTHONPATH=$PWD/kernels/fp8_mla_decode PYTHONUNBUFFERED=1
pack() { tar czf $OUT/run.tgz -C $R . ; }
step() { echo "== $1 ($(date -u +%T), +$((SECONDS))s)"; }
NCU="ncu --clock-control none"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,driver_version --format=csv > $R/gpu.csv
cat $R/gpu.csv
step build
( cd kernels/fp8_mla_decode && python3 -c "import build; build.build_cuda('sm_90a', 'sm90')" ) > $R/build.txt 2>&1
tail -3 $R/build.txt
step mma_roof
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -o /tmp/mma_roof lab/fp8_mla_decode/micro/mma_roof.cu 2>&1 && \
  timeout 60 /tmp/mma_roof 2>&1 | tee $R/mma_roof.txt
pack
step roof
timeout ${ROOF_S:-180} python3 benchmarks/gpu_fp8_mla_roof.py --out $R/roof.json 2>&1 | tee $R/roof.txt
pack
step ncu-h128
timeout 150 $NCU --kernel-name regex:fp8_mla_n --launch-skip 2 --launch-count 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section Occupancy \
  --section SchedulerStats --page raw --csv python3 benchmarks/gpu_fp8_mla_ncu.py --heads 128 --bs 64 --ctx 8192 \
  > $R/ncu_h128.csv 2> $R/ncu_h128.err
echo "ncu h128 rc=$? $(wc -c < $R/ncu_h128.csv) bytes"
step ncu-small
timeout 150 $NCU --kernel-name regex:fp8_mla_ --metrics gpu__time_duration.sum,launch__grid_size,sm__cycles_active.avg \
  --csv python3 benchmarks/gpu_fp8_mla_ncu.py --small > $R/ncu_small.csv 2> $R/ncu_small.err
echo "ncu small rc=$? $(wc -c < $R/ncu_small.csv) bytes"
pack
step record
OUT=$R SELFTEST_S=${SELFTEST_S:-150} HARNESS_S=${HARNESS_S:-300} bash benchmarks/gpu_fp8_mla_record.sh
pack
step done
ls -la $R
