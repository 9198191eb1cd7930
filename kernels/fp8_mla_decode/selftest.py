"""Self-test run on the host by `inv build-kernel` before anything is installed (CUDA only; without
CUDA: Triton's interpreter must be used instead, see tests/test_fp8_mla_decode.py).

Against fp32 attention over the dequantised rows (`reference`): 16 and 128 heads, random lengths
(one empty request), page size 1 and 64, one split and several, a stale tail of wild ids after
kv_indptr's range, outputs poisoned with NaN first; and a CUDA graph captured once and replayed with
new lengths, ids and q written in place. CUDA: ragged batches under the length-aware schedule (a long tail
among short requests, uniform-random lengths, runs of empty requests, more requests than a CTA has threads,
grids of a few CTAs so that one CTA reads many requests and one request spans many CTAs), each over a pool
whose every row that must not be read is NaN, and graph replays of changing ragged mixes. Bound: max abs error
<= 2^-7 x max |ref| + 1e-3 (BF16 out and BF16 MMA operands; FlashInfer's BF16 path measures the same order,
BENCH.md). Exits non-zero at the first failure with one `error:` line.
SGLOPS_FP8_MLA_KERNELS=name,name (CUDA kernels of `_cuda.KERNELS`) runs the same cases with each named kernel
instead (the sm120 pick on an H200 as a proxy, say).
"""

import os
import sys

import torch
from sglops_kernels.fp8_mla_decode import mla_decode, reference, splits_for, workspace


def fail(msg: str) -> None:
    print(f"error: {msg}", flush=True)
    sys.exit(1)


def batch(gen, bs, rows, max_len, dev):
    lens = torch.randint(1, max_len + 1, (bs,), generator=gen)
    lens[0] = 0 if bs > 1 else lens[0]
    indptr = torch.zeros(bs + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(lens, 0)
    ids = torch.randint(0, rows, (int(indptr[-1]),), generator=gen, dtype=torch.int32)
    buf = torch.full((int(indptr[-1]) + 4096,), 2**30, dtype=torch.int32)
    buf[: ids.numel()] = ids
    return indptr.to(dev), buf.to(dev), ids


def check(label, got, ref):
    if torch.isnan(got.float()).any():
        fail(f"{label}: outputs left unwritten")
    err = float((got.float() - ref).abs().max())
    bound = float(ref.abs().max()) * 2**-7 + 1e-3
    if err > bound:
        fail(f"{label}: max abs err {err:.3g} > {bound:.3g}")
    return err


def main() -> None:
    if not torch.cuda.is_available():
        print(
            "no CUDA device: nothing to test here (tests/test_fp8_mla_decode.py runs the interpreter)",
            flush=True,
        )
        return
    from sglops_kernels.fp8_mla_decode import _cuda, implementation

    named = [n for n in os.environ.get("SGLOPS_FP8_MLA_KERNELS", "").split(",") if n]
    if named:
        unknown = [n for n in named if n not in _cuda.KERNELS]
        if unknown:
            fail(f"unknown CUDA kernel(s) {','.join(unknown)}; known: {','.join(_cuda.KERNELS)}")
        for name in named:
            run_checks(f"cuda {name}", _cuda.config_of(name))
        return
    # every implementation this GPU can run, each over every
    # case (16 and 128 heads alike), then the default pick
    impls = ["cuda", "triton"] if _cuda.available() else ["triton"]
    for impl in impls:
        os.environ["SGLOPS_FP8_MLA_IMPL"] = impl
        # PDL: SGLOPS_FP8_MLA_PDL=1
        run_checks(impl + ("+pdl" if impl == "cuda" and _cuda.PDL else ""))
    os.environ.pop("SGLOPS_FP8_MLA_IMPL")
    print("picked:", implementation().__name__.rsplit(".", 1)[-1], flush=True)


def run_checks(impl: str, config: dict | None = None) -> None:
    """All cases with the implementation the environment picks, or with the CUDA kernel `config` names."""
    from sglops_kernels.fp8_mla_decode import _cuda

    def cfg(max_len: int) -> dict | None:
        return None if config is None else dict(config, min_rows=_cuda.min_rows_for(max_len))

    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(11)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = 200_000
    pool = (torch.randn(rows, 1, 576, generator=gen) * 0.5).to(torch.float8_e4m3fn).to(dev)
    cases, worst = 0, 0.0
    # 8: fewer heads than one 16-head block (64-head models at TP 8)
    for heads in (8, 16, 128):
        for bs, max_len in ((1, 5000), (3, 2000), (16, 3000)):
            q = torch.randn(bs, heads, 576, generator=gen).to(torch.bfloat16).to(dev)
            indptr, buf, ids = batch(gen, bs, rows, max_len, dev)
            ref = reference(q, pool, indptr.cpu(), ids, 0.0721, 1.0)
            for splits in (1, 3, splits_for(bs, heads, max_len, sms, cfg(max_len))):
                out = torch.full((bs, heads, 512), float("nan"), dtype=torch.bfloat16, device=dev)
                mla_decode(q, pool, indptr, buf, 0.0721, 1.0, splits, out, config=cfg(max_len))
                torch.cuda.synchronize()
                worst = max(worst, check(f"heads={heads} bs={bs} splits={splits}", out, ref))
                cases += 1
            # pages of 64 over the same pool
            pages = rows // 64
            lens = (indptr[1:] - indptr[:-1]).cpu()
            npg = (lens + 63) // 64
            pind = torch.zeros(bs + 1, dtype=torch.int32)
            pind[1:] = torch.cumsum(npg, 0)
            pids = torch.randperm(pages, generator=gen)[: int(pind[-1])].to(torch.int32)
            pp = pool[: pages * 64].view(pages, 64, 576)
            pref = reference(q, pp, pind, pids, 0.0721, 1.0, page_size=64, kv_lens=lens)
            out = torch.full((bs, heads, 512), float("nan"), dtype=torch.bfloat16, device=dev)
            mla_decode(
                q,
                pp,
                pind.to(dev),
                pids.to(dev),
                0.0721,
                1.0,
                3,
                out,
                page_size=64,
                kv_lens=lens.to(torch.int32).to(dev),
                config=cfg(max_len),
            )
            torch.cuda.synchronize()
            worst = max(worst, check(f"page64 heads={heads} bs={bs}", out, pref))
            cases += 1
    # a graph captured once, replayed with new batches written in place
    bs, heads, max_len = 4, 16, 4000
    splits = splits_for(bs, heads, max_len, sms, cfg(max_len))
    q = torch.zeros(bs, heads, 576, dtype=torch.bfloat16, device=dev)
    indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
    buf = torch.zeros(bs * max_len + 4096, dtype=torch.int32, device=dev)
    out = torch.empty(bs, heads, 512, dtype=torch.bfloat16, device=dev)
    ws = workspace(bs, heads, splits, dev)
    mla_decode(q, pool, indptr, buf, 0.0721, 1.0, splits, out, ws, config=cfg(max_len))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        mla_decode(q, pool, indptr, buf, 0.0721, 1.0, splits, out, ws, config=cfg(max_len))
    for _ in range(4):
        ind, b2, ids = batch(gen, bs, rows, max_len, dev)
        qv = torch.randn(bs, heads, 576, generator=gen).to(torch.bfloat16).to(dev)
        q.copy_(qv)
        indptr.copy_(ind)
        buf.fill_(2**30)
        buf[: ids.numel()].copy_(ids.to(dev))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        worst = max(worst, check("graph replay", out, reference(qv, pool, ind.cpu(), ids, 0.0721, 1.0)))
        cases += 1
    if impl.startswith("cuda"):
        c2, w2 = ragged_checks(config)
        cases, worst = cases + c2, max(worst, w2)
    print(
        f"selftest ok ({impl}): {cases} cases on {torch.cuda.get_device_name()} (max abs err {worst:.3g})",
        flush=True,
    )


def poisoned_pool(gen, lens, dev, spare=3):
    """A pool of distinct live rows (a random permutation)
    with every other row NaN (e4m3 0x7f), and the ids."""
    live = int(sum(lens))
    rows = live * spare + 64
    pool = torch.full((rows, 1, 576), 0x7F, dtype=torch.uint8)
    ids = torch.randperm(rows, generator=gen)[:live].to(torch.int32)
    pool[ids.long()] = (
        (torch.randn(live, 1, 576, generator=gen) * 0.5).to(torch.float8_e4m3fn).view(torch.uint8)
    )
    return pool.to(dev).view(torch.float8_e4m3fn), ids


def ragged_checks(config):
    """The length-aware schedule over ragged mixes, NaN in every row not to be read and a wild index tail."""
    from sglops_kernels.fp8_mla_decode import _cuda

    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(23)
    name = (config or _cuda.config_for(16))["kernel"]
    mixes = {
        "long tail": [7] * 20 + [30_000, 1] + [40] * 40 + [18_000] + [3] * 10,
        "uniform random": torch.randint(1, 9_000, (24,), generator=gen).tolist(),
        "empty runs": [0, 0, 500, 0, 0, 0, 2_000, 0, 64, 63, 65, 0, 0],
        "150 short": torch.randint(0, 300, (150,), generator=gen).tolist(),
        "one long": [70_000],
    }
    cases, worst = 0, 0.0
    for label, lens in mixes.items():
        pool, ids = poisoned_pool(gen, lens, dev)
        bs = len(lens)
        indptr = torch.zeros(bs + 1, dtype=torch.int32)
        indptr[1:] = torch.cumsum(torch.tensor(lens), 0)
        buf = torch.full((ids.numel() + 4096,), 2**30, dtype=torch.int32)
        buf[: ids.numel()] = ids
        for heads in (16, 128):
            q = torch.randn(bs, heads, 576, generator=gen).to(torch.bfloat16).to(dev)
            ref = reference(q, pool, indptr, ids, 0.0721, 1.0)
            for ctas, min_rows, ovh in (
                (None, None, None),
                (7, 64, 0),
                (1, 64, 50),
                (300, 32, 200),
                (None, None, 97),
            ):
                cfg = dict(_cuda.config_of(name), ctas=ctas)
                out = torch.full((bs, heads, 512), float("nan"), dtype=torch.bfloat16, device=dev)
                _cuda.mla_decode(
                    q,
                    pool,
                    indptr.to(dev),
                    buf.to(dev),
                    0.0721,
                    1.0,
                    1,
                    out,
                    config=cfg,
                    min_rows=min_rows,
                    ovh=ovh,
                )
                torch.cuda.synchronize()
                worst = max(
                    worst, check(f"{label} heads={heads} ctas={ctas} min_rows={min_rows} ovh={ovh}", out, ref)
                )
                cases += 1
    # pages of 64 with ragged token counts (the last page of
    # each request partly beyond its length), NaN elsewhere
    lens = [5, 0, 4_000, 64, 65, 1_000, 0, 129]
    npg = [(n + 63) // 64 for n in lens]
    pages = sum(npg) * 2 + 4
    pool = torch.full((pages, 64, 576), 0x7F, dtype=torch.uint8)
    pids = torch.randperm(pages, generator=gen)[: sum(npg)].to(torch.int32)
    pool[pids.long()] = (
        (torch.randn(len(pids), 64, 576, generator=gen) * 0.5).to(torch.float8_e4m3fn).view(torch.uint8)
    )
    pool = pool.to(dev).view(torch.float8_e4m3fn)
    pind = torch.zeros(len(lens) + 1, dtype=torch.int32)
    pind[1:] = torch.cumsum(torch.tensor(npg), 0)
    klen = torch.tensor(lens, dtype=torch.int32)
    q = torch.randn(len(lens), 16, 576, generator=gen).to(torch.bfloat16).to(dev)
    ref = reference(q, pool, pind, pids, 0.0721, 1.0, page_size=64, kv_lens=klen)
    for ctas, ovh in ((None, None), (5, 0), (9, 70)):
        out = torch.full((len(lens), 16, 512), float("nan"), dtype=torch.bfloat16, device=dev)
        _cuda.mla_decode(
            q,
            pool,
            pind.to(dev),
            pids.to(dev),
            0.0721,
            1.0,
            1,
            out,
            page_size=64,
            kv_lens=klen.to(dev),
            config=dict(_cuda.config_of(name), ctas=ctas),
            min_rows=64,
            ovh=ovh,
        )
        torch.cuda.synchronize()
        worst = max(worst, check(f"page64 ragged ctas={ctas}", out, ref))
        cases += 1
    # one graph, replayed over changing ragged mixes (same batch size, lengths and ids rewritten in place)
    bs, heads, most = 12, 16, 20_000
    pool, _ = poisoned_pool(gen, [most * bs], dev, spare=2)
    rows = pool.shape[0]
    nan_free = (pool.view(torch.uint8)[:, 0, 0] != 0x7F).nonzero().flatten().to(torch.int32).cpu()
    q = torch.zeros(bs, heads, 576, dtype=torch.bfloat16, device=dev)
    indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
    buf = torch.full((bs * most + 4096,), 2**30, dtype=torch.int32, device=dev)
    out = torch.empty(bs, heads, 512, dtype=torch.bfloat16, device=dev)
    ws = workspace(bs, heads, 1, dev)
    cfg = _cuda.config_of(name)
    _cuda.mla_decode(q, pool, indptr, buf, 0.0721, 1.0, 1, out, ws, config=cfg)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _cuda.mla_decode(q, pool, indptr, buf, 0.0721, 1.0, 1, out, ws, config=cfg)
    for r in range(4):
        lens = torch.randint(0, most // (1 + 9 * (r % 2)), (bs,), generator=gen)
        lens[r] = most if r < 2 else lens[r]
        ind = torch.zeros(bs + 1, dtype=torch.int32)
        ind[1:] = torch.cumsum(lens, 0)
        total = int(ind[-1])
        ids = nan_free[torch.randperm(nan_free.numel(), generator=gen)[:total]]
        if ids.numel() < total:
            fail(f"graph ragged: pool of {rows} rows too small")
        qv = torch.randn(bs, heads, 576, generator=gen).to(torch.bfloat16).to(dev)
        q.copy_(qv)
        indptr.copy_(ind.to(dev))
        buf.fill_(2**30)
        buf[:total].copy_(ids.to(dev))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        worst = max(worst, check(f"graph ragged replay {r}", out, reference(qv, pool, ind, ids, 0.0721, 1.0)))
        cases += 1
    return cases, worst


if __name__ == "__main__":
    main()
