"""The zero-copy FP8 MLA decode kernel (kernels/fp8_mla_decode) computes attention over the FP8 rows:
its split-KV stage and merge, run by Triton's CPU interpreter against fp32 torch attention, for both
MMA orientations (16 heads), 16 and 128 heads (a head block of 64 inside one program), page size 1 and 64, one
split (direct BF16 store) and several (merge), empty requests, a kv_scale, and an index buffer whose
stale tail holds ids far outside the pool (the kernel must read only kv_indptr's range).
Skipped where Triton is not installed (the H200 figures are in kernels/fp8_mla_decode/BENCH.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNEL = Path(__file__).resolve().parent.parent / "kernels" / "fp8_mla_decode"
SCRIPT = r"""
import torch
from sglops_kernels.fp8_mla_decode import mla_decode, reference, splits_for, workspace
from sglops_kernels.fp8_mla_decode import _triton as impl

torch.manual_seed(1)
failures = []

def check(label, out, ref, tol):
    if torch.isnan(out.float()).any():
        failures.append(f"{label}: unwritten (NaN) outputs")
        return
    rel = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))
    err = float((out.float() - ref).abs().max())
    if err > tol:
        failures.append(f"{label}: max abs err {err:.3g} > {tol} (rel {rel:.3g})")

ROWS = 700
pool = (torch.randn(ROWS, 1, 576) * 0.5).to(torch.float8_e4m3fn)
# page size 1: three requests, the middle one empty; a stale tail of wild ids past indptr[-1]
indptr = torch.tensor([0, 37, 37, 150], dtype=torch.int32)
ids = torch.randint(0, ROWS, (150 + 40,), dtype=torch.int32)
ids[150:] = 10**8  # never to be read
# page size 64: pages of the same pool ([ROWS // 64 pages, 64, 576]), lengths not page multiples
pages = ROWS // 64
pindptr = torch.tensor([0, 1, 1, 4], dtype=torch.int32)
pids = torch.tensor([3, 0, 7, 5, 10**7], dtype=torch.int32)  # last: stale
plens = torch.tensor([50, 0, 129], dtype=torch.int32)

for heads, bh in ((16, 16), (128, 64)):
    q = torch.randn(3, heads, 576).to(torch.bfloat16)
    for page in (1, 64):
        if page == 1:
            args, kw = (indptr, ids), {}
            ref = reference(q, pool, indptr, ids, 0.07, 0.5)
        else:
            args, kw = (pindptr, pids), {"page_size": 64, "kv_lens": plens}
            ref = reference(q, pool, pindptr, pids, 0.07, 0.5, page_size=64, kv_lens=plens)
        for trans in ((0, 1) if heads == 16 else (0,)):  # 128 heads: the interpreter is slow, one pass
            cfg = dict(impl.config_for(heads), block_h=bh, block_n=32 if trans == 0 else 64, trans=trans)
            for splits in ((1, 3) if heads == 16 else (3,)):
                out = torch.full((3, heads, 512), float("nan"), dtype=torch.float32)
                ws = workspace(3, heads, splits, "cpu") if splits > 1 else None
                mla_decode(q, pool.view(torch.uint8), *args, 0.07, 0.5, n_splits=splits, out=out, workspace=ws,
                           config=cfg, **kw)
                check(f"heads={heads} page={page} trans={trans} splits={splits}", out, ref, 2e-5)
# BF16 output (the production dtype): within bf16 rounding of fp32
q = torch.randn(3, 16, 576).to(torch.bfloat16)
out = mla_decode(q, pool, indptr, ids, 0.07, 1.0, n_splits=2)
ref = reference(q, pool, indptr, ids, 0.07, 1.0)
check("bf16 out", out, ref, float(ref.abs().max()) * 2 ** -8 + 1e-6)
# split policy: never more than the rows allow, fills the GPU at small batches
assert splits_for(1, 16, 131072, 132) >= 100, splits_for(1, 16, 131072, 132)
assert splits_for(64, 16, 4096, 132) <= 8
assert splits_for(1, 16, 64, 132) == 1
print("\n".join(failures) if failures else "ok")
"""


def test_split_kv_decode_matches_fp32_attention_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.stdout[-2000:], proc.stderr[-2000:])
