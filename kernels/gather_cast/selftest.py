"""Self-test run on the host by `inv build-kernel` before anything is installed.

On a CUDA GPU: the fused kernel must be the path taken and be bit-for-bit equal to torch's
`pool[idx].to(dtype)` (and the scaled formula) on random data, for many pools and index sets,
empty and single-row included. Without CUDA: the torch fallback against the same formula.
Exits non-zero at the first mismatch, with one `error:` line saying where.
"""

import os
import sys

import torch
from sglops_kernels.gather_cast import backend, gather_cast

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
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(INT[a.element_size()]),
                                                                      b.view(INT[b.element_size()]))


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
    if dev.type == "cuda":  # the CPU only checks the fallback's wiring: keep it quick
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
                    for out_dtype, scale in ((torch.bfloat16, None), (torch.float16, None), (torch.float32, None),
                                             (torch.bfloat16, 0.37), (torch.bfloat16, torch.tensor(1.7))):
                        if isinstance(scale, torch.Tensor):
                            scale = scale.to(dev)
                        poison(dev, idx.numel() * raw[0].numel() * 4)
                        got = gather_cast(pool, idx, out_dtype=out_dtype, scale=scale)
                        ref = reference(pool, idx, out_dtype, scale)
                        cases += 1
                        if not same_bits(got, ref):
                            where = f"tokens={tokens} row={row} idx={set_name}/{idx_dtype} pool={pool_name} " \
                                    f"out={out_dtype} scale={scale}"
                            if got.shape != ref.shape:
                                fail(f"shape {tuple(got.shape)} != {tuple(ref.shape)} ({where})")
                            bad = (got.view(INT[got.element_size()]) != ref.view(INT[ref.element_size()]))
                            nan_only = bool(torch.isnan(ref[bad].float()).all())
                            bits = sorted({hex(v & 0xFFFFFFFF) for v in got.view(INT[got.element_size()])[bad][:64]
                                           .tolist()})[:4] if nan_only else ""
                            fail(f"{int(bad.sum())} elements differ{f' (NaN bits only, got {bits})' if nan_only else ''}"
                                 f" ({where})")
    if FAILURES:
        sys.exit(1)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"selftest ok: {cases} cases bit-for-bit on {dev.type} ({want} path, {name})", flush=True)


if __name__ == "__main__":
    main()
