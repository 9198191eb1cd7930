"""The Triton kernels behind gather_cast and cast_live_rows on CUDA.

gather_cast: one program gathers ROWS rows into a compact buffer.
cast_live_rows: a persistent grid casts the live rows in place of a pool-shaped buffer, the live
count read from device memory (so a CUDA graph captured once costs what the rows live at replay
cost, not what its capacity would).

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
CONFIG = {
    "rows": 8,
    "warps": 4,
    "small": 8192,
    "small_rows": 2,
    "nan_bits": {"bfloat16": 0, "float16": 0, "float32": 0x7FF00000},
}
# cast_live_rows: rows per block, warps, and programs per SM of its persistent grid, picked on an
# H200 by benchmarks/gpu_flashinfer_mla.py --sweep (BENCH.md): 16 programs of 4 warps per SM fill the
# SM (64 warps) and beat 8 per SM by 15-17% from 32K live rows up.
LIVE_CONFIG = {"rows": 4, "warps": 4, "programs_per_sm": 16}

_OUT = {torch.bfloat16, torch.float16, torch.float32}


@triton.jit
def _cast_block(x, scale, NAN_BITS: tl.constexpr, SCALE_MODE: tl.constexpr, OUT: tl.constexpr):
    f8 = x.to(tl.float8e4nv, bitcast=True)
    if SCALE_MODE == 0:
        y = f8.to(OUT)
        # e4m3fn NaN is S.1111.111: write it as torch does, sign kept
        if NAN_BITS != 0:
            if OUT.primitive_bitwidth == 32:
                bits = ((x.to(tl.int32) >> 7) << 31) | NAN_BITS
            else:
                bits = ((x.to(tl.int16) >> 7) << 15) | NAN_BITS
            y = tl.where((x & 0x7F) == 0x7F, bits.to(OUT, bitcast=True), y)
    else:
        # as torch rounds
        y = (f8.to(tl.float32) * scale).to(OUT, fp_downcast_rounding="rtne")
    return y


@triton.jit
def _gather_cast_kernel(
    pool_ptr,
    idx_ptr,
    out_ptr,
    scale_ptr,
    scale_val,
    n_rows,
    pool_stride,
    D: tl.constexpr,
    DA: tl.constexpr,
    DB: tl.constexpr,
    ROWS: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    NAN_BITS: tl.constexpr,
):
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
    tl.store(
        dst_row[:, None] + ca[None, :], _cast_block(a, scale, NAN_BITS, SCALE_MODE, OUT), mask=rm[:, None]
    )
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
        raw,
        flat,
        out,
        sptr,
        sval,
        n,
        stride,
        D=d,
        DA=da,
        DB=db,
        ROWS=rows,
        SCALE_MODE=mode,
        NAN_BITS=nan_bits,
        num_warps=warps or CONFIG["warps"],
    )
    return out


@triton.jit
def _cast_rows(
    pool_ptr,
    out_ptr,
    r,
    ids,
    total,
    full,
    rows_total,
    pool_stride,
    scale,
    D: tl.constexpr,
    DA: tl.constexpr,
    DB: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    NAN_BITS: tl.constexpr,
):
    """Cast one block of rows in place: row r of the work is pool row ids[r] (row r when full)."""
    OUT: tl.constexpr = out_ptr.dtype.element_ty
    src = tl.where(full, r, ids)
    rm = (r < total) & (src >= 0) & (src < rows_total)
    src_row = pool_ptr + src * pool_stride
    dst_row = out_ptr + src * D
    ca = tl.arange(0, DA)
    a = tl.load(src_row[:, None] + ca[None, :], mask=rm[:, None], other=0)
    tl.store(
        dst_row[:, None] + ca[None, :], _cast_block(a, scale, NAN_BITS, SCALE_MODE, OUT), mask=rm[:, None]
    )
    if DB > 0:
        cb = DA + tl.arange(0, DB)
        if DA + DB == D:
            m = rm[:, None]
        else:
            m = rm[:, None] & (cb[None, :] < D)
        b = tl.load(src_row[:, None] + cb[None, :], mask=m, other=0)
        tl.store(dst_row[:, None] + cb[None, :], _cast_block(b, scale, NAN_BITS, SCALE_MODE, OUT), mask=m)


@triton.jit(do_not_specialize=["n_host", "ids_len", "pool_rows"])
def _cast_live_rows_kernel(
    pool_ptr,
    ids_ptr,
    live_ptr,
    out_ptr,
    scale_ptr,
    scale_val,
    n_host,
    ids_len,
    pool_rows,
    pool_stride,
    D: tl.constexpr,
    DA: tl.constexpr,
    DB: tl.constexpr,
    ROWS: tl.constexpr,
    LIVE_FROM_PTR: tl.constexpr,
    SCALE_MODE: tl.constexpr,
    NAN_BITS: tl.constexpr,
):
    """out[ids[i]] = cast(pool[ids[i]]) for i < n, n = live[0] (device) or n_host; when n >= the
    pool's rows, every pool row instead (the same layout, so either way the attention kernel
    reads out through the stock slot ids). Ids outside [0, pool_rows) are skipped.

    A persistent grid strides over blocks of ROWS live rows. Each program's first block of ids is
    loaded before the live count is known (both loads in flight at once: at small n, where all
    the work is that first block, one dependent DRAM round trip fewer)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    ids_total = tl.cast(ids_len, tl.int64)
    r0 = tl.cast(pid, tl.int64) * ROWS + tl.arange(0, ROWS)
    ids0 = tl.load(ids_ptr + r0, mask=r0 < ids_total, other=-1).to(tl.int64)
    if LIVE_FROM_PTR:
        n = tl.load(live_ptr).to(tl.int64)
    else:
        n = tl.cast(n_host, tl.int64)
    n = tl.minimum(tl.maximum(n, 0), ids_total)
    rows_total = tl.cast(pool_rows, tl.int64)
    full = n >= rows_total
    total = tl.where(full, rows_total, n)
    if SCALE_MODE == 2:
        scale = tl.load(scale_ptr)
    else:
        scale = scale_val
    _cast_rows(
        pool_ptr,
        out_ptr,
        r0,
        ids0,
        total,
        full,
        rows_total,
        pool_stride,
        scale,
        D,
        DA,
        DB,
        SCALE_MODE,
        NAN_BITS,
    )
    n_blocks = tl.cdiv(total, ROWS)
    for blk in range(pid + nprog, n_blocks, nprog):
        r = tl.cast(blk, tl.int64) * ROWS + tl.arange(0, ROWS)
        ids = tl.load(ids_ptr + r, mask=(r < total) & (n < rows_total), other=-1).to(tl.int64)
        _cast_rows(
            pool_ptr,
            out_ptr,
            r,
            ids,
            total,
            full,
            rows_total,
            pool_stride,
            scale,
            D,
            DA,
            DB,
            SCALE_MODE,
            NAN_BITS,
        )


_SM_COUNT: dict = {}


def _sm_count(device) -> int:
    index = (
        device.index
        if device.index is not None
        else (torch.cuda.current_device() if device.type == "cuda" else 0)
    )
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def cast_live_rows(
    pool,
    ids,
    live,
    cap,
    out_dtype=torch.bfloat16,
    scale=None,
    out=None,
    *,
    rows=None,
    warps=None,
    programs_per_sm=None,
    nan_bits=None,
):
    if out_dtype not in _OUT:
        raise TypeError(f"cast_live_rows: out_dtype must be one of bfloat16/float16/float32, not {out_dtype}")
    row_shape = tuple(pool.shape[1:])
    d = 1
    for s in row_shape:
        d *= s
    raw = pool.view(torch.uint8)
    p = pool.shape[0]
    if p and not raw[:1].is_contiguous():
        raise ValueError("cast_live_rows: each pool row must be contiguous")
    stride = raw.stride(0) if pool.dim() > 1 else 1
    if out is None:
        out = torch.empty((p, *row_shape), dtype=out_dtype, device=pool.device)
    elif out.shape != pool.shape or out.dtype != out_dtype or not out.is_contiguous():
        raise ValueError(
            f"cast_live_rows: out must be a contiguous {out_dtype} tensor of shape {tuple(pool.shape)}"
        )
    flat = ids.reshape(-1)
    if not flat.is_contiguous():
        raise ValueError(
            "cast_live_rows: ids must be contiguous (it is read in place, under CUDA graphs too)"
        )
    most = min(cap, flat.numel(), p) if isinstance(live, torch.Tensor) else min(int(live), flat.numel(), p)
    if p == 0 or most <= 0:
        return out
    if isinstance(live, torch.Tensor):
        from_ptr, live_arg, n_host = True, live, 0
    else:
        from_ptr, live_arg, n_host = False, flat, int(live)
    if scale is None:
        mode, sptr, sval = 0, flat, 1.0
    elif isinstance(scale, torch.Tensor):
        mode, sptr, sval = 2, scale.to(device=pool.device, dtype=torch.float32).reshape(-1), 1.0
    else:
        mode, sptr, sval = 1, flat, float(scale)
    da, db = _split(d)
    rows = rows or LIVE_CONFIG["rows"]
    per_sm = programs_per_sm or LIVE_CONFIG["programs_per_sm"]
    grid = max(1, min(triton.cdiv(most, rows), per_sm * _sm_count(pool.device)))
    if nan_bits is None:
        nan_bits = CONFIG["nan_bits"][str(out_dtype).removeprefix("torch.")]
    _cast_live_rows_kernel[(grid,)](
        raw,
        flat,
        live_arg,
        out,
        sptr,
        sval,
        n_host,
        flat.numel(),
        p,
        stride,
        D=d,
        DA=da,
        DB=db,
        ROWS=rows,
        LIVE_FROM_PTR=from_ptr,
        SCALE_MODE=mode,
        NAN_BITS=nan_bits,
        num_warps=warps or LIVE_CONFIG["warps"],
    )
    return out
