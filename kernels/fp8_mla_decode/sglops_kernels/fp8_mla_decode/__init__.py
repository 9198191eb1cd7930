"""Zero-copy FP8 MLA decode: attention that reads the FP8 KV pool itself (`mla_decode`).

Why: a cast of any kind (whole pool, or the live rows) writes 2 bytes and reads them back for every
element the attention reads; this reads 1. Two implementations with one contract: CUDA C++
(fp8_mla_decode.cu, `_cuda`: sm_90+, 16 heads per CTA, built by build.py for the host's SM) and Triton
(`_triton`: any head block, TRITON_INTERPRET=1 on the CPU for tests). `implementation()` picks one:
SGLOPS_FP8_MLA_IMPL=cuda|triton, else CUDA wherever it can run (on an H200 faster than the Triton kernel at
every cell measured, 16 and 128 heads: kernels/fp8_mla_decode/BENCH.md), Triton elsewhere. At 128 heads the
work is bound by the MMA rate and neither beats FlashInfer's BF16 kernel on gather-cast rows.
BF16 q [B, H, 576], pool [rows, 1, 576] FP8 e4m3 (or its uint8 view; [pages, P, 576] for pages),
kv_indptr/kv_indices as FlashInfer's CSR plan takes them (int32, on the device), a per-tensor
kv_scale, page size 1 or P. The CUDA kernel schedules by length on the device (every CTA of one static wave
reads the same number of rows whatever the mix of lengths; graph-safe). Matches fp32 attention over the
dequantised rows to BF16 rounding (not bit-equal to FlashInfer).
"""

from __future__ import annotations

import os

import torch

from ._picks import beats_gather_cast

__all__ = [
    "beats_gather_cast",
    "implementation",
    "mla_decode",
    "reference",
    "rows_of",
    "splits_for",
    "workspace",
]
__version__ = "0.6.1"


def mla_decode(
    q,
    pool,
    kv_indptr,
    kv_indices,
    sm_scale,
    kv_scale=1.0,
    n_splits=16,
    out=None,
    workspace=None,
    page_size=1,
    kv_lens=None,
    config=None,
):
    """softmax(q . k * sm_scale) . k[:, :512] per request over its rows, k = fp8 rows x kv_scale.

    page_size 1: kv_indices are pool rows, kv_indptr counts them. page_size P: kv_indices are page
    ids (row = page * P + offset), kv_indptr counts pages, kv_lens (device) the tokens. n_splits is
    the Triton kernel's split count (static under CUDA graphs: `splits_for` with the longest context; the
    CUDA kernel schedules its own splits from kv_indptr on the device and ignores it);
    workspace = `workspace(batch, heads, n_splits, device)` to reuse the partials' buffers."""
    impl = implementation() if config is None else _impl_of_config(config)
    return impl.mla_decode(
        q,
        pool,
        kv_indptr,
        kv_indices,
        sm_scale,
        kv_scale,
        n_splits,
        out,
        workspace,
        page_size,
        kv_lens,
        config,
    )


def implementation():
    """The module (`_cuda` or `_triton`) that runs here, at any head count; see the module docstring."""
    from sglops_kernels.fp8_mla_decode import _cuda, _triton

    choice = os.environ.get("SGLOPS_FP8_MLA_IMPL", "auto")
    if choice not in ("auto", "cuda", "triton"):
        raise ValueError(f"SGLOPS_FP8_MLA_IMPL must be auto, cuda or triton, not {choice!r}")
    if choice == "triton" or (choice == "auto" and not _cuda.available()):
        return _triton
    return _cuda


def _impl_of_config(config: dict):
    from sglops_kernels.fp8_mla_decode import _cuda, _triton

    return _cuda if "kernel" in config else _triton


def splits_for(batch: int, heads: int, max_len: int, sm_count: int, config: dict | None = None) -> int:
    """Splits per request for the implementation that will run (its tile and CTAs per SM)."""
    from sglops_kernels.fp8_mla_decode import _cuda, _triton

    if config is None and implementation() is _cuda:
        # the CUDA kernel splits by its own schedule (one wave of CTAs sharing the batch's rows); this count
        # sizes the workspace a caller allocates as batch x heads x splits: the schedule's slots per head, at
        # least
        name = _cuda.config_for(heads, batch=batch)["kernel"]
        return max(2, -(-_cuda.slots_for(batch, name, sm_count, heads) // max(1, batch)))
    return _triton.splits_for(batch, heads, max_len, sm_count, config)


def workspace(batch: int, heads: int, n_splits: int, device):
    """Partials and log-sum-exps for either implementation: batch x heads x n_splits (the Triton kernel's
    per-request splits), and at least the CUDA schedule's slots where it runs."""
    from sglops_kernels.fp8_mla_decode import _cuda, _triton

    if implementation() is _cuda:
        name = _cuda.config_for(heads, batch=batch)["kernel"]
        n_splits = max(
            int(n_splits), -(-_cuda.slots_for(batch, name, _cuda.sm_count(device), heads) // max(1, batch))
        )
    return _triton.workspace(batch, heads, n_splits, device)


def rows_of(kv_indptr, kv_indices, b, page_size=1, kv_lens=None):
    """Pool rows of request b (page_size > 1: pages expanded, cut to kv_lens[b] tokens)."""
    ids = kv_indices[int(kv_indptr[b]) : int(kv_indptr[b + 1])].long()
    if page_size == 1:
        return ids
    rows = (ids[:, None] * page_size + torch.arange(page_size, device=ids.device)[None, :]).reshape(-1)
    return rows[: int(kv_lens[b])]


def reference(q, pool, kv_indptr, kv_indices, sm_scale, kv_scale=1.0, page_size=1, kv_lens=None):
    """The same attention in fp32 with torch (the self-test's yardstick); an empty request gives 0."""
    fp8 = pool.view(torch.float8_e4m3fn) if pool.dtype == torch.uint8 else pool
    fp8 = fp8.reshape(-1, q.shape[-1])
    outs = []
    for b in range(q.shape[0]):
        k = fp8[rows_of(kv_indptr, kv_indices, b, page_size, kv_lens)].float() * kv_scale
        if k.shape[0] == 0:
            outs.append(torch.zeros(q.shape[1], 512, device=q.device))
            continue
        p = torch.softmax((q[b].float() @ k.T) * sm_scale, -1)
        outs.append(p @ k[:, :512])
    return torch.stack(outs)
