"""Fused gather + FP8 (e4m3) dequantisation of MLA KV rows: `gather_cast(pool, idx)`.

Why: FlashInfer's MLA path casts the whole FP8 KV pool to BF16 every layer; gather-then-cast
in torch reads and writes the active rows twice. This reads each active FP8 row once and
writes BF16 once (3 bytes per element moved). On CUDA tensors it runs a Triton kernel; on the
CPU, without Triton, or with SGLOPS_GATHER_CAST=torch it runs the same function in torch.

Contract of the compact gather:
    gather_cast(pool, idx, out_dtype=torch.bfloat16, scale=None)
      == (pool[idx].to(torch.float32) * scale).to(out_dtype)   if scale is given
      == pool[idx].to(out_dtype)                               otherwise
pool: [tokens, *row] float8_e4m3fn, or its uint8 view; idx: int32/int64 on pool's device,
values in [0, tokens) (no negative indices, no bounds check in the kernel).

Contract of the in-place cast of live rows (the gather-cast patch imports this):
    out = cast_live_rows(pool, ids, live, cap=None, out_dtype=torch.bfloat16, scale=None, out=None)
    out has pool's shape; for every i < n, out[ids[i]] == the cast of pool[ids[i]] (as above),
    where n = live (an int), or live[0] read ON THE DEVICE when live is a one-element int32/int64
    CUDA tensor (e.g. kv_indptr[bs:bs+1]): no host sync, so a CUDA graph captured once serves
    every replay, and the kernel costs min(n, pool rows) rows at that replay. When n >= pool rows
    it casts every pool row instead (same layout). The attention kernel keeps reading `out`
    through the stock slot ids, so the result is the whole-pool cast at every row it reads.
    cap: the most live rows a captured graph can see (sizes the persistent grid and the torch
    fallback's static row count); defaults to ids.numel().
    Rows not among ids[:n]: the Triton path leaves them untouched; the torch path may cast them.
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["gather_cast", "cast_live_rows", "backend", "torch_gather_cast", "torch_cast_live_rows"]
__version__ = "1.1.0"

_FP8 = torch.float8_e4m3fn
# the module, once imported; False when it cannot be
_triton_impl = None


def _as_fp8(pool: torch.Tensor) -> torch.Tensor:
    if pool.dtype == _FP8:
        return pool
    if pool.dtype == torch.uint8:
        return pool.view(_FP8)
    raise TypeError(f"gather_cast: pool must be float8_e4m3fn or uint8, not {pool.dtype}")


def torch_gather_cast(pool, idx, out_dtype=torch.bfloat16, scale=None):
    """The reference (and fallback): torch indexing, then the cast."""
    rows = _as_fp8(pool)[idx]
    if scale is None:
        return rows.to(out_dtype)
    return (rows.to(torch.float32) * scale).to(out_dtype)


def _load_triton():
    global _triton_impl
    if _triton_impl is None:
        try:
            from sglops_kernels.gather_cast import _triton as impl

            _triton_impl = impl
        # no triton, or a triton without this GPU
        except Exception:
            _triton_impl = False
    return _triton_impl


@functools.cache
def _capability(index: int | None) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def backend(pool: torch.Tensor) -> str:
    """Which path gather_cast takes for this pool: 'triton' or 'torch'."""
    if os.environ.get("SGLOPS_GATHER_CAST", "").lower() == "torch" or not pool.is_cuda:
        return "torch"
    # no e4m3 conversion before Ada
    if _capability(pool.device.index) < (8, 9):
        return "torch"
    return "triton" if _load_triton() else "torch"


def gather_cast(
    pool: torch.Tensor,
    idx: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    scale: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """pool[idx] dequantised to out_dtype (times scale), in one pass on CUDA.

    A pool that is not FP8 (a BF16 KV cache) is gathered by torch: there is nothing to dequantise.
    """
    if idx.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"gather_cast: idx must be int32 or int64, not {idx.dtype}")
    if idx.device != pool.device:
        raise ValueError(f"gather_cast: idx is on {idx.device}, pool on {pool.device}")
    if pool.dtype not in (_FP8, torch.uint8):
        rows = pool[idx]
        return rows.to(out_dtype) if scale is None else (rows.to(torch.float32) * scale).to(out_dtype)
    if backend(pool) == "torch":
        return torch_gather_cast(pool, idx, out_dtype, scale)
    return _triton_impl.gather_cast(pool, idx, out_dtype, scale)


def torch_cast_live_rows(pool, ids, live, cap=None, out_dtype=torch.bfloat16, scale=None, out=None):
    """The fallback of cast_live_rows: torch indexing, no host sync under CUDA graphs.

    With an int live it casts exactly ids[:live]. With a device live count it cannot read it
    without a sync, so it casts the rows of ids[:cap], a static superset (a graph's stale tail
    holds older slot ids: cast, never read); where that is the pool or more, the whole pool.
    """
    fp8 = _as_fp8(pool)
    rows_total = fp8.shape[0]
    count = int(live) if not isinstance(live, torch.Tensor) else (ids.numel() if cap is None else cap)
    count = min(count, ids.numel())
    if out is None:
        out = torch.empty(fp8.shape, dtype=out_dtype, device=fp8.device)
    if count >= rows_total:
        out.copy_(torch_gather_cast(fp8, slice(None), out_dtype, scale))
        return out
    if count <= 0:
        return out
    rows = ids.reshape(-1)[:count].long()
    out[rows] = torch_gather_cast(fp8.view(torch.uint8), rows, out_dtype, scale)
    return out


def cast_live_rows(
    pool: torch.Tensor,
    ids: torch.Tensor,
    live: int | torch.Tensor,
    cap: int | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    scale: float | torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """A pool-shaped buffer whose rows ids[:n] hold pool's rows dequantised (module docstring)."""
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cast_live_rows: ids must be int32 or int64, not {ids.dtype}")
    if ids.device != pool.device:
        raise ValueError(f"cast_live_rows: ids is on {ids.device}, pool on {pool.device}")
    if isinstance(live, torch.Tensor):
        if live.numel() != 1 or live.dtype not in (torch.int32, torch.int64) or live.device != pool.device:
            raise ValueError(
                "cast_live_rows: live must be an int or a one-element int32/int64 tensor on pool's device"
            )
    cap = ids.numel() if cap is None else cap
    if pool.dtype not in (_FP8, torch.uint8) or backend(pool) == "torch":
        if pool.dtype not in (_FP8, torch.uint8):
            return pool.to(out_dtype) if scale is None else (pool.to(torch.float32) * scale).to(out_dtype)
        return torch_cast_live_rows(pool, ids, live, cap, out_dtype, scale, out)
    return _triton_impl.cast_live_rows(pool, ids, live, cap, out_dtype, scale, out)
