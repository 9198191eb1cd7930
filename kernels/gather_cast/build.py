"""Build step for gather_cast (Triton): compile and run the kernel once per specialisation.

Triton compiles at first call; doing that here, on the host's GPU, both proves the kernel
compiles for this architecture and fills Triton's cache before SGLang needs it. `--arch` is
the target sglops picked from the host's facts; a GPU that is not that target is an error.
Without CUDA there is nothing to compile: the torch fallback is exercised instead.
"""

import argparse
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, help="sm_90a, sm_120, ... (from the host's facts)")
    arch = ap.parse_args().arch
    try:
        import torch
    except ImportError as exc:
        print(f"error: torch is not importable by {sys.executable}: {exc}", flush=True)
        sys.exit(1)
    from sglops_kernels.gather_cast import backend, cast_live_rows, gather_cast

    print(f"torch {torch.__version__} at {torch.__file__}; target {arch}", flush=True)
    if not torch.cuda.is_available():
        pool = torch.randint(0, 256, (64, 1, 576), dtype=torch.uint8)
        gather_cast(pool, torch.tensor([3, 1]))
        cast_live_rows(pool, torch.tensor([3, 1]), 2)
        print("no CUDA device: nothing to compile; the torch fallback ran", flush=True)
        return
    import triton

    major, minor = torch.cuda.get_device_capability()
    have = f"sm_{major}{minor}"
    if arch.rstrip("a") != have:
        print(f"error: asked to build for {arch} but GPU 0 is {have}", flush=True)
        sys.exit(1)
    pool = torch.randint(0, 256, (4096, 1, 576), dtype=torch.uint8, device="cuda")
    if backend(pool) != "triton":
        print(
            f"error: the Triton path is unavailable on {torch.cuda.get_device_name()} (triton"
            f" {triton.__version__})",
            flush=True,
        )
        sys.exit(1)
    print(f"triton {triton.__version__}; GPU {torch.cuda.get_device_name()} ({have})", flush=True)
    for idx_dtype in (torch.int32, torch.int64):
        idx = torch.randint(0, 4096, (1000,), device="cuda", dtype=idx_dtype)
        for out_dtype, scale in (
            (torch.bfloat16, None),
            (torch.float16, None),
            (torch.float32, None),
            (torch.bfloat16, 0.5),
            (torch.bfloat16, torch.tensor(0.5, device="cuda")),
        ):
            t0 = time.perf_counter()
            gather_cast(pool, idx, out_dtype=out_dtype, scale=scale)
            torch.cuda.synchronize()
            label = "tensor" if isinstance(scale, torch.Tensor) else scale
            print(
                f"compiled+ran idx={idx_dtype} out={out_dtype} scale={label}: "
                f"{(time.perf_counter() - t0) * 1e3:.0f} ms",
                flush=True,
            )
    ids = torch.randint(0, 4096, (5000,), device="cuda", dtype=torch.int32)
    for live_label, live in (
        ("host", 1000),
        ("device", torch.tensor([1000], dtype=torch.int32, device="cuda")),
    ):
        t0 = time.perf_counter()
        cast_live_rows(pool, ids, live)
        torch.cuda.synchronize()
        print(
            f"compiled+ran cast_live_rows live={live_label}: {(time.perf_counter() - t0) * 1e3:.0f} ms",
            flush=True,
        )
    print("build ok", flush=True)


if __name__ == "__main__":
    main()
