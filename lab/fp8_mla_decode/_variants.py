"""Candidate rewrites of the split stage (`_triton._split_kernel`), for the H200 A/B in
benchmarks/gpu_fp8_mla_variants.py. The default kernel stays `_triton`'s until a variant is measured
faster. What the sm_90a compile of the default shows (NOTES.md, "Why v0.2 is slow"):

  1. every FP8 element becomes BF16 through F2F.BF16.F16 (Triton lowers e4m3 -> bf16 as
     cvt.rn.f16x2.e4m3x2, then one scalar f16 -> bf16 F2F per element); F2F issues at 16/clk/SM;
  2. K[:, :512] is converted twice (once per MMA operand layout: B^T of Q K^T, B of P V), so a
     32-row tile costs 34,816 F2F = ~2,200 clocks per SM, about the whole per-tile budget at 4 TB/s;
  3. the software pipeliner does not pipeline the [BLOCK_N, 512] load (two users in different
     layouts): it stays a synchronous tt.load in the loop, behind a synchronous kv_indices load,
     so each tile pays two dependent global latencies with nothing in flight.

Variants (constexprs of one kernel, `_split_kernel_v`):
  F16=1      MMA in FP16: q cast once to fp16 (exact for |q| in [6.1e-5, 65504]; smaller values
             round as fp16 subnormals, absolute error < 3e-8), K via cvt.rn.f16x2.e4m3x2 only (e4m3
             is exact in fp16), P in fp16 (3 more mantissa bits than bf16). No F2F.
  PREFETCH=1 explicit register double buffering (launch with num_stages=1): the kv_indices of tile
             i+2 and the FP8 rows of tile i+1 are loaded before tile i is computed, so the DRAM
             latency overlaps the MMA/softmax instead of serialising with it.
  PREFETCH=2 the same, two tiles of rows in flight (tile i+1 and i+2) and the indices of tile i+3.
  PREFETCH=3 K and V as two loads of the same rows (K: evict_last, V: evict_first, so the second read is
             an L2 hit and DRAM bytes stay 576 per row), each with one user, so Triton's pipeliner issues
             both as cp.async into multi-buffered shared memory (launch with num_stages >= 5).
  VMODE=1    (with PREFETCH=3) V converted in a blocked layout and staged as fp16 in shared memory for the
             P V operand (ldmatrix.trans) instead of byte loads (LDS.U8) from the FP8 ring.
  ALU=1|2    (with PREFETCH=3, GPU only) V's (1) or K's and V's (2) e4m3 -> fp16 by integer ops (inline
             PTX: prmt, shr, and, add per 2 bytes; the result is x 2^-8, folded into the scales).
  TRANS=1    rows on M (S^T = K Q^T, O^T += V^T P^T) so that M = BLOCK_N = 64 takes wgmma at 16 heads.
Same grid, split policy, merge and outputs as `_triton` (same workspace layout).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from sglops_kernels.fp8_mla_decode import _triton as base

_INTERPRET = base._INTERPRET
_DOT = base._DOT

# name -> (F16, PREFETCH, config overrides per head class (None: the baseline config as given))
VARIANTS = {
    # _triton._split_kernel itself
    "base": None,
    "f16": {"f16": 1, "prefetch": 0},
    "pf": {"f16": 0, "prefetch": 1, "stages": 1},
    "f16pf": {"f16": 1, "prefetch": 1, "stages": 1},
    "f16pf_n64": {"f16": 1, "prefetch": 1, "stages": 1, "block_n": 64, "warps": 8},
    # 2 programs/SM by registers
    "f16pf_w4": {"f16": 1, "prefetch": 1, "stages": 1, "warps": 4},
    # two tiles of rows in flight
    "f16pf2": {"f16": 1, "prefetch": 2, "stages": 1, "warps": 8},
    # rows on M (S^T = K Q^T, O^T += V^T P^T): M = 64 rows, so wgmma with K and V^T read from shared memory
    "f16pf_t64": {"f16": 1, "prefetch": 1, "stages": 1, "block_n": 64, "warps": 8, "trans": 1},
    # K and V as two loads of the same rows (one user each): Triton's pipeliner makes each an async copy
    # (LDGSTS) into a shared-memory ring; the ring depth follows num_stages (sm_90a, asm_report.py: stages
    # 4 -> 1 buffer, 5-6 -> 2, 7-8 -> 3 at 32 rows; 9 -> 4 at 16), tiles ahead while one computes = depth - 1.
    # VMODE=1 keeps V's conversion in a blocked layout (fp16 V through shared memory, ldmatrix.trans);
    # without it V is read from the byte ring one byte at a time (LDS.U8) into the MMA operand layout.
    "cpa": {"f16": 1, "prefetch": 3, "stages": 7, "block_n": 32, "warps": 8},
    # 4 warps, 2-deep ring, no fp16 V buffer: 90 KB, so 2 CTAs per SM (8 warps, 36 KB ahead), V by LDS.U8
    "cpa_w4": {"f16": 1, "prefetch": 3, "stages": 6, "block_n": 32, "warps": 4},
    "cpa_vm": {"f16": 1, "prefetch": 3, "stages": 7, "block_n": 32, "warps": 8, "vmode": 1},
    "cpa_vm_s6": {"f16": 1, "prefetch": 3, "stages": 6, "block_n": 32, "warps": 8, "vmode": 1},
    # 4 warps over 32 rows: each K element converted once (8 warps over 32 rows convert K twice)
    "cpa_vm_w4": {"f16": 1, "prefetch": 3, "stages": 7, "block_n": 32, "warps": 4, "vmode": 1},
    "cpa_vm_n16": {"f16": 1, "prefetch": 3, "stages": 9, "block_n": 16, "warps": 4, "vmode": 1},
    "cpa_vm_n16w2": {"f16": 1, "prefetch": 3, "stages": 9, "block_n": 16, "warps": 2, "vmode": 1},
    "cpa_vm_n64": {"f16": 1, "prefetch": 3, "stages": 5, "block_n": 64, "warps": 8, "vmode": 1},
    # 128 heads, 64-head block with the ring (wgmma; spills
    # 400 B like base's 336: base is measured best there)
    "cpa_h64": {"f16": 1, "prefetch": 3, "stages": 5, "block_n": 32, "warps": 8, "vmode": 1},
    # ALU=1: V's e4m3 -> fp16 on the integer pipes (PRMT/SHR/AND/ADD), K's on the conversion unit: the two
    # conversions of a row split between pipes; ALU=2: both on the integer pipes (GPU only: inline asm)
    "cpa_vm_w4_alu": {"f16": 1, "prefetch": 3, "stages": 7, "block_n": 32, "warps": 4, "vmode": 1, "alu": 1},
    "cpa_vm_n16_alu": {"f16": 1, "prefetch": 3, "stages": 9, "block_n": 16, "warps": 4, "vmode": 1, "alu": 1},
    "cpa_vm_n16_alu2": {
        "f16": 1,
        "prefetch": 3,
        "stages": 9,
        "block_n": 16,
        "warps": 4,
        "vmode": 1,
        "alu": 2,
    },
}


@triton.jit
def _tile(
    q_nope,
    q_pe,
    kn_raw,
    kp_raw,
    nm,
    acc,
    m_i,
    l_i,
    qk_scale,
    DOT: tl.constexpr,
    KDT: tl.constexpr,
    TRANS: tl.constexpr,
):
    """One online-softmax step over a tile of raw FP8 rows: heads on M (acc [H, 512], q [H, d]) or,
    TRANS, rows on M (acc [512, H], q given transposed [d, H])."""
    k_nope = kn_raw.to(tl.float8e4nv, bitcast=True).to(KDT).to(DOT)
    k_pe = kp_raw.to(tl.float8e4nv, bitcast=True).to(KDT).to(DOT)
    if TRANS:
        st = tl.dot(k_nope, q_nope)
        st = tl.dot(k_pe, q_pe, acc=st)
        st = tl.where(nm[:, None], st * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(st, 0))
        alpha = tl.exp2(m_i - m_new)
        pt = tl.exp2(st - m_new[None, :])
        l_i = l_i * alpha + tl.sum(pt, 0)
        acc = acc * alpha[None, :]
        acc = tl.dot(tl.trans(k_nope), pt.to(KDT).to(DOT), acc=acc)
    else:
        qk = tl.dot(q_nope, tl.trans(k_nope))
        qk = tl.dot(q_pe, tl.trans(k_pe), acc=qk)
        qk = tl.where(nm[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(KDT).to(DOT), k_nope, acc=acc)
    return acc, m_new, l_i


@triton.jit
def _e4m3_f16_int(raw):
    """e4m3 bytes -> fp16 equal to the e4m3 value x 2^-8, on the integer pipes instead of the conversion
    unit: per 2 bytes PRMT (each byte to the top of a 16-bit half), SHR by 1 (sign at bit 14, exponent and
    mantissa at 7..13: fp16's exponent bias 15 vs e4m3's 7 gives the 2^-8), then adding bit 14 to itself
    moves the sign to bit 15. Exact for every code but the two NaNs (they become +-1.875, i.e. +-480 once
    scaled: a KV pool holds none). Callers fold 2^8 into their scales. GPU only (no inline asm in the
    interpreter; tests/test_fp8_mla_decode.py executes this PTX text for all 256 codes)."""
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b32 a, s, t;
        prmt.b32 a, $2, 0, 0x1404;
        shr.b32 s, a, 1;
        and.b32 t, s, 0x40004000;
        add.u32 $0, s, t;
        prmt.b32 a, $2, 0, 0x3424;
        shr.b32 s, a, 1;
        and.b32 t, s, 0x40004000;
        add.u32 $1, s, t;
        }""",
        constraints="=r,=r,r",
        args=[raw],
        dtype=tl.float16,
        is_pure=True,
        pack=4,
    )


@triton.jit
def _tile2(
    q_nope,
    q_pe,
    kn_raw,
    kp_raw,
    v_raw,
    nm,
    acc,
    m_i,
    l_i,
    qk_scale,
    DOT: tl.constexpr,
    KDT: tl.constexpr,
    VMODE: tl.constexpr,
    ALU: tl.constexpr,
):
    """One online-softmax step (heads on M) where K and V are two loads of the same rows, each with
    one user: kn_raw/kp_raw feed only Q K^T, v_raw only P V, so the pipeliner can make each an
    async copy into its own shared-memory ring (a value with two users in two layouts is left
    synchronous)."""
    # K on the integer pipes too (x 2^-8: qk_scale carries the 2^8)
    if ALU >= 2:
        k_nope = _e4m3_f16_int(kn_raw)
        k_pe = _e4m3_f16_int(kp_raw)
    else:
        k_nope = kn_raw.to(tl.float8e4nv, bitcast=True).to(KDT).to(DOT)
        k_pe = kp_raw.to(tl.float8e4nv, bitcast=True).to(KDT).to(DOT)
    qk = tl.dot(q_nope, tl.trans(k_nope))
    qk = tl.dot(q_pe, tl.trans(k_pe), acc=qk)
    qk = tl.where(nm[None, :], qk * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    # V on the integer pipes (x 2^-8: the output scale carries the 2^8)
    if ALU >= 1:
        v = _e4m3_f16_int(v_raw)
    else:
        v = v_raw.to(tl.float8e4nv, bitcast=True).to(KDT).to(DOT)
    if VMODE == 1:
        v = tl.where(nm[:, None], v, 0.0)
    acc = tl.dot(p.to(KDT).to(DOT), v, acc=acc)
    return acc, m_new, l_i


@triton.jit
def _rows(ids_ptr, start, n, nm, PAGE: tl.constexpr):
    if PAGE == 1:
        slot = tl.load(ids_ptr + start + n, mask=nm, other=0).to(tl.int64)
    else:
        page = tl.load(ids_ptr + start + n // PAGE, mask=nm, other=0).to(tl.int64)
        slot = page * PAGE + n % PAGE
    return slot


@triton.jit(do_not_specialize=["n_splits", "heads"])
def _split_kernel_v(
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
    KDT: tl.constexpr,
    PREFETCH: tl.constexpr,
    DIRECT: tl.constexpr,
    TRANS: tl.constexpr = 0,
    VMODE: tl.constexpr = 0,
    ALU: tl.constexpr = 0,
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
    ar = tl.arange(0, BLOCK_N)
    qrow = b.to(tl.int64) * q_sb + h.to(tl.int64) * q_sh
    q_nope = tl.load(q_ptr + qrow[:, None] + cv[None, :], mask=hm[:, None], other=0.0).to(KDT).to(DOT)
    q_pe = tl.load(q_ptr + qrow[:, None] + cp[None, :], mask=hm[:, None], other=0.0).to(KDT).to(DOT)
    if TRANS:
        q_nope = tl.trans(q_nope)
        q_pe = tl.trans(q_pe)
        acc = tl.zeros([CKV, BLOCK_H], tl.float32)
    else:
        acc = tl.zeros([BLOCK_H, CKV], tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    qk_scale = sm_scale * kv_scale * 1.4426950408889634
    if ALU >= 2:
        # K arrives as e4m3 x 2^-8
        qk_scale = qk_scale * 256.0
    if PREFETCH == 1:
        # tile lo's rows loaded, tile lo + BLOCK_N's slots loaded, before the loop
        n = lo + ar
        nm = n < hi
        slot = _rows(ids_ptr, start, n, nm, PAGE)
        rowp = pool_ptr + slot * pool_stride
        kn = tl.load(rowp[:, None] + cv[None, :], mask=nm[:, None], other=0)
        kp = tl.load(rowp[:, None] + cp[None, :], mask=nm[:, None], other=0)
        n1 = lo + BLOCK_N + ar
        nm1 = n1 < hi
        slot1 = _rows(ids_ptr, start, n1, nm1, PAGE)
        for n0 in range(lo, hi, BLOCK_N):
            # issue tile n0 + BLOCK_N's rows and tile n0 + 2 BLOCK_N's slots, then compute tile n0
            rowp1 = pool_ptr + slot1 * pool_stride
            kn1 = tl.load(rowp1[:, None] + cv[None, :], mask=nm1[:, None], other=0)
            kp1 = tl.load(rowp1[:, None] + cp[None, :], mask=nm1[:, None], other=0)
            n2 = n0 + 2 * BLOCK_N + ar
            nm2 = n2 < hi
            slot2 = _rows(ids_ptr, start, n2, nm2, PAGE)
            acc, m_i, l_i = _tile(q_nope, q_pe, kn, kp, nm, acc, m_i, l_i, qk_scale, DOT, KDT, TRANS)
            kn, kp, nm = kn1, kp1, nm1
            slot1, nm1 = slot2, nm2
    elif PREFETCH == 2:
        # two tiles of rows in flight (tile i+1 and i+2) and the slots of tile i+3
        n = lo + ar
        nm = n < hi
        slot = _rows(ids_ptr, start, n, nm, PAGE)
        rowp = pool_ptr + slot * pool_stride
        kn = tl.load(rowp[:, None] + cv[None, :], mask=nm[:, None], other=0)
        kp = tl.load(rowp[:, None] + cp[None, :], mask=nm[:, None], other=0)
        n1 = lo + BLOCK_N + ar
        nm1 = n1 < hi
        slot1 = _rows(ids_ptr, start, n1, nm1, PAGE)
        rowp1 = pool_ptr + slot1 * pool_stride
        kn1 = tl.load(rowp1[:, None] + cv[None, :], mask=nm1[:, None], other=0)
        kp1 = tl.load(rowp1[:, None] + cp[None, :], mask=nm1[:, None], other=0)
        n2 = lo + 2 * BLOCK_N + ar
        nm2 = n2 < hi
        slot2 = _rows(ids_ptr, start, n2, nm2, PAGE)
        for n0 in range(lo, hi, BLOCK_N):
            rowp2 = pool_ptr + slot2 * pool_stride
            kn2 = tl.load(rowp2[:, None] + cv[None, :], mask=nm2[:, None], other=0)
            kp2 = tl.load(rowp2[:, None] + cp[None, :], mask=nm2[:, None], other=0)
            n3 = n0 + 3 * BLOCK_N + ar
            nm3 = n3 < hi
            slot3 = _rows(ids_ptr, start, n3, nm3, PAGE)
            acc, m_i, l_i = _tile(q_nope, q_pe, kn, kp, nm, acc, m_i, l_i, qk_scale, DOT, KDT, TRANS)
            kn, kp, nm = kn1, kp1, nm1
            kn1, kp1, nm1 = kn2, kp2, nm2
            slot2, nm2 = slot3, nm3
    elif PREFETCH == 3:
        # two loads of each tile's rows, K (evict_last: it stays in L2 for V) and V (evict_first: last
        # reader); one user each, so Triton's pipeliner issues both as cp.async into rings whose depth
        # follows num_stages (the kv_indices two stages earlier)
        for n0 in range(lo, hi, BLOCK_N):
            n = n0 + ar
            nm = n < hi
            slot = _rows(ids_ptr, start, n, nm, PAGE)
            rowp = pool_ptr + slot * pool_stride
            kn = tl.load(rowp[:, None] + cv[None, :], mask=nm[:, None], other=0, eviction_policy="evict_last")
            kp = tl.load(rowp[:, None] + cp[None, :], mask=nm[:, None], other=0, eviction_policy="evict_last")
            vr = tl.load(
                rowp[:, None] + cv[None, :], mask=nm[:, None], other=0, eviction_policy="evict_first"
            )
            acc, m_i, l_i = _tile2(
                q_nope, q_pe, kn, kp, vr, nm, acc, m_i, l_i, qk_scale, DOT, KDT, VMODE, ALU
            )
    else:
        for n0 in range(lo, hi, BLOCK_N):
            n = n0 + ar
            nm = n < hi
            slot = _rows(ids_ptr, start, n, nm, PAGE)
            rowp = pool_ptr + slot * pool_stride
            kn = tl.load(rowp[:, None] + cv[None, :], mask=nm[:, None], other=0)
            kp = tl.load(rowp[:, None] + cp[None, :], mask=nm[:, None], other=0)
            acc, m_i, l_i = _tile(q_nope, q_pe, kn, kp, nm, acc, m_i, l_i, qk_scale, DOT, KDT, TRANS)
    empty = l_i == 0.0
    inv = kv_scale / tl.where(empty, 1.0, l_i)
    if ALU >= 1:
        # V arrived as e4m3 x 2^-8
        inv = inv * 256.0
    lse = tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))
    if TRANS:
        acc = tl.trans(acc * inv[None, :])
    else:
        acc = acc * inv[:, None]
    if DIRECT:
        orow = b.to(tl.int64) * o_sb + h.to(tl.int64) * o_sh
        tl.store(out_ptr + orow[:, None] + cv[None, :], acc.to(out_ptr.dtype.element_ty), mask=hm[:, None])
    else:
        prow = (b * heads + h).to(tl.int64) * n_splits + s
        tl.store(part_ptr + prow[:, None] * CKV + cv[None, :], acc, mask=hm[:, None])
        tl.store(lse_ptr + prow, lse, mask=hm)


# per GPU family, what a variant changes to fit it: sm_120 has ~99 KB of shared memory per block (100 KB per
# SM), so the cp.async rings get shallower (aot.py --cc 120 --variant NAME reports the resources)
FAMILY_OVERRIDES = {
    "sm120": {
        "cpa": {"stages": 4, "warps": 8},
        "cpa_w4": {"stages": 5},
        "cpa_vm": {"stages": 4},
        "cpa_vm_s6": {"stages": 4},
        "cpa_vm_w4": {"stages": 4},
        "cpa_vm_n16": {"stages": 7},
        "cpa_vm_n16w2": {"stages": 7},
        "cpa_vm_n64": {"block_n": 32, "stages": 4},
        "cpa_vm_w4_alu": {"stages": 4},
        "cpa_vm_n16_alu": {"stages": 7},
        "cpa_vm_n16_alu2": {"stages": 7},
    },
}


def variant_config(name: str, cfg: dict, family: str | None = None) -> dict:
    """The launch configuration of variant `name` derived from a baseline configuration `cfg` (and,
    for `family` "sm120", adapted to its shared memory)."""
    over = VARIANTS[name]
    out = dict(cfg)
    if over:
        out.update({k: v for k, v in over.items()})
        out.setdefault("trans", 0)
        out["trans"] = over.get("trans", 0)
        out.update(FAMILY_OVERRIDES.get(family or "", {}).get(name, {}))
    return out


def mla_decode_variant(
    name,
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
    """`_triton.mla_decode` with the split stage of variant `name` (VARIANTS); `config` is the
    baseline configuration the variant's overrides apply to (default: config_for(heads))."""
    batch, heads, d = q.shape
    cfg0 = dict(config or base.config_for(heads))
    if VARIANTS[name] is None:
        return base.mla_decode(
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
            cfg0,
        )
    cfg = variant_config(name, cfg0, None if _INTERPRET else base._family())
    ckv, kpe = 512, d - 512
    if q.stride(-1) != 1:
        q = q.contiguous()
    raw = pool.view(torch.uint8)
    if raw.dim() == 3 and raw.shape[1] != 1:
        raw = raw.reshape(-1, 1, d)
    if out is None:
        out = torch.empty(batch, heads, ckv, dtype=q.dtype, device=q.device)
    if page_size > 1 and kv_lens is None:
        raise ValueError("page_size > 1 needs kv_lens (tokens per request, on the device)")
    n_splits, direct, part, lse = base.split_buffers(batch, heads, n_splits, out, workspace)
    bh = cfg["block_h"]
    lens = kv_lens if kv_lens is not None else kv_indptr
    kdt = tl.float16 if cfg["f16"] else tl.bfloat16
    _split_kernel_v[(triton.cdiv(heads, bh), n_splits, batch)](
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
        DOT=_DOT if _INTERPRET else kdt,
        KDT=kdt,
        PREFETCH=cfg["prefetch"],
        DIRECT=direct,
        TRANS=cfg["trans"],
        VMODE=cfg.get("vmode", 0),
        ALU=0 if _INTERPRET else cfg.get("alu", 0),
        num_warps=cfg["warps"],
        num_stages=cfg["stages"],
    )
    if not direct:
        base._merge_kernel[(batch * heads,)](
            part,
            lse,
            out,
            heads,
            out.stride(0),
            out.stride(1),
            n_splits,
            CKV=ckv,
            SPLITS=base.MAX_SPLITS,
            num_warps=4,
        )
    return out
