"""gather-cast and fp8-kv-direct inside FlashInfer's real MLA wrapper, on a GPU host (not in CI).

The patch code under test is the helper blocks the two patches add, taken from the patched real
release file (`--extract sglang-0.5.23 DEST` on the laptop writes them; `--helpers DEST` here).
FlashInfer is driven the way SGLang drives it: the flat positional plan(...) and run(q_nope,
q_rope, ckv, kpe, out=...) calls, CUDA-graph wrappers on fixed buffers, replays that rewrite
kv_indptr and the index buffer in place and re-plan through `_cached_module.plan` (SGLang's
fast_mla_decode_plan).

    --check   eager and graph outputs of the patched cast vs plan/run on the whole-pool cast, bit
              for bit; fp8-kv-direct's plan/run (its own helpers) against the same, and against fp32
    --sweep   the cast kernel's launch configurations (rows per block, warps, programs per SM)
    --table   per-layer times under CUDA graphs (and eager) for the issue's grid

    PYTHONPATH=kernels/gather_cast python benchmarks/gpu_flashinfer_mla.py --helpers H.py --out OUT \\
        --check --table
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time
import traceback
import warnings
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GATHER_HELPERS = ("_sglops_graph_rows", "_sglops_record_rows", "_sglops_cast_kv")
FP8_HELPERS = ("_sglops_fp8_plan_kwargs", "_sglops_fp8_run_kwargs")
CKV, KPE = 512, 64
# --zero-copy: row (f), the prototype FP8 MLA decode kernel (kernels/fp8_mla_decode)
ZERO_COPY = False


def extract(variant: str, dest: str) -> None:
    """Laptop side: both patches' helper blocks, from the patched real release files."""
    sys.path.insert(0, str(ROOT))
    from sglops.patch import diff as patch_diff
    from sglops.patch.spec import load
    from sglops.sandbox import trees

    parts = []
    for patch, names in (("gather-cast", GATHER_HELPERS), ("fp8-kv-direct", FP8_HELPERS)):
        v = load(patch).variant(variant)
        (fp,) = v.files()
        src = (trees.sglang_template(v.sglang[0]) / fp.path).read_text()
        new, conflicts = patch_diff.apply([fp], {fp.path: src})
        if conflicts:
            raise SystemExit(f"error: {patch} {variant} does not apply: {conflicts}")
        tree = ast.parse(new[fp.path])
        keep = [
            n
            for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name in names)
            or (isinstance(n, ast.Try) and "sglops_kernels" in ast.unparse(n))
        ]
        if {n.name for n in keep if isinstance(n, ast.FunctionDef)} != set(names):
            raise SystemExit(f"error: {patch} {variant} lacks {names}")
        parts.append(
            f"# --- {patch} {variant}, patched (extracted by sglops)\n" + ast.unparse(ast.Module(keep, []))
        )
    Path(dest).write_text("from functools import partial\n\nimport torch\n\n" + "\n\n".join(parts) + "\n")


def helper_spaces(path: str) -> tuple[dict, dict]:
    """Two module namespaces of the extracted helpers: one with the fused kernel, one without.

    Each helper finds `_fused_cast_live_rows` through its own `__globals__`, which is the namespace
    it was exec'd in; a copied dict with the name set to None (what this script once did) leaves the
    helpers' globals untouched, so that "fallback" ran the fused kernel. The fallback namespace is
    therefore exec'd separately, and the fused kernel is wrapped to count its calls: the check fails
    if the fallback variant ever reaches it (`FUSED_CALLS`)."""
    import torch

    src = Path(path).read_text()
    ns: dict = {"torch": torch, "partial": partial}
    exec(compile(src, path, "exec"), ns)
    fused = ns["_fused_cast_live_rows"]
    if fused is None:
        raise SystemExit(
            "error: sglops_kernels.gather_cast is not importable (PYTHONPATH=kernels/gather_cast)"
        )

    def counted(*args, **kwargs):
        FUSED_CALLS[0] += 1
        return fused(*args, **kwargs)

    ns["_fused_cast_live_rows"] = counted
    ns_torch: dict = {"torch": torch, "partial": partial}
    exec(compile(src, path, "exec"), ns_torch)
    ns_torch["_fused_cast_live_rows"] = None
    if ns_torch["_sglops_cast_kv"].__globals__["_fused_cast_live_rows"] is not None:
        raise SystemExit("error: the fallback helpers still see the fused kernel")
    return ns, ns_torch


# calls of the fused kernel through the helpers (see helper_spaces)
FUSED_CALLS = [0]


# --- SGLang's calls ------------------------------------------------------------------------------


def sglang_plan(w, qo_indptr, kv_indptr, kv_indices, kv_lens, heads, sm_scale, kv_dtype, ns=None):
    """The positional plan() call of SGLang's decode indices updater (plus fp8-kv-direct's keywords)."""
    import torch

    extra = ns["_sglops_fp8_plan_kwargs"](w, kv_dtype) if ns is not None else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        w.plan(
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            heads,
            CKV,
            KPE,
            1,
            False,
            sm_scale,
            torch.bfloat16,
            kv_dtype,
            **extra,
        )


def sglang_run(w, q, kbuf, out, ns=None):
    """SGLang's forward_decode run() call (plus fp8-kv-direct's keywords)."""
    extra = ns["_sglops_fp8_run_kwargs"](kbuf) if ns is not None else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return w.run(q[:, :, :CKV], q[:, :, CKV:], kbuf[:, :, :CKV], kbuf[:, :, CKV:], out=out, **extra)


def fast_replan(w, qo_cpu, kv_indptr_cpu, kv_len_cpu, heads):
    """SGLang's fast_mla_decode_plan: re-plan from host arrays only, no index copy, no sync."""
    w._cached_module.plan(
        w._float_workspace_buffer,
        w._int_workspace_buffer,
        w._pin_memory_int_workspace_buffer,
        qo_cpu,
        kv_indptr_cpu,
        kv_len_cpu,
        heads,
        CKV,
        False,
    )


class GraphBuffers:
    """init_cuda_graph_state: fixed qo/kv indptr, kv_lens and one kv_indices buffer for every bs,
    plus the decode updater's own kv_indptr (which replays rewrite on the device)."""

    def __init__(self, max_bs: int, width: int):
        import torch

        self.kv_indices = torch.zeros(max_bs * width, dtype=torch.int32, device="cuda")
        self.qo_indptr = torch.arange(max_bs + 1, dtype=torch.int32, device="cuda")
        self.kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device="cuda")
        self.kv_lens = torch.ones(max_bs, dtype=torch.int32, device="cuda")
        self.updater_kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device="cuda")
        self.width = width

    def wrapper(self, ws, bs, backend):
        from flashinfer.mla import BatchMLAPagedAttentionWrapper

        return BatchMLAPagedAttentionWrapper(
            ws,
            use_cuda_graph=True,
            qo_indptr=self.qo_indptr[: bs + 1],
            kv_indptr=self.kv_indptr[: bs + 1],
            kv_indices=self.kv_indices,
            kv_len_arr=self.kv_lens[:bs],
            backend=backend,
        )


def batch(gen, bs, pool_rows, seq_lens=None, max_len=4096, shared=256):
    """Slot ids of a decode batch: per request a shared prefix (radix cache) then its own slots."""
    import torch

    if seq_lens is None:
        seq_lens = torch.randint(1, max_len + 1, (bs,), generator=gen, device="cuda")
    seq_lens = seq_lens.to(torch.int32)
    indptr = torch.zeros(bs + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(seq_lens, 0)
    n = int(indptr[-1])
    ids = torch.randint(0, pool_rows, (n,), generator=gen, device="cuda", dtype=torch.int32)
    prefix = torch.randint(0, pool_rows, (shared,), generator=gen, device="cuda", dtype=torch.int32)
    for b in range(bs):
        s, e = int(indptr[b]), int(indptr[b + 1])
        k = min(shared, e - s)
        ids[s : s + k] = prefix[:k]
    return seq_lens, indptr, ids


def bits(t):
    import torch

    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.uint8)


def fp32_reference(q, cast_pool, indptr, ids, sm_scale):
    """softmax(q . K^T * scale) . V in fp32, K = the 576-wide rows, V = their first 512 columns."""
    import torch

    outs = []
    for b in range(q.shape[0]):
        k = cast_pool[ids[int(indptr[b]) : int(indptr[b + 1])].long()].float().reshape(-1, CKV + KPE)
        s = (q[b].float() @ k.T) * sm_scale
        outs.append(torch.softmax(s, -1) @ k[:, :CKV])
    return torch.stack(outs)


def poison_allocator(shape, dtype) -> None:
    """Fill the block the caching allocator will hand to the next torch.empty(shape) with NaN: a helper that
    leaves a live row unwritten then reads NaN, not the previous variant's correct cast (which made a broken
    fallback pass: the check could not fail)."""
    import torch

    torch.cuda.synchronize()
    # else a cached block of the same size (an earlier case's cast) may be the one handed out
    torch.cuda.empty_cache()
    junk = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    del junk


def check(ns, ns_torch, backends, out: dict, gen, heads_list=(16, 128), bs_list=(1, 4, 16)) -> None:
    """Bit-exactness inside FlashInfer, eager and under graph replays; fp8-kv-direct's real plan/run."""
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    pool_rows, width, max_bs = 495_000, 202_752 // 16, 16
    pool = (torch.randn(pool_rows, 1, CKV + KPE, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    whole = pool.to(torch.bfloat16)
    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    cases = out.setdefault("check", [])
    for backend in backends:
        for heads in heads_list:
            sm_scale = 1.0 / (192**0.5)
            for bs in bs_list:
                case = {"backend": backend, "heads": heads, "bs": bs}
                try:
                    seq, indptr, ids = batch(gen, bs, pool_rows)
                    q = torch.randn(bs, heads, CKV + KPE, generator=gen, device="cuda").to(torch.bfloat16)
                    # stock: plan on the slot ids, run on the whole-pool cast
                    ref_w = BatchMLAPagedAttentionWrapper(ws, backend=backend)
                    sglang_plan(
                        ref_w,
                        indptr.new_tensor(range(bs + 1)),
                        indptr,
                        ids,
                        seq,
                        heads,
                        sm_scale,
                        torch.bfloat16,
                    )
                    ref = sglang_run(
                        ref_w, q, whole, torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda")
                    )
                    # patched, eager: the helpers record the plan's rows and cast them
                    for label, space in (("fused", ns), ("torch", ns_torch)):
                        w = BatchMLAPagedAttentionWrapper(ws, backend=backend)
                        space["_sglops_record_rows"](w, ids, indptr, True)
                        sglang_plan(
                            w,
                            indptr.new_tensor(range(bs + 1)),
                            indptr,
                            ids,
                            seq,
                            heads,
                            sm_scale,
                            torch.bfloat16,
                        )
                        # the previous variant's cast: freed before the poison, so it cannot be reused
                        kbuf = None
                        # last allocation before the cast's own
                        poison_allocator(pool.shape, torch.bfloat16)
                        before = FUSED_CALLS[0]
                        kbuf = space["_sglops_cast_kv"](pool, w, torch.bfloat16)
                        case[f"eager_{label}_path"] = "fused" if FUSED_CALLS[0] > before else "torch"
                        got = sglang_run(w, q, kbuf, torch.empty_like(ref))
                        case[f"eager_{label}_bit_exact"] = bool(torch.equal(bits(got), bits(ref)))
                    # accuracy of the BF16 path against fp32, as a yardstick for FP8-native below
                    r32 = fp32_reference(q, whole, indptr, ids, sm_scale)
                    case["bf16_max_abs_err_vs_fp32"] = float((ref.float() - r32).abs().max())
                    # fp8-kv-direct: its plan/run keywords on the FP8 pool itself
                    w8 = BatchMLAPagedAttentionWrapper(ws, backend=backend)
                    sglang_plan(
                        w8,
                        indptr.new_tensor(range(bs + 1)),
                        indptr,
                        ids,
                        seq,
                        heads,
                        sm_scale,
                        torch.float8_e4m3fn,
                        ns,
                    )
                    got8 = sglang_run(w8, q, pool, torch.empty_like(ref), ns)
                    case["fp8_direct_max_abs_err_vs_fp32"] = float((got8.float() - r32).abs().max())
                    case["fp8_direct_max_abs_diff_vs_bf16_cast"] = float(
                        (got8.float() - ref.float()).abs().max()
                    )
                    case["fp8_direct_bit_exact_vs_bf16_cast"] = bool(torch.equal(bits(got8), bits(ref)))
                    case["graph"] = graph_check(
                        ns, ns_torch, backend, heads, bs, pool, whole, ws, gen, width, max_bs, sm_scale
                    )
                # keep going: one failure must not cost the whole call
                except Exception as exc:
                    case["error"] = f"{type(exc).__name__}: {exc}"
                    case["trace"] = traceback.format_exc()[-1500:]
                cases.append(case)
                print("check", json.dumps({k: v for k, v in case.items() if k != "trace"}), flush=True)


def graph_check(ns, ns_torch, backend, heads, bs, pool, whole, ws, gen, width, max_bs, sm_scale) -> dict:
    """Capture stock, patched (fused and torch) and FP8-direct decode graphs for batch size bs as
    SGLang does, then replay random batches written in place; every replay's output must equal the
    eager stock plan/run on the same batch bit for bit (FP8-direct: its own eager run)."""
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper

    pool_rows = pool.shape[0]
    res: dict = {}
    variants = {"stock": None, "fused": ns, "torch": ns_torch, "fp8_direct": ns}
    graphs = {}
    for label, space in variants.items():
        bufs = GraphBuffers(max_bs, width)
        w = bufs.wrapper(ws, bs, backend)
        kv_dtype = torch.float8_e4m3fn if label == "fp8_direct" else torch.bfloat16
        if label in ("fused", "torch"):
            w._sglops_graph = space["_sglops_graph_rows"](bufs.kv_indices, bs, width)
        capture_seq = torch.ones(bs, dtype=torch.int32, device="cuda")
        bufs.updater_kv_indptr[1 : bs + 1] = torch.cumsum(capture_seq, 0)
        capture_ids = torch.arange(1, bs + 1, dtype=torch.int32, device="cuda")
        if label in ("fused", "torch"):
            space["_sglops_record_rows"](w, capture_ids, bufs.updater_kv_indptr[: bs + 1], True)
        sglang_plan(
            w,
            bufs.qo_indptr[: bs + 1].clone(),
            bufs.updater_kv_indptr[: bs + 1],
            capture_ids,
            capture_seq,
            heads,
            sm_scale,
            kv_dtype,
            ns if label == "fp8_direct" else None,
        )
        q = torch.zeros(bs, heads, CKV + KPE, dtype=torch.bfloat16, device="cuda")
        o = torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda")

        def step(w=w, space=space, label=label, q=q, o=o):
            if label == "stock":
                kbuf = pool.to(torch.bfloat16)
            elif label == "fp8_direct":
                kbuf = pool
            else:
                kbuf = space["_sglops_cast_kv"](pool, w, torch.bfloat16)
            sglang_run(w, q, kbuf, o, ns if label == "fp8_direct" else None)

        before = FUSED_CALLS[0]
        step()
        if label in ("fused", "torch"):
            res[f"{label}_path"] = "fused" if FUSED_CALLS[0] > before else "torch"
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        # as SGLang installs after capture
        w.plan = partial(fast_replan_positional, w)
        graphs[label] = (g, w, bufs, q, o)
    exact = {label: True for label in graphs}
    stale = False
    for _ in range(6):
        seq, indptr, ids = batch(gen, bs, pool_rows, max_len=4096)
        n = int(indptr[-1])
        qv = torch.randn(bs, heads, CKV + KPE, generator=gen, device="cuda").to(torch.bfloat16)
        ref_w = BatchMLAPagedAttentionWrapper(ws, backend=backend)
        sglang_plan(
            ref_w, indptr.new_tensor(range(bs + 1)), indptr, ids, seq, heads, sm_scale, torch.bfloat16
        )
        ref = sglang_run(ref_w, qv, whole, torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda"))
        w8 = BatchMLAPagedAttentionWrapper(ws, backend=backend)
        sglang_plan(
            w8, indptr.new_tensor(range(bs + 1)), indptr, ids, seq, heads, sm_scale, torch.float8_e4m3fn, ns
        )
        ref8 = sglang_run(w8, qv, pool, torch.empty_like(ref), ns)
        for label, (g, w, bufs, q, o) in graphs.items():
            # the updater, on the device
            bufs.updater_kv_indptr[1 : bs + 1] = torch.cumsum(seq, 0)
            # in place; what lies beyond n is a stale tail
            bufs.kv_indices[:n].copy_(ids)
            stale |= bool(bufs.kv_indices[n : n + 4096].any())
            q.copy_(qv)
            kv_dtype = torch.float8_e4m3fn if label == "fp8_direct" else torch.bfloat16
            sglang_plan(
                w,
                bufs.qo_indptr[: bs + 1].cpu(),
                indptr.cpu(),
                bufs.kv_indices,
                seq.cpu(),
                heads,
                sm_scale,
                kv_dtype,
                ns if label == "fp8_direct" else None,
            )
            o.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            want = ref8 if label == "fp8_direct" else ref
            exact[label] &= bool(torch.equal(bits(o), bits(want)))
    res.update({f"{k}_bit_exact": v for k, v in exact.items()})
    res["stale_tail_seen"] = stale
    return res


def fast_replan_positional(
    w,
    qo_cpu,
    kv_indptr_cpu,
    kv_indices,
    kv_len_cpu,
    heads,
    ckv,
    kpe,
    page,
    causal,
    sm_scale,
    q_dtype,
    kv_dtype,
):
    """SGLang's fast_mla_decode_plan signature (no keywords: fp8-kv-direct must pass none here)."""
    fast_replan(w, qo_cpu, kv_indptr_cpu, kv_len_cpu, heads)


# --- timing --------------------------------------------------------------------------------------


def replay_us(g, reps=20) -> float:
    import torch

    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def capture(fn):
    import torch

    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def sweep(out: dict, gen, layers: int = 8) -> None:
    """cast_live_rows launch configurations, device live count, under graphs, per layer."""
    import torch
    from sglops_kernels.gather_cast import _triton as impl
    from sglops_kernels.gather_cast import gather_cast

    pool_rows = 495_000
    pools = [
        (torch.randn(pool_rows, 1, 576, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        for _ in range(layers)
    ]
    rows_out = []
    configs = [(4, 4, 16), (4, 4, 8), (2, 4, 16), (8, 4, 8), (4, 2, 32), (2, 2, 32), (4, 4, 32), (8, 8, 8)]
    for n in (4096, 32768, 131072, 524288):
        ids = torch.randint(
            0, pool_rows, (64 * 202752 // 16,), generator=gen, device="cuda", dtype=torch.int32
        )
        live = torch.tensor([n], dtype=torch.int32, device="cuda")
        for rows, warps, per_sm in configs:

            def fn(rows=rows, warps=warps, per_sm=per_sm, ids=ids, live=live):
                for p in pools:
                    impl.cast_live_rows(
                        p, ids, live, ids.numel(), rows=rows, warps=warps, programs_per_sm=per_sm
                    )

            g = capture(fn)
            t = replay_us(g) / layers
            rows_out.append(
                {
                    "n": n,
                    "rows": rows,
                    "warps": warps,
                    "programs_per_sm": per_sm,
                    "us": t,
                    "TBps": n_moved(min(n, pool_rows)) / t / 1e6,
                }
            )
            print("sweep", json.dumps(rows_out[-1]), flush=True)
            del g
        compact = ids[:n]

        def gather(compact=compact):
            for p in pools:
                gather_cast(p, compact)

        g = capture(gather)
        t = replay_us(g) / layers
        rows_out.append(
            {"n": n, "kernel": "gather_cast (compact, exact rows)", "us": t, "TBps": n_moved(n) / t / 1e6}
        )
        print("sweep", json.dumps(rows_out[-1]), flush=True)
        del g
    out["sweep"] = rows_out


def n_moved(rows: int) -> float:
    return rows * 576 * 3.0


def table(ns, out: dict, gen, layers: int, grid_ctx, grid_bs, backend: str) -> None:
    """Per-layer times for the issue's grid (a)-(e), plus the cast alone three ways."""
    import torch

    pool_rows, width = 495_000, 202_752
    pools = [
        (torch.randn(pool_rows, 1, 576, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        for _ in range(layers)
    ]
    bf16_pools = [p.to(torch.bfloat16) for p in pools]
    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    rows = out.setdefault("table", [])
    max_bs = max(grid_bs)
    bufs = GraphBuffers(max_bs, width)
    for ctx in grid_ctx:
        for bs in grid_bs:
            r = table_row(ns, pools, bf16_pools, ws, bufs, gen, ctx, bs, layers, backend)
            rows.append(r)
            if out.get("dest"):
                Path(out["dest"]).write_text(json.dumps(out, indent=1))
            print(
                "table",
                json.dumps(
                    {k: round(v, 2) if isinstance(v, float) else v for k, v in r.items() if k != "trace"}
                ),
                flush=True,
            )
            torch.cuda.empty_cache()


def table_row(ns, pools, bf16_pools, ws, bufs, gen, ctx, bs, layers, backend) -> dict:
    """One (ctx, bs) row of the table: every variant captured as a graph of all layers."""
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper
    from sglops_kernels.gather_cast import cast_live_rows, gather_cast

    pool_rows, width, heads = pools[0].shape[0], bufs.width, 16
    sm_scale = 1.0 / (192**0.5)
    r = {
        "ctx": ctx,
        "bs": bs,
        "live_rows": bs * ctx,
        "pool_rows": pool_rows,
        "layers": layers,
        "heads": heads,
        "backend": backend,
    }
    try:
        seq = torch.full((bs,), ctx, dtype=torch.int32, device="cuda")
        _, indptr, ids = batch(gen, bs, pool_rows, seq_lens=seq)
        n = int(indptr[-1])
        bufs.kv_indices[:n].copy_(ids)
        bufs.updater_kv_indptr[: bs + 1].copy_(indptr)
        q = torch.randn(bs, heads, 576, generator=gen, device="cuda").to(torch.bfloat16)
        o = torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda")
        qo = torch.arange(bs + 1, dtype=torch.int32, device="cuda")
        w = bufs.wrapper(ws, bs, backend)
        w._sglops_graph = ns["_sglops_graph_rows"](bufs.kv_indices, bs, width)
        ns["_sglops_record_rows"](w, ids, bufs.updater_kv_indptr[: bs + 1], True)
        sglang_plan(w, qo, bufs.updater_kv_indptr[: bs + 1], ids, seq, heads, sm_scale, torch.bfloat16)
        bufs8 = GraphBuffers(bs, 1)
        bufs8.kv_indices = bufs.kv_indices
        w8 = bufs8.wrapper(ws, bs, backend)
        sglang_plan(w8, qo, indptr, ids, seq, heads, sm_scale, torch.float8_e4m3fn, ns)

        def whole():
            for p in pools:
                sglang_run(w, q, p.to(torch.bfloat16), o)

        def patched():
            for p in pools:
                sglang_run(w, q, ns["_sglops_cast_kv"](p, w, torch.bfloat16), o)

        def fp8_direct():
            for p in pools:
                sglang_run(w8, q, p, o, ns)

        def floor():
            for p in bf16_pools:
                sglang_run(w, q, p, o)

        def cast_device_count():
            for p in pools:
                ns["_sglops_cast_kv"](p, w, torch.bfloat16)

        def cast_host_count():
            for p in pools:
                cast_live_rows(p, ids, n)

        def compact_gather():
            for p in pools:
                gather_cast(p, ids)

        def whole_cast_only():
            for p in pools:
                p.to(torch.bfloat16)

        zero_copy = []
        if ZERO_COPY:
            from sglops_kernels.fp8_mla_decode import _triton as zc

            splits = zc.splits_for(bs, heads, ctx, torch.cuda.get_device_properties(0).multi_processor_count)
            zws = (
                torch.empty(bs * heads * splits * CKV, dtype=torch.float32, device="cuda"),
                torch.empty(bs * heads * splits, dtype=torch.float32, device="cuda"),
            )
            r["f_splits"] = splits

            def fp8_zero_copy():
                for p in pools:
                    zc.mla_decode(q, p, indptr, ids, sm_scale, 1.0, splits, o, zws)

            zero_copy = [("f_zero_copy_fp8_mla", fp8_zero_copy)]
        for key, fn in (
            *zero_copy,
            ("a_whole_pool_cast_mla", whole),
            ("c_graph_gather_cast_mla", patched),
            ("d_fp8_native_mla", fp8_direct),
            ("e_bf16_mla_floor", floor),
            ("cast_graph_device_count", cast_device_count),
            ("cast_exact_rows_host_count", cast_host_count),
            ("cast_compact_gather", compact_gather),
            ("cast_whole_pool_torch", whole_cast_only),
        ):
            try:
                g = capture(fn)
                r[key] = replay_us(g) / layers
                del g
            except Exception as exc:
                r[key + "_error"] = f"{type(exc).__name__}: {exc}"[:300]
        # (b) eager: plan once, then per layer the patched cast + run, as issued from Python
        we = BatchMLAPagedAttentionWrapper(ws, backend=backend)
        ns["_sglops_record_rows"](we, ids, indptr, True)
        sglang_plan(we, qo, indptr, ids, seq, heads, sm_scale, torch.bfloat16)

        def eager():
            for p in pools:
                sglang_run(we, q, ns["_sglops_cast_kv"](p, we, torch.bfloat16), o)

        eager()
        times = []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            eager()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e6 / layers)
        r["b_eager_gather_cast_mla_wall"] = statistics.median(times)
        derive(r)
    except Exception as exc:
        r["error"] = f"{type(exc).__name__}: {exc}"
        r["trace"] = traceback.format_exc()[-1500:]
    return r


def zero_copy_check(out: dict, gen) -> None:
    """The prototype kernel against fp32 attention and FlashInfer's BF16 output, eager and under a
    graph replayed with new lengths and ids written in place."""
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper
    from sglops_kernels.fp8_mla_decode import _triton as zc

    pool_rows = 495_000
    pool = (torch.randn(pool_rows, 1, CKV + KPE, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    whole = pool.to(torch.bfloat16)
    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    sm_scale = 1.0 / (192**0.5)
    cases = out.setdefault("zero_copy_check", [])
    for heads, bs, max_len in ((16, 1, 4096), (16, 4, 4096), (16, 16, 4096), (128, 4, 4096), (16, 1, 32768)):
        case = {"heads": heads, "bs": bs, "max_len": max_len}
        try:
            seq, indptr, ids = batch(gen, bs, pool_rows, max_len=max_len)
            q = torch.randn(bs, heads, CKV + KPE, generator=gen, device="cuda").to(torch.bfloat16)
            r32 = fp32_reference(q, whole, indptr, ids, sm_scale)
            w = BatchMLAPagedAttentionWrapper(ws, backend="fa3")
            sglang_plan(
                w, indptr.new_tensor(range(bs + 1)), indptr, ids, seq, heads, sm_scale, torch.bfloat16
            )
            fi = sglang_run(w, q, whole, torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda"))
            splits = zc.splits_for(
                bs, heads, max_len, torch.cuda.get_device_properties(0).multi_processor_count
            )
            got = zc.mla_decode(q, pool, indptr, ids, sm_scale, 1.0, splits)
            case.update(
                {
                    "splits": splits,
                    "max_abs_err_vs_fp32": float((got.float() - r32).abs().max()),
                    "flashinfer_bf16_max_abs_err_vs_fp32": float((fi.float() - r32).abs().max()),
                    "max_abs_diff_vs_flashinfer": float((got.float() - fi.float()).abs().max()),
                }
            )
            # graph: capture once, replay with a new batch written in place
            qs, ind, idb = (
                q.clone(),
                indptr.clone(),
                torch.zeros(bs * max_len, dtype=torch.int32, device="cuda"),
            )
            idb[: ids.numel()].copy_(ids)
            o = torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda")
            g = capture(partial(zc.mla_decode, qs, pool, ind, idb, sm_scale, 1.0, splits, o))
            seq2, indptr2, ids2 = batch(gen, bs, pool_rows, max_len=max_len)
            q2 = torch.randn(bs, heads, CKV + KPE, generator=gen, device="cuda").to(torch.bfloat16)
            qs.copy_(q2)
            ind.copy_(indptr2)
            idb[: ids2.numel()].copy_(ids2)
            g.replay()
            torch.cuda.synchronize()
            r2 = fp32_reference(q2, whole, indptr2, ids2, sm_scale)
            case["graph_replay_max_abs_err_vs_fp32"] = float((o.float() - r2).abs().max())
        except Exception as exc:
            case["error"] = f"{type(exc).__name__}: {exc}"
            case["trace"] = traceback.format_exc()[-1500:]
        cases.append(case)
        print("zc_check", json.dumps({k: v for k, v in case.items() if k != "trace"}), flush=True)


def zero_copy_sweep(out: dict, gen, layers: int = 8) -> None:
    """Tile, warps and grid size of the prototype on three cells; the best (geometric mean) is kept
    in CONFIG for the table that follows, and recorded."""
    import math

    import torch
    from sglops_kernels.fp8_mla_decode import _triton as zc

    pool_rows, heads = 495_000, 16
    sm_scale = 1.0 / (192**0.5)
    pools = [
        (torch.randn(pool_rows, 1, 576, generator=gen, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        for _ in range(layers)
    ]
    cells = [(1, 4096), (4, 4096), (1, 32768), (16, 4096)]
    data = [
        (
            bs,
            ctx,
            *batch(gen, bs, pool_rows, seq_lens=torch.full((bs,), ctx, device="cuda"))[1:],
            torch.randn(bs, heads, 576, generator=gen, device="cuda").to(torch.bfloat16),
        )
        for bs, ctx in cells
    ]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, best = [], None
    for block_n in (32, 64):
        for warps in (4, 8):
            for per_sm in (1, 2, 4):
                zc.CONFIG.update(block_n=block_n, warps=warps, programs_per_sm=per_sm)
                times = []
                for bs, ctx, indptr, ids, q in data:
                    splits = zc.splits_for(bs, heads, ctx, sms)
                    o = torch.empty(bs, heads, CKV, dtype=torch.bfloat16, device="cuda")

                    def fn(q=q, indptr=indptr, ids=ids, splits=splits, o=o):
                        for p in pools:
                            zc.mla_decode(q, p, indptr, ids, sm_scale, 1.0, splits, o)

                    try:
                        times.append(replay_us(capture(fn)) / layers)
                    except Exception as exc:
                        times.append(float("inf"))
                        print("zc_sweep error", block_n, warps, per_sm, repr(exc)[:200], flush=True)
                row = {
                    "block_n": block_n,
                    "warps": warps,
                    "programs_per_sm": per_sm,
                    "us": dict(zip([f"bs{b}_ctx{c}" for b, c in cells], times, strict=True)),
                }
                gm = math.exp(sum(math.log(t) for t in times) / len(times))
                row["geomean_us"] = gm
                rows.append(row)
                print("zc_sweep", json.dumps(row), flush=True)
                if best is None or gm < best["geomean_us"]:
                    best = row
    zc.CONFIG.update(block_n=best["block_n"], warps=best["warps"], programs_per_sm=best["programs_per_sm"])
    out["zero_copy_sweep"] = {"rows": rows, "picked": best}


def derive(r: dict) -> None:
    """The issue's goals, as ratios."""

    def ratio(a, b):
        return r[a] / r[b] if a in r and b in r and r[b] else None

    r["goal_graph_cast_vs_exact_rows"] = ratio("cast_graph_device_count", "cast_exact_rows_host_count")
    r["goal_c_vs_floor"] = ratio("c_graph_gather_cast_mla", "e_bf16_mla_floor")
    r["goal_c_vs_fp8_native"] = ratio("c_graph_gather_cast_mla", "d_fp8_native_mla")
    r["speedup_vs_whole_pool_cast"] = ratio("a_whole_pool_cast_mla", "c_graph_gather_cast_mla")
    r["f_vs_floor"] = ratio("f_zero_copy_fp8_mla", "e_bf16_mla_floor")
    r["f_vs_c"] = ratio("f_zero_copy_fp8_mla", "c_graph_gather_cast_mla")


def prebuild(backends) -> dict:
    """JIT-compile FlashInfer's MLA modules in threads (plan() would build them one by one)."""
    import concurrent.futures as cf

    import torch
    from flashinfer.mla._batch_mla._backends._fa_common import get_batch_mla_module

    t0 = time.perf_counter()
    jobs = [(b, kv) for b in backends for kv in (torch.bfloat16, torch.float8_e4m3fn)]
    errors = {}
    with cf.ThreadPoolExecutor(len(jobs)) as ex:
        futs = {
            ex.submit(
                get_batch_mla_module, b, torch.bfloat16, kv, torch.bfloat16, torch.int32, CKV, KPE, False
            ): (b, str(kv))
            for b, kv in jobs
        }
        for f in cf.as_completed(futs):
            if f.exception() is not None:
                errors[str(futs[f])] = repr(f.exception())[:300]
    return {"seconds": time.perf_counter() - t0, "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--extract", nargs=2, metavar=("VARIANT", "DEST"))
    ap.add_argument("--helpers")
    ap.add_argument("--out", default=".")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--zero-copy", action="store_true", help="row (f): the prototype FP8 MLA decode kernel")
    ap.add_argument("--backends", default="fa3,fa2")
    ap.add_argument("--check-heads", default="16,128")
    ap.add_argument("--check-bs", default="1,4,16")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ctx", default="4096,32768,131072")
    ap.add_argument("--bs", default="1,4,16,64")
    args = ap.parse_args()
    if args.extract:
        extract(*args.extract)
        return
    if not args.helpers:
        ap.error("--helpers FILE (from --extract) is required on the GPU host")

    import flashinfer
    import torch

    ns, ns_torch = helper_spaces(args.helpers)
    backends = args.backends.split(",")
    out: dict = {
        "gpu": torch.cuda.get_device_name(),
        "cc": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "flashinfer": flashinfer.__version__,
        "triton": __import__("triton").__version__,
        "argv": sys.argv[1:],
    }
    out["jit"] = prebuild(backends)
    print("jit", json.dumps(out["jit"]), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    dest = Path(args.out) / "flashinfer_mla.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    out["dest"] = str(dest)
    try:
        if args.check:
            check(
                ns,
                ns_torch,
                backends,
                out,
                gen,
                [int(x) for x in args.check_heads.split(",")],
                [int(x) for x in args.check_bs.split(",")],
            )
            dest.write_text(json.dumps(out, indent=1))
        if args.sweep:
            sweep(out, gen)
            dest.write_text(json.dumps(out, indent=1))
        if args.zero_copy:
            global ZERO_COPY
            ZERO_COPY = True
            zero_copy_check(out, gen)
            zero_copy_sweep(out, gen)
            dest.write_text(json.dumps(out, indent=1))
        if args.table:
            table(
                ns,
                out,
                gen,
                args.layers,
                [int(x) for x in args.ctx.split(",")],
                [int(x) for x in args.bs.split(",")],
                backends[0],
            )
    finally:
        dest.write_text(json.dumps(out, indent=1))
    bad = [c for c in out.get("check", []) if not check_passed(c)]
    print(
        f"done: {len(out.get('check', []))} checks ({len(bad)} failing), {len(out.get('table', []))} table"
        " rows"
    )
    if bad:
        sys.exit(1)


def check_passed(c: dict) -> bool:
    """Every bit-exact flag true (fp8-kv-direct's are accuracy figures, not exactness claims), and
    each variant ran the path it is named after."""
    flat = {**c, **c.get("graph", {})}
    if "error" in c or "error" in c.get("graph", {}):
        return False
    paths = {k: v for k, v in flat.items() if k.endswith("_path")}
    if any(v != ("fused" if "fused" in k else "torch") for k, v in paths.items()):
        return False
    return all(v for k, v in flat.items() if k.endswith("bit_exact") and "fp8" not in k)


if __name__ == "__main__":
    main()
