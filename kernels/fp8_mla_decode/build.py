"""Build step for fp8_mla_decode (Triton, and CUDA C++ where the host has nvcc).

1. Ahead-of-time compile of this family's configurations for `--arch` (aot.py: registers, shared
   memory, spills against the target's limits); a configuration that does not fit is an error.
2. On a CUDA GPU of that architecture: compile and run every specialisation the patch uses (16 and
   128 heads, one split and several, page size 1 and 64) once, which fills Triton's cache before
   SGLang needs it. Without CUDA only step 1 runs.
3. CUDA C++ (sm_90+, when nvcc is found): compile fp8_mla_decode.cu for the arch into the package
   (installed with it), print each kernel's registers / spills / shared memory / CTAs per SM against the
   target's limits; the kernel the package picks for the arch must fit without spilling.
"""

import argparse
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, help="sm_90a, sm_120, ... (from the host's facts)")
    arch = ap.parse_args().arch
    cc = int(arch.removeprefix("sm_").rstrip("a"))
    import aot

    family = "sm120" if cc >= 120 else "sm90"
    from sglops_kernels.fp8_mla_decode import _triton as impl

    bad = []
    for heads, cfg in impl.CONFIGS[family].items():
        for page in (1, 64):
            for direct in (False, True):
                r = aot.compile_one(cc, cfg, page, direct)
                print(
                    f"aot sm_{cc} heads={heads} page={page} direct={direct}: registers {r['registers']},"
                    f" shared {r['shared_bytes']} B, stack {r['stack_bytes']} B, local ops"
                    f" {r['sass_local_ops']}, mma {r['sass_mma']}",
                    flush=True,
                )
                if not r["fits"]:
                    bad.append(f"heads={heads} page={page} direct={direct}")
    if bad:
        print(f"error: over sm_{cc}'s limits: {bad}", flush=True)
        sys.exit(1)
    build_cuda(arch, family)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: ahead-of-time report only", flush=True)
        return
    major, minor = torch.cuda.get_device_capability()
    have = f"sm_{major}{minor}"
    if arch.rstrip("a") != have:
        print(f"error: asked to build for {arch} but GPU 0 is {have}", flush=True)
        sys.exit(1)
    pool = torch.randint(0, 256, (8192, 1, 576), dtype=torch.uint8, device="cuda")
    from sglops_kernels.fp8_mla_decode import implementation

    impl = implementation()
    for heads in (16, 128):
        q = torch.randn(2, heads, 576, device="cuda").to(torch.bfloat16)
        for page in (1, 64):
            if page == 1:
                indptr = torch.tensor([0, 300, 1000], dtype=torch.int32, device="cuda")
                ids = torch.randint(0, 8192, (1000,), dtype=torch.int32, device="cuda")
                kw = {}
            else:
                indptr = torch.tensor([0, 5, 16], dtype=torch.int32, device="cuda")
                ids = torch.randint(0, 128, (16,), dtype=torch.int32, device="cuda")
                kw = {"page_size": 64, "kv_lens": torch.tensor([300, 700], dtype=torch.int32, device="cuda")}
            for splits in (1, 4):
                t0 = time.perf_counter()
                impl.mla_decode(q, pool, indptr, ids, 0.07, 1.0, splits, **kw)
                torch.cuda.synchronize()
                print(
                    f"compiled+ran {impl.__name__.rsplit('.', 1)[-1]} heads={heads} page={page}"
                    f" splits={splits}: {(time.perf_counter() - t0) * 1e3:.0f} ms",
                    flush=True,
                )
    print("build ok", flush=True)


def build_cuda(arch: str, family: str) -> None:
    """Step 3: the CUDA C++ kernel into the package, with
    its resource report; no nvcc: Triton serves alone."""
    from sglops_kernels.fp8_mla_decode import _cuda

    # the host's facts name Hopper sm_90a already
    target = "sm_90a" if arch == "sm_90" else arch
    if target not in _cuda.LIMITS:
        print(f"cuda: no configuration for {arch}; the Triton kernel serves", flush=True)
        return
    try:
        nvcc = _cuda.find_nvcc()
    except RuntimeError as exc:
        print(f"cuda: skipped ({exc}); the Triton kernel serves every head count", flush=True)
        return
    report = _cuda.resources(_cuda.compile_cubin(target, _cuda.packaged_cubin(target), nvcc), target)
    for name, r in report.items():
        print(
            f"cuda {target} {name}: registers {r.get('registers')}, spills {r.get('spill_stores')} B, shared "
            f"{r.get('smem')} B, CTAs/SM {r.get('ctas_per_sm')} (registers {r.get('ctas_by_regs')}, shared "
            f"{r.get('ctas_by_smem')}; wanted {r.get('wanted_ctas')})",
            flush=True,
        )
    picks = _cuda.DEFAULT[family]
    for heads, pick in picks.items():
        r = report.get(pick, {})
        if not r.get("fits") or r.get("ctas_per_sm", 0) < r.get("wanted_ctas", 1):
            print(
                f"error: the CUDA kernel picked for {target} at {heads} heads ({pick}) does not fit: {r}",
                flush=True,
            )
            _cuda.packaged_cubin(target).unlink(missing_ok=True)
            sys.exit(1)
    print(f"cuda {target}: built {_cuda.packaged_cubin(target).name}, picked {picks}", flush=True)


if __name__ == "__main__":
    main()
