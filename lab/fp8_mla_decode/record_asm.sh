#!/bin/sh
# Re-create asm_variants_sm90a.jsonl: asm_report.py (CPU only, Triton 3.6.0's ptxas) for every variant the
# H200 A/B times, 16 heads with the A/B's configurations, and the 128-head candidates.
# Run from the repository root: sh kernels/fp8_mla_decode/record_asm.sh
set -e
export PYTHONPATH="$PWD/kernels/fp8_mla_decode${PYTHONPATH:+:$PYTHONPATH}"
R="python3 kernels/fp8_mla_decode/asm_report.py"
OUT=kernels/fp8_mla_decode/asm_variants_sm90a.jsonl
D=$(mktemp -d)
: > "$OUT.tmp"
for v in base f16pf_w4 f16pf_n64 cpa cpa_w4 cpa_vm cpa_vm_s6 cpa_vm_w4 cpa_vm_n16 cpa_vm_n16w2 cpa_vm_n64 \
        cpa_vm_w4_alu cpa_vm_n16_alu cpa_vm_n16_alu2; do
    $R "$v" --dump "$D/$v" >> "$OUT.tmp"
done
$R base --block-h 64 --warps 8 --stages 2 --dump "$D/base_h64" >> "$OUT.tmp"       # 128 heads, the picked config
$R cpa_vm --block-h 32 --dump "$D/cpa_vm_h32" >> "$OUT.tmp"                        # 128 heads, the A/B's config
$R cpa_h64 --block-h 64 --dump "$D/cpa_h64" >> "$OUT.tmp"                          # 128 heads, 64-head block: spills
rm -rf "$D"
mv "$OUT.tmp" "$OUT"
