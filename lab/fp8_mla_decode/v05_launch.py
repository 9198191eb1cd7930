"""The v0.5 package's launch (per-request splits: the split count from the longest context, grid (head blocks,
splits, batch), Triton merge) of the v0.5 kernel source kept here (fp8_mla_decode_rounds.cu), as a same-run
baseline for the harness of record (benchmarks/gpu_fp8_mla_record.py --baseline). Lab code: not installed.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fp8_mla_decode_rounds.cu"
# v0.5's picks: rows per tile, CTAs per SM, dynamic shared memory (the v0.5 _cuda.kernel_smem)
PICKS = {
    "n64_s2_b2_1b_lz_x2": (64, 2, 2 * 64 * 592 + 2 * 4 * 8 * 32 * 16 + 128 + 4096),
    "n32_s2_b2_tma4": (32, 2, 2 * 32 * 592 + 4 * 16 * 40 * 4 + 64),
}


class V05:
    def __init__(self, arch: str, workdir: Path):
        from sglops_kernels.fp8_mla_decode import _cuda

        num = arch.removeprefix("sm_")
        cubin = workdir / f"v05_{arch}.cubin"
        subprocess.run(
            [
                "nvcc",
                "-cubin",
                f"-gencode=arch=compute_{num},code=sm_{num}",
                "-O3",
                "-o",
                str(cubin),
                str(SOURCE),
            ],
            check=True,
            capture_output=True,
        )
        self.cu = _cuda._driver()
        self.check = _cuda._check
        self.mod = self.check(self.cu.cuModuleLoadData(cubin.read_bytes()))
        self.fn = {}
        for name, (_, _, smem) in PICKS.items():
            fn = self.check(self.cu.cuModuleGetFunction(self.mod, f"fp8_mla_{name}".encode()))
            attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.check(self.cu.cuFuncSetAttribute(fn, attr, smem))
            self.fn[name] = fn

    @staticmethod
    def splits(name: str, batch: int, heads: int, max_len: int, sms: int) -> int:
        """v0.5's splits_for: about two CTAs per SM over the
        grid, splits of at least min_rows_for(max_len) rows."""
        block_n, per_sm, _ = PICKS[name]
        hblocks = -(-heads // 16)
        want = max(1, per_sm * sms // max(1, batch * hblocks))
        min_rows = max(64, min(256, -(-max_len // 64)))
        longest = max(1, -(-max_len // max(min_rows, block_n)))
        return int(min(want, longest, 256))

    def workspace(self, batch, heads, n_splits, device):
        return (
            torch.empty(batch * heads * n_splits * 512, dtype=torch.float32, device=device),
            torch.empty(batch * heads * n_splits, dtype=torch.float32, device=device),
        )

    def __call__(self, name, q, pool, indptr, ids, sm_scale, n_splits, out, ws):
        from sglops_kernels.fp8_mla_decode import _triton

        batch, heads, _ = q.shape
        raw = pool.view(torch.uint8).reshape(-1, 1, 576)
        direct = n_splits == 1
        part, lse = (out, out) if direct else ws
        vp, f32, i32, i64 = ctypes.c_void_p, ctypes.c_float, ctypes.c_int, ctypes.c_longlong
        args = (
            q.data_ptr(),
            raw.data_ptr(),
            indptr.data_ptr(),
            ids.data_ptr(),
            indptr.data_ptr(),
            part.data_ptr(),
            lse.data_ptr(),
            out.data_ptr(),
            float(sm_scale) * 1.4426950408889634,
            1.0,
            heads,
            raw.stride(0),
            q.stride(0),
            q.stride(1),
            out.stride(0),
            out.stride(1),
            n_splits,
            1,
            int(direct),
        )
        types = (vp, vp, vp, vp, vp, vp, vp, vp, f32, f32, i32, i64, i64, i64, i64, i64, i32, i32, i32)
        stream = self.cu.CUstream(torch.cuda.current_stream().cuda_stream)
        self.check(
            self.cu.cuLaunchKernel(
                self.fn[name],
                -(-heads // 16),
                n_splits,
                batch,
                128,
                1,
                1,
                PICKS[name][2],
                stream,
                (args, types),
                0,
            )
        )
        if not direct:
            _triton._merge_kernel[(batch * heads,)](
                part,
                lse,
                out,
                heads,
                out.stride(0),
                out.stride(1),
                n_splits,
                CKV=512,
                SPLITS=_triton.MAX_SPLITS,
                num_warps=4,
            )
        return out
