"""The zero-copy FP8 MLA decode prototype (kernels/fp8_mla_decode) computes attention over the FP8
rows: its split-KV stage and merge, run by Triton's CPU interpreter against fp32 torch attention.
Skipped where Triton is not installed (the H200 figures are in docs/patches.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNEL = Path(__file__).resolve().parent.parent / "kernels" / "fp8_mla_decode"
SCRIPT = """
import torch
from sglops_kernels.fp8_mla_decode import mla_decode, reference
torch.manual_seed(1)
pool = (torch.randn(400, 1, 576) * 0.5).to(torch.float8_e4m3fn)
indptr = torch.tensor([0, 37, 37, 107], dtype=torch.int32)  # an empty request included
ids = torch.randint(0, 400, (107,), dtype=torch.int32)
q = torch.randn(3, 16, 576).to(torch.bfloat16)
for splits in (1, 3):
    out = mla_decode(q, pool.view(torch.uint8), indptr, ids, 0.07, 0.5, n_splits=splits, out=torch.empty(3, 16, 512))
    ref = reference(q, pool, indptr, ids, 0.07, 0.5)
    ref[1] = 0.0  # nothing to attend to: zeros
    err = float((out - ref).abs().max())
    assert err < 1e-4, (splits, err)
print("ok")
"""


def test_split_kv_decode_matches_fp32_attention_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
