"""Fused gather + FP8 (e4m3) dequantisation of MLA KV rows: `gather_cast(pool, idx)`.

Why: FlashInfer's MLA path casts the whole FP8 KV pool to BF16 every layer; gather-then-cast
in torch reads and writes the active rows twice. This reads each active FP8 row once and
writes BF16 once (3 bytes per element moved). On CUDA tensors it runs a Triton kernel; on the
CPU, without Triton, or with SGLOPS_GATHER_CAST=torch it runs the same function in torch.

Contract (the gather-cast patch imports this):
    gather_cast(pool, idx, out_dtype=torch.bfloat16, scale=None)
      == (pool[idx].to(torch.float32) * scale).to(out_dtype)   if scale is given
      == pool[idx].to(out_dtype)                               otherwise
pool: [tokens, *row] float8_e4m3fn, or its uint8 view; idx: int32/int64 on pool's device,
values in [0, tokens) (no negative indices, no bounds check in the kernel).
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["gather_cast", "backend", "torch_gather_cast"]
__version__ = "1.0.0"

_FP8 = torch.float8_e4m3fn
_triton_impl = None  # the module, once imported; False when it cannot be


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
        except Exception:  # no triton, or a triton without this GPU
            _triton_impl = False
    return _triton_impl


@functools.cache
def _capability(index: int | None) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def backend(pool: torch.Tensor) -> str:
    """Which path gather_cast takes for this pool: 'triton' or 'torch'."""
    if os.environ.get("SGLOPS_GATHER_CAST", "").lower() == "torch" or not pool.is_cuda:
        return "torch"
    if _capability(pool.device.index) < (8, 9):  # no e4m3 conversion before Ada
        return "torch"
    return "triton" if _load_triton() else "torch"


def gather_cast(pool: torch.Tensor, idx: torch.Tensor, out_dtype: torch.dtype = torch.bfloat16,
                scale: float | torch.Tensor | None = None) -> torch.Tensor:
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
