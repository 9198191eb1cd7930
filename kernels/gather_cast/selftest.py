"""Self-test run on the host by `inv build-kernel` before anything is installed.

On a CUDA GPU: the fused kernel must be the path taken and be bit-for-bit equal to torch's
`pool[idx].to(dtype)` (and the scaled formula) on random data, for many pools and index sets,
empty and single-row included. cast_live_rows (what the patch uses): the live count read from
the device (and from the host), stale index tails, repeated and out-of-range ids, the whole-pool
switch at n >= pool rows, and a CUDA graph captured once and replayed with its index buffer and
live count rewritten in place: rows ids[:n] bit-exact, every other row untouched. Without CUDA:
the torch fallback against the same formula.
Exits non-zero at the first mismatch, with one `error:` line saying where.
"""

import os
import sys

import torch
from sglops_kernels.gather_cast import backend, cast_live_rows, gather_cast

FP8 = torch.float8_e4m3fn
INT = {2: torch.int16, 4: torch.int32, 1: torch.uint8}


FAILURES: list[str] = []


def fail(msg: str) -> None:
    """Stop at the first failure (SELFTEST_KEEP_GOING=1: report them all, then exit 1)."""
    print(f"error: {msg}", flush=True)
    FAILURES.append(msg)
    if not os.environ.get("SELFTEST_KEEP_GOING"):
        sys.exit(1)


def reference(pool, idx, out_dtype, scale):
    rows = pool.view(FP8)[idx]
    return rows.to(out_dtype) if scale is None else (rows.to(torch.float32) * scale).to(out_dtype)


def same_bits(a, b) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.view(INT[a.element_size()]), b.view(INT[b.element_size()]))
    )


def poison(dev, nbytes):
    """Leave a freed block full of 0x5a so an output the kernel fails to write shows up."""
    if dev.type == "cuda":
        torch.full((max(nbytes, 1),), 0x5A, dtype=torch.uint8, device=dev)


def main() -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device="cpu").manual_seed(int(os.environ.get("SEED", "8")))
    want = "triton" if dev.type == "cuda" and os.environ.get("SGLOPS_GATHER_CAST") != "torch" else "torch"
    cases = 0
    shapes = [(1, (1, 576)), (7, (1, 576)), (333, (576,)), (65, (1, 520))]
    # the CPU only checks the fallback's wiring: keep it quick
    if dev.type == "cuda":
        shapes += [(4097, (1, 576)), (70001, (1, 576)), (129, (1, 512))]
    for tokens, row in shapes:
        raw = torch.randint(0, 256, (tokens, *row), dtype=torch.uint8, generator=gen).to(dev)
        normal = (torch.randn(tokens, *row, generator=gen) * 0.5).to(FP8).to(dev)
        got_backend = backend(raw)
        if got_backend != want:
            fail(f"path taken is {got_backend}, expected {want} on {dev}")
        sets = {
            "empty": torch.empty(0, dtype=torch.int64),
            "first": torch.tensor([0]),
            "last": torch.tensor([tokens - 1]),
            "random": torch.randint(0, tokens, (min(3 * tokens, 5000),), generator=gen),
            "all": torch.arange(tokens),
            "reversed": torch.arange(tokens - 1, -1, -1),
            "2d": torch.randint(0, tokens, (3, 5), generator=gen),
        }
        for set_name, idx_cpu in sets.items():
            for idx_dtype in (torch.int32, torch.int64):
                idx = idx_cpu.to(idx_dtype).to(dev)
                for pool_name, pool in (("bytes", raw), ("fp8", raw.view(FP8)), ("randn", normal)):
                    for out_dtype, scale in (
                        (torch.bfloat16, None),
                        (torch.float16, None),
                        (torch.float32, None),
                        (torch.bfloat16, 0.37),
                        (torch.bfloat16, torch.tensor(1.7)),
                    ):
                        if isinstance(scale, torch.Tensor):
                            scale = scale.to(dev)
                        poison(dev, idx.numel() * raw[0].numel() * 4)
                        got = gather_cast(pool, idx, out_dtype=out_dtype, scale=scale)
                        ref = reference(pool, idx, out_dtype, scale)
                        cases += 1
                        if not same_bits(got, ref):
                            where = (
                                f"tokens={tokens} row={row} idx={set_name}/{idx_dtype} pool={pool_name} "
                                f"out={out_dtype} scale={scale}"
                            )
                            if got.shape != ref.shape:
                                fail(f"shape {tuple(got.shape)} != {tuple(ref.shape)} ({where})")
                            bad = got.view(INT[got.element_size()]) != ref.view(INT[ref.element_size()])
                            nan_only = bool(torch.isnan(ref[bad].float()).all())
                            bits = (
                                sorted(
                                    {
                                        hex(v & 0xFFFFFFFF)
                                        for v in got.view(INT[got.element_size()])[bad][:64].tolist()
                                    }
                                )[:4]
                                if nan_only
                                else ""
                            )
                            fail(
                                f"{int(bad.sum())} elements"
                                f" differ{f' (NaN bits only, got {bits})' if nan_only else ''} ({where})"
                            )
    cases += live_rows_cases(dev, gen, want)
    if FAILURES:
        sys.exit(1)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"selftest ok: {cases} cases bit-for-bit on {dev.type} ({want} path, {name})", flush=True)


# int16 bits of a bf16 NaN-free pattern (0xcfc7) no cast of e4m3 produces
POISON = -12345


def check_live(pool, out, ids_cpu, n, where, exact_untouched) -> None:
    """Rows ids[:n] (all rows once n >= pool rows) bit-exact; with the Triton path, every other
    row still holds the poison (nothing beyond the live rows was written)."""
    rows_total = pool.shape[0]
    live = ids_cpu[:n].long()
    live = live[(live >= 0) & (live < rows_total)]
    if n >= rows_total:
        live = torch.arange(rows_total)
    # on the pool's device: NaN bits as that device's torch writes them
    ref = pool.view(FP8).to(torch.bfloat16).cpu()
    got = out.cpu()
    if not torch.equal(got[live].view(torch.int16), ref[live].view(torch.int16)):
        fail(f"live rows differ ({where})")
        return
    if exact_untouched:
        mask = torch.ones(rows_total, dtype=torch.bool)
        mask[live] = False
        if not bool((got[mask].view(torch.int16) == POISON).all()):
            fail(f"rows outside ids[:n] were written ({where})")


def live_rows_cases(dev, gen, want) -> int:
    cases = 0
    triton_path = want == "triton"
    for rows_total in (1, 97, 4099) + ((70001,) if dev.type == "cuda" else ()):
        pool = torch.randint(0, 256, (rows_total, 1, 576), dtype=torch.uint8, generator=gen).to(dev)
        cap = 3 * rows_total + 5
        # repeats: shared prefixes
        ids_cpu = torch.randint(0, rows_total, (cap,), generator=gen, dtype=torch.int32)
        ids_cpu[1::7] = torch.randint(0, rows_total, (len(ids_cpu[1::7]),), generator=gen, dtype=torch.int32)
        for n in sorted({0, 1, min(5, rows_total), rows_total // 3, rows_total - 1, rows_total, cap}):
            for live_kind in ("host", "device32", "device64"):
                ids = ids_cpu.to(dev)
                out = torch.full((rows_total, 1, 576), POISON, dtype=torch.int16, device=dev).view(
                    torch.bfloat16
                )
                live = (
                    n
                    if live_kind == "host"
                    else torch.tensor(
                        [n], dtype=torch.int32 if live_kind == "device32" else torch.int64, device=dev
                    )
                )
                got = cast_live_rows(pool, ids, live, cap=cap, out=out)
                cases += 1
                if got.data_ptr() != out.data_ptr():
                    fail("cast_live_rows did not write into the out= buffer")
                # the torch path casts a static superset (ids[:cap]) for a device count: exact rows only
                check_live(
                    pool,
                    got,
                    ids_cpu,
                    n,
                    f"P={rows_total} n={n} live={live_kind}",
                    triton_path or live_kind == "host",
                )
        # out-of-range ids are skipped by the kernel (no fault); in-range ones still land
        if triton_path and rows_total > 2:
            bad = torch.tensor([0, -1, rows_total, rows_total + 100, 1], dtype=torch.int32)
            out = torch.full((rows_total, 1, 576), POISON, dtype=torch.int16, device=dev).view(torch.bfloat16)
            cast_live_rows(pool, bad.to(dev), torch.tensor([5], dtype=torch.int32, device=dev), out=out)
            check_live(pool, out, torch.tensor([0, 1]), 2, f"P={rows_total} out-of-range ids", True)
            cases += 1
    if dev.type == "cuda":
        cases += graph_replays(dev, gen, triton_path)
    return cases


def graph_replays(dev, gen, triton_path) -> int:
    """Capture once with a device live count, then replay with new batches written in place."""
    rows_total, cap = 50_000, 40_000
    pool = torch.randint(0, 256, (rows_total, 1, 576), dtype=torch.uint8, generator=gen).to(dev)
    ids = torch.zeros(cap, dtype=torch.int32, device=dev)
    live = torch.zeros(1, dtype=torch.int32, device=dev)
    out = torch.full((rows_total, 1, 576), POISON, dtype=torch.int16, device=dev).view(torch.bfloat16)
    # compile outside the capture
    cast_live_rows(pool, ids, live, cap=cap, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cast_live_rows(pool, ids, live, cap=cap, out=out)
    cases = 0
    for n in (7, 33_333, 1, 40_000, 0, 12_345):
        fresh = torch.randint(0, rows_total, (cap,), generator=gen, dtype=torch.int32)
        # the whole buffer: entries past n are a stale tail
        ids.copy_(fresh.to(dev))
        live.fill_(n)
        out.view(torch.int16).fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        check_live(pool, out, fresh, n, f"graph replay n={n}", triton_path)
        cases += 1
    return cases


if __name__ == "__main__":
    main()
