"""Split-KV MLA decode that reads the FP8 KV pool directly (no BF16 copy of any row).

Stage 1, grid (head blocks, splits, requests): each program walks its share of one request's KV
rows in tiles of BLOCK_N, loads the FP8 tile [BLOCK_N, 512 + 64] once, dequantises it in registers
(e4m3 -> bf16; the per-tensor scale is folded into the softmax scale and the output), and runs an
online softmax for BLOCK_H heads at once: every head of the block shares that one read of the tile
(16 heads: one block; 128 heads: 2 x 64 or 1 x 128, the head dimension tiled inside the program, on
the MMA's M side). Two MMA orientations (constexpr TRANS):
  TRANS=0  S = Q K^T  [BLOCK_H, BLOCK_N],  O += P V      (heads on M)
  TRANS=1  S^T = K Q^T [BLOCK_N, BLOCK_H], O^T += V^T P^T (rows on M: M >= 64 even for 16 heads)
Each program reads its range [lo, hi) from kv_indptr (and kv_lens for pages > 1) on the device, so
the grid depends only on (batch, head blocks, max splits): a CUDA graph captured once replays for
any lengths. Stage 2 merges the splits' partial outputs by their log-sum-exps; with one split the
first stage writes the BF16 output itself.

Pages: page_size 1 (FlashInfer MLA as SGLang plans it: kv_indices are token slots, kv_indptr counts
tokens) or page_size P (kv_indices are page ids, kv_indptr counts pages, kv_lens the tokens; token j
of a request is pool row kv_indices[indptr[b] + j // P] * P + j % P).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# the MMA operand type: BF16 on the GPU; float32 under TRITON_INTERPRET, whose numpy dot has no bf16
_DOT = tl.float32 if _INTERPRET else tl.bfloat16


def _interpreter_index_shim() -> None:
    """Triton <= 3.6's interpreter turns a loop bound into an int with `int(ndarray)`; its scalars
    are 1-element arrays, which NumPy >= 2.4 refuses to convert. Take the element instead."""
    import numpy as np
    from triton.runtime import interpreter

    orig = interpreter._patch_lang_tensor
    if getattr(orig, "_sglops", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    patched._sglops = True
    interpreter._patch_lang_tensor = patched


if _INTERPRET:
    _interpreter_index_shim()
MAX_SPLITS = 256

# per (head count class) launch configuration; the H200 sweep (benchmarks/gpu_fp8_mla_decode.py) set these
CONFIGS = {
    "sm90": {
        16: {
            "block_h": 16,
            "block_n": 32,
            "warps": 8,
            "stages": 3,
            "trans": 0,
            "programs_per_sm": 2,
            "min_rows": 256,
        },
        128: {
            "block_h": 64,
            "block_n": 32,
            "warps": 16,
            "stages": 2,
            "trans": 0,
            "programs_per_sm": 1,
            "min_rows": 256,
        },
    },
    # sm_120 (RTX PRO 6000 class): no wgmma, 99 KB shared memory per block, mma.sync only; the AOT
    # resource report (kernels/fp8_mla_decode/aot.py --cc 120) checks these fit
    "sm120": {
        16: {
            "block_h": 16,
            "block_n": 32,
            "warps": 8,
            "stages": 2,
            "trans": 0,
            "programs_per_sm": 2,
            "min_rows": 256,
        },
        128: {
            "block_h": 32,
            "block_n": 32,
            "warps": 8,
            "stages": 2,
            "trans": 0,
            "programs_per_sm": 1,
            "min_rows": 256,
        },
    },
}


def _family() -> str:
    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 12:
        return "sm120"
    return "sm90"


def config_for(heads: int, family: str | None = None) -> dict:
    table = CONFIGS[family or _family()]
    return dict(table[16] if heads <= 16 else table[128])


@triton.jit(do_not_specialize=["n_splits", "heads"])
def _split_kernel(
    q_ptr,
    pool_ptr,
    indptr_ptr,
    ids_ptr,
    lens_ptr,
    part_ptr,
    lse_ptr,
    out_ptr,
    sm_scale,
    kv_scale,
    heads,
    pool_stride,
    q_sb,
    q_sh,
    o_sb,
    o_sh,
    n_splits,
    PAGE: tl.constexpr,
    CKV: tl.constexpr,
    KPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT: tl.constexpr,
    TRANS: tl.constexpr,
    DIRECT: tl.constexpr,
):
    hb = tl.program_id(0)
    s = tl.program_id(1)
    b = tl.program_id(2)
    start = tl.load(indptr_ptr + b).to(tl.int64)
    if PAGE == 1:
        length = tl.load(indptr_ptr + b + 1).to(tl.int64) - start
    else:
        length = tl.load(lens_ptr + b).to(tl.int64)
    per = tl.cdiv(tl.cdiv(length, n_splits), BLOCK_N) * BLOCK_N
    lo = s * per
    hi = tl.minimum(lo + per, length)
    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = h < heads
    cv = tl.arange(0, CKV)
    cp = CKV + tl.arange(0, KPE)
    qrow = b.to(tl.int64) * q_sb + h.to(tl.int64) * q_sh
    q_nope = tl.load(q_ptr + qrow[:, None] + cv[None, :], mask=hm[:, None], other=0.0).to(DOT)
    q_pe = tl.load(q_ptr + qrow[:, None] + cp[None, :], mask=hm[:, None], other=0.0).to(DOT)
    if TRANS:
        qt_nope = tl.trans(q_nope)
        qt_pe = tl.trans(q_pe)
        acc = tl.zeros([CKV, BLOCK_H], tl.float32)
    else:
        acc = tl.zeros([BLOCK_H, CKV], tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    # log2(e): exp2 below
    qk_scale = sm_scale * kv_scale * 1.4426950408889634
    # software-pipelined num_stages deep (launch option)
    for n0 in range(lo, hi, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        nm = n < hi
        if PAGE == 1:
            slot = tl.load(ids_ptr + start + n, mask=nm, other=0).to(tl.int64)
        else:
            page = tl.load(ids_ptr + start + n // PAGE, mask=nm, other=0).to(tl.int64)
            slot = page * PAGE + n % PAGE
        base = pool_ptr + slot * pool_stride
        k_nope = tl.load(base[:, None] + cv[None, :], mask=nm[:, None], other=0)
        k_pe = tl.load(base[:, None] + cp[None, :], mask=nm[:, None], other=0)
        k_nope = k_nope.to(tl.float8e4nv, bitcast=True).to(DOT)
        k_pe = k_pe.to(tl.float8e4nv, bitcast=True).to(DOT)
        # V is the first 512 columns of the same rows: no second read
        v = k_nope
        if TRANS:
            st = tl.dot(k_nope, qt_nope)
            st = tl.dot(k_pe, qt_pe, acc=st)
            st = tl.where(nm[:, None], st * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(st, 0))
            alpha = tl.exp2(m_i - m_new)
            pt = tl.exp2(st - m_new[None, :])
            l_i = l_i * alpha + tl.sum(pt, 0)
            acc = acc * alpha[None, :]
            acc = tl.dot(tl.trans(v), pt.to(DOT), acc=acc)
        else:
            qk = tl.dot(q_nope, tl.trans(k_nope))
            qk = tl.dot(q_pe, tl.trans(k_pe), acc=qk)
            qk = tl.where(nm[None, :], qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(DOT), v, acc=acc)
        m_i = m_new
    empty = l_i == 0.0
    inv = kv_scale / tl.where(empty, 1.0, l_i)
    lse = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    # one split: this is the answer (an empty request gives zeros)
    if DIRECT:
        orow = b.to(tl.int64) * o_sb + h.to(tl.int64) * o_sh
        if TRANS:
            tl.store(
                out_ptr + orow[None, :] + cv[:, None],
                (acc * inv[None, :]).to(out_ptr.dtype.element_ty),
                mask=hm[None, :],
            )
        else:
            tl.store(
                out_ptr + orow[:, None] + cv[None, :],
                (acc * inv[:, None]).to(out_ptr.dtype.element_ty),
                mask=hm[:, None],
            )
    else:
        prow = (b * heads + h).to(tl.int64) * n_splits + s
        if TRANS:
            tl.store(part_ptr + prow[None, :] * CKV + cv[:, None], acc * inv[None, :], mask=hm[None, :])
        else:
            tl.store(part_ptr + prow[:, None] * CKV + cv[None, :], acc * inv[:, None], mask=hm[:, None])
        tl.store(lse_ptr + prow, lse, mask=hm)


@triton.jit(do_not_specialize=["n_splits", "heads"])
def _merge_kernel(
    part_ptr, lse_ptr, out_ptr, heads, o_sb, o_sh, n_splits, CKV: tl.constexpr, SPLITS: tl.constexpr
):
    """out = sum_s w_s part_s, w = softmax over the splits' log2-sum-exps; empty splits (-inf) are
    skipped without a load; a request with no rows at all gives zeros."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // heads
    hh = bh % heads
    sp = tl.arange(0, SPLITS)
    lse = tl.load(lse_ptr + bh * n_splits + sp, mask=sp < n_splits, other=float("-inf"))
    mx = tl.max(lse, 0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    total = tl.maximum(tl.sum(tl.exp2(lse - mx), 0), 1e-30)
    cv = tl.arange(0, CKV)
    acc = tl.zeros([CKV], tl.float32)
    for i in range(0, n_splits):
        li = tl.load(lse_ptr + bh * n_splits + i)
        live = li > float("-inf")
        w = tl.exp2(li - mx) / total
        # an empty split's row is never loaded
        width = tl.where(live, CKV, 0)
        acc += w * tl.load(part_ptr + (bh * n_splits + i) * CKV + cv, mask=cv < width, other=0.0)
    tl.store(out_ptr + b * o_sb + hh * o_sh + cv, acc.to(out_ptr.dtype.element_ty))


def splits_for(batch: int, heads: int, max_len: int, sm_count: int, config: dict | None = None) -> int:
    """Splits per request: about programs_per_sm programs per SM over the whole grid, no split
    shorter than min_rows, at most MAX_SPLITS. Under a CUDA graph pass the longest context the graph
    may see (the grid is static; each program reads its own range on the device)."""
    cfg = config or config_for(heads)
    hblocks = triton.cdiv(heads, cfg["block_h"])
    want = max(1, (cfg["programs_per_sm"] * sm_count) // max(1, batch * hblocks))
    longest = max(1, triton.cdiv(max_len, max(cfg["min_rows"], cfg["block_n"])))
    return int(min(want, longest, MAX_SPLITS))


def workspace(batch: int, heads: int, n_splits: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial outputs and log-sum-exps for n_splits > 1 (fp32), to reuse across calls/graphs."""
    return (
        torch.empty(batch * heads * n_splits * 512, dtype=torch.float32, device=device),
        torch.empty(batch * heads * n_splits, dtype=torch.float32, device=device),
    )


def split_buffers(batch: int, heads: int, n_splits: int, out, buffers=None):
    """(n_splits clamped to 1..MAX_SPLITS, direct, partials, log-sum-exps): one split writes `out` directly
    (the buffers are then unused); several need `buffers` (a `workspace(...)`, checked for size) or fresh
    ones. Shared by every implementation, whose partials all use this layout and this module's merge
    kernel."""
    n_splits = max(1, min(int(n_splits), MAX_SPLITS))
    if n_splits == 1:
        return n_splits, True, out, out
    if buffers is None:
        part, lse = workspace(batch, heads, n_splits, out.device)
    else:
        part, lse = buffers
        if part.numel() < batch * heads * n_splits * 512 or lse.numel() < batch * heads * n_splits:
            raise ValueError("workspace smaller than batch x heads x n_splits")
    return n_splits, False, part, lse


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
    batch, heads, d = q.shape
    ckv, kpe = 512, d - 512
    if q.stride(-1) != 1:
        q = q.contiguous()
    raw = pool.view(torch.uint8)
    # [pages, P, 576] -> rows
    if raw.dim() == 3 and raw.shape[1] != 1:
        raw = raw.reshape(-1, 1, d)
    if out is None:
        out = torch.empty(batch, heads, ckv, dtype=q.dtype, device=q.device)
    if page_size > 1 and kv_lens is None:
        raise ValueError("page_size > 1 needs kv_lens (tokens per request, on the device)")
    cfg = config or config_for(heads)
    n_splits, direct, part, lse = split_buffers(batch, heads, n_splits, out, workspace)
    bh = cfg["block_h"]
    lens = kv_lens if kv_lens is not None else kv_indptr
    _split_kernel[(triton.cdiv(heads, bh), n_splits, batch)](
        q,
        raw,
        kv_indptr,
        kv_indices,
        lens,
        part,
        lse,
        out,
        float(sm_scale),
        float(kv_scale),
        heads,
        raw.stride(0),
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        n_splits,
        PAGE=page_size,
        CKV=ckv,
        KPE=kpe,
        BLOCK_H=bh,
        BLOCK_N=cfg["block_n"],
        DOT=_DOT,
        TRANS=cfg["trans"],
        DIRECT=direct,
        num_warps=cfg["warps"],
        num_stages=cfg["stages"],
    )
    if not direct:
        _merge_kernel[(batch * heads,)](
            part,
            lse,
            out,
            heads,
            out.stride(0),
            out.stride(1),
            n_splits,
            CKV=ckv,
            SPLITS=MAX_SPLITS,
            num_warps=4,
        )
    return out
