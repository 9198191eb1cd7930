"""The Triton kernel behind gather_cast on CUDA: one program gathers ROWS rows.

A row of D bytes is read as two power-of-two column blocks (576 = 512 + 64), so every load
is a full 16-byte vector and no lane is masked off along the row; FP8 -> BF16 uses the
hardware conversion, then NaN is written with the bits torch's CUDA cast writes, for bit-equality.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Rows per program and warps, picked on an H200 by bench.py --sweep (BENCH.md): 2 rows a program
# up to SMALL rows (latency-bound, more programs in flight), 8 beyond. nan_bits: per output dtype,
# the bits torch 2.11's CUDA cast writes for an e4m3 NaN, sign added (0: keep the hardware's
# canonical NaN, which is what torch writes for 16-bit outputs); selftest.py checks them against
# the host's torch on every build.
CONFIG = {"rows": 8, "warps": 4, "small": 8192, "small_rows": 2,
          "nan_bits": {"bfloat16": 0, "float16": 0, "float32": 0x7FF00000}}

_OUT = {torch.bfloat16, torch.float16, torch.float32}


@triton.jit
def _cast_block(x, scale, NAN_BITS: tl.constexpr, SCALE_MODE: tl.constexpr, OUT: tl.constexpr):
    f8 = x.to(tl.float8e4nv, bitcast=True)
    if SCALE_MODE == 0:
        y = f8.to(OUT)
        if NAN_BITS != 0:  # e4m3fn NaN is S.1111.111: write it as torch does, sign kept
            if OUT.primitive_bitwidth == 32:
                bits = ((x.to(tl.int32) >> 7) << 31) | NAN_BITS
            else:
                bits = ((x.to(tl.int16) >> 7) << 15) | NAN_BITS
            y = tl.where((x & 0x7F) == 0x7F, bits.to(OUT, bitcast=True), y)
    else:
        y = (f8.to(tl.float32) * scale).to(OUT, fp_downcast_rounding="rtne")  # as torch rounds
    return y


@triton.jit
def _gather_cast_kernel(pool_ptr, idx_ptr, out_ptr, scale_ptr, scale_val, n_rows, pool_stride,
                        D: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, ROWS: tl.constexpr,
                        SCALE_MODE: tl.constexpr, NAN_BITS: tl.constexpr):
    pid = tl.program_id(0)
    r = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rm = r < n_rows
    src = tl.load(idx_ptr + r, mask=rm, other=0).to(tl.int64)
    src_row = pool_ptr + src * pool_stride
    dst_row = out_ptr + r * D
    OUT: tl.constexpr = out_ptr.dtype.element_ty
    if SCALE_MODE == 2:
        scale = tl.load(scale_ptr)
    else:
        scale = scale_val
    ca = tl.arange(0, DA)
    a = tl.load(src_row[:, None] + ca[None, :], mask=rm[:, None], other=0)
    tl.store(dst_row[:, None] + ca[None, :], _cast_block(a, scale, NAN_BITS, SCALE_MODE, OUT), mask=rm[:, None])
    if DB > 0:
        cb = DA + tl.arange(0, DB)
        if DA + DB == D:
            m = rm[:, None]
        else:
            m = rm[:, None] & (cb[None, :] < D)
        b = tl.load(src_row[:, None] + cb[None, :], mask=m, other=0)
        tl.store(dst_row[:, None] + cb[None, :], _cast_block(b, scale, NAN_BITS, SCALE_MODE, OUT), mask=m)


def _split(d: int) -> tuple[int, int]:
    """Largest power of two <= d, then the rest rounded up to a power of two (or 0)."""
    da = 1 << (d.bit_length() - 1)
    rest = d - da
    return da, (1 << (rest - 1).bit_length()) if rest else 0


def gather_cast(pool, idx, out_dtype=torch.bfloat16, scale=None, *, rows=None, warps=None, nan_bits=None):
    if out_dtype not in _OUT:
        raise TypeError(f"gather_cast: out_dtype must be one of bfloat16/float16/float32, not {out_dtype}")
    row_shape = tuple(pool.shape[1:])
    d = 1
    for s in row_shape:
        d *= s
    raw = pool.view(torch.uint8)
    if pool.shape[0] and not raw[:1].is_contiguous():
        raise ValueError("gather_cast: each pool row must be contiguous")
    stride = raw.stride(0) if pool.dim() > 1 else 1
    flat = idx.reshape(-1)
    n = flat.numel()
    out = torch.empty((*idx.shape, *row_shape), dtype=out_dtype, device=pool.device)
    if n == 0:
        return out
    if not flat.is_contiguous():
        flat = flat.contiguous()
    if scale is None:
        mode, sptr, sval = 0, flat, 1.0
    elif isinstance(scale, torch.Tensor):
        mode, sptr, sval = 2, scale.to(device=pool.device, dtype=torch.float32).reshape(-1), 1.0
    else:
        mode, sptr, sval = 1, flat, float(scale)
    da, db = _split(d)
    rows = rows or (CONFIG["small_rows"] if n <= CONFIG["small"] else CONFIG["rows"])
    if nan_bits is None:
        nan_bits = CONFIG["nan_bits"][str(out_dtype).removeprefix("torch.")]
    _gather_cast_kernel[(triton.cdiv(n, rows),)](
        raw, flat, out, sptr, sval, n, stride, D=d, DA=da, DB=db, ROWS=rows,
        SCALE_MODE=mode, NAN_BITS=nan_bits, num_warps=warps or CONFIG["warps"])
    return out
