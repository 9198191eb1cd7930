"""Split-KV MLA decode that reads the FP8 KV pool directly (no BF16 copy of any row).

Stage 1, grid (requests, head blocks, splits): each program walks its share of one request's slot
ids in tiles of BLOCK_N, loads the FP8 rows [BLOCK_N, 512 + 64], dequantises them in registers
(x scale), and keeps an online softmax of q . k over them with acc += p . k[:, :512]. It writes its
partial output and log-sum-exp. Stage 2 merges the splits. page_size 1, kv_indptr / kv_indices as
FlashInfer's CSR plan takes them; the live lengths are read on the device, so a CUDA graph replays it.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# the MMA operand type: BF16 on the GPU; float32 under TRITON_INTERPRET, whose numpy dot has no bf16
_DOT = tl.float32 if os.environ.get("TRITON_INTERPRET") == "1" else tl.bfloat16
CONFIG = {"block_n": 32, "block_h": 16, "warps": 4, "stages": 2, "programs_per_sm": 2}


@triton.jit
def _split_kernel(q_ptr, pool_ptr, indptr_ptr, ids_ptr, part_ptr, lse_ptr, sm_scale, kv_scale, heads, pool_stride,
                  n_splits, CKV: tl.constexpr, KPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                  DOT: tl.constexpr):
    b = tl.program_id(0)
    hb = tl.program_id(1)
    s = tl.program_id(2)
    start = tl.load(indptr_ptr + b).to(tl.int64)
    length = tl.load(indptr_ptr + b + 1).to(tl.int64) - start
    per = tl.cdiv(tl.cdiv(length, n_splits), BLOCK_N) * BLOCK_N
    lo = s * per
    hi = tl.minimum(lo + per, length)
    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = h < heads
    cv = tl.arange(0, CKV)
    cp = CKV + tl.arange(0, KPE)
    row = (b * heads + h).to(tl.int64) * (CKV + KPE)
    q_nope = tl.load(q_ptr + row[:, None] + cv[None, :], mask=hm[:, None], other=0.0).to(DOT)
    q_pe = tl.load(q_ptr + row[:, None] + cp[None, :], mask=hm[:, None], other=0.0).to(DOT)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, CKV], tl.float32)
    qk_scale = sm_scale * kv_scale * 1.4426950408889634  # log2(e): exp2 below
    for n0 in range(lo, hi, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        nm = n < hi
        slot = tl.load(ids_ptr + start + n, mask=nm, other=0).to(tl.int64)
        base = pool_ptr + slot * pool_stride
        k_nope = tl.load(base[:, None] + cv[None, :], mask=nm[:, None], other=0)
        k_pe = tl.load(base[:, None] + cp[None, :], mask=nm[:, None], other=0)
        k_nope = k_nope.to(tl.float8e4nv, bitcast=True).to(DOT)
        k_pe = k_pe.to(tl.float8e4nv, bitcast=True).to(DOT)
        qk = tl.dot(q_nope, tl.trans(k_nope)) + tl.dot(q_pe, tl.trans(k_pe))
        qk = tl.where(nm[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT), k_nope)
        m_i = m_new
    out_row = ((b * heads + h).to(tl.int64) * n_splits + s)
    empty = l_i == 0.0
    res = acc * kv_scale / tl.where(empty, 1.0, l_i)[:, None]
    tl.store(part_ptr + out_row[:, None] * CKV + cv[None, :], res, mask=hm[:, None])
    tl.store(lse_ptr + out_row, tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i))), mask=hm)


@triton.jit
def _merge_kernel(part_ptr, lse_ptr, out_ptr, n_splits, CKV: tl.constexpr, SPLITS: tl.constexpr):
    """out = sum_s w_s part_s with w = softmax over the splits' log2-sum-exps (empty splits: -inf)."""
    bh = tl.program_id(0).to(tl.int64)
    sp = tl.arange(0, SPLITS)
    lse = tl.load(lse_ptr + bh * n_splits + sp, mask=sp < n_splits, other=float("-inf"))
    mx = tl.max(lse, 0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    total = tl.maximum(tl.sum(tl.exp2(lse - mx), 0), 1e-30)
    cv = tl.arange(0, CKV)
    acc = tl.zeros([CKV], tl.float32)
    for i in range(0, n_splits):
        w = tl.exp2(tl.load(lse_ptr + bh * n_splits + i) - mx) / total
        acc += w * tl.load(part_ptr + (bh * n_splits + i) * CKV + cv)
    tl.store(out_ptr + bh * CKV + cv, acc.to(out_ptr.dtype.element_ty))


def splits_for(batch: int, heads: int, max_len: int, sm_count: int) -> int:
    """Enough programs to fill the GPU about twice, no split shorter than 4 tiles."""
    hblocks = triton.cdiv(heads, CONFIG["block_h"])
    want = max(1, (CONFIG["programs_per_sm"] * sm_count) // (batch * hblocks))
    longest = max(1, triton.cdiv(max_len, 4 * CONFIG["block_n"]))
    return int(min(want, longest, 256))


def mla_decode(q, pool, kv_indptr, kv_indices, sm_scale, kv_scale=1.0, n_splits=16, out=None, workspace=None):
    batch, heads, d = q.shape
    ckv, kpe = 512, d - 512
    raw = pool.view(torch.uint8)
    if out is None:
        out = torch.empty(batch, heads, ckv, dtype=q.dtype, device=q.device)
    if workspace is None:
        part = torch.empty(batch * heads * n_splits * ckv, dtype=torch.float32, device=q.device)
        lse = torch.empty(batch * heads * n_splits, dtype=torch.float32, device=q.device)
    else:
        part, lse = workspace
    bh = CONFIG["block_h"]
    _split_kernel[(batch, triton.cdiv(heads, bh), n_splits)](
        q, raw, kv_indptr, kv_indices, part, lse, float(sm_scale), float(kv_scale), heads, raw.stride(0), n_splits,
        CKV=ckv, KPE=kpe, BLOCK_H=bh, BLOCK_N=CONFIG["block_n"], DOT=_DOT, num_warps=CONFIG["warps"],
        num_stages=CONFIG["stages"])
    _merge_kernel[(batch * heads,)](part, lse, out, n_splits, CKV=ckv, SPLITS=triton.next_power_of_2(n_splits),
                                    num_warps=4)
    return out
