"""Round 8's wrong outputs, diagnosed on the GPU: selftest.py's cases for the PIPE 3 kernels, per cubin (the
stage armed by every producer warp, or by warp 4 alone: -DFP8_MLA_PIPE3_ONE_ARM) and with one CTA per SM
forced (dynamic shared memory padded past half an SM) or not. selftest's first failing case failed only in
grids of more than one CTA per SM (NOTES.md "Round 8, timed").

    python3 micro/pipe3_arms.py CUBIN [CUBIN ...]    # from kernels/fp8_mla_decode, on the GPU machine
"""

import json
import os
import sys
from pathlib import Path

KERNELS = tuple(os.environ.get("KERNELS", "n64_s2_b2_wg,n64_s2_b2_wg_lz").split(","))
# two CTAs no longer fit one SM's 228 KB
PAD = 120_000


def main(cubins: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ["SGLOPS_FP8_MLA_VARIANTS"] = "1"
    import selftest
    from sglops_kernels.fp8_mla_decode import _cuda

    base_smem = _cuda.kernel_smem
    rows = []
    for cubin in cubins:
        for pad in (0, PAD):
            os.environ["SGLOPS_FP8_MLA_CUBIN"] = cubin
            _cuda._MODULES.clear()
            _cuda.kernel_smem = lambda name, pad=pad: base_smem(name) + pad
            for name in KERNELS:
                res = {"cubin": Path(cubin).name, "one_cta_per_sm": bool(pad), "kernel": name}
                try:
                    selftest.run_checks(f"cuda {name}", _cuda.config_of(name))
                    res["ok"] = True
                # selftest printed its `error:` line
                except SystemExit:
                    res["ok"] = False
                rows.append(res)
                print(json.dumps(res), flush=True)
    _cuda.kernel_smem = base_smem
    return 0 if all(r["ok"] for r in rows if r["cubin"].startswith("arms")) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
