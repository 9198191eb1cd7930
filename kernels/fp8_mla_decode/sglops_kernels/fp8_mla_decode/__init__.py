"""Zero-copy FP8 MLA decode: attention that reads the FP8 KV pool itself (`mla_decode`).

Why: a cast of any kind (whole pool, or the live rows) writes 2 bytes and reads them back for every
element the attention reads; this reads 1. Prototype (issue 16, stretch): CUDA only, page size 1,
BF16 q [B, H, 576], pool [tokens, 1, 576] FP8 e4m3 (or its uint8 view), kv_indptr/kv_indices as
FlashInfer's CSR plan takes them (int32, on the device), a per-tensor kv_scale. Matches fp32
attention over the dequantised rows to BF16 rounding (not bit-equal to FlashInfer).
"""

from __future__ import annotations

import torch

__all__ = ["mla_decode", "reference", "splits_for"]
__version__ = "0.1.0"


def mla_decode(q, pool, kv_indptr, kv_indices, sm_scale, kv_scale=1.0, n_splits=16, out=None, workspace=None):
    """softmax(q . k * sm_scale) . k[:, :512] per request over its slots, k = fp8 rows x kv_scale."""
    from sglops_kernels.fp8_mla_decode import _triton

    return _triton.mla_decode(q, pool, kv_indptr, kv_indices, sm_scale, kv_scale, n_splits, out, workspace)


def splits_for(batch: int, heads: int, max_len: int, sm_count: int) -> int:
    from sglops_kernels.fp8_mla_decode import _triton

    return _triton.splits_for(batch, heads, max_len, sm_count)


def reference(q, pool, kv_indptr, kv_indices, sm_scale, kv_scale=1.0):
    """The same attention in fp32 with torch (the self-test's yardstick)."""
    fp8 = pool.view(torch.float8_e4m3fn) if pool.dtype == torch.uint8 else pool
    outs = []
    for b in range(q.shape[0]):
        k = fp8[kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()].float().reshape(-1, q.shape[-1]) * kv_scale
        p = torch.softmax((q[b].float() @ k.T) * sm_scale, -1)
        outs.append(p @ k[:, :512])
    return torch.stack(outs)
