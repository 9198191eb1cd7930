"""The CUDA C++ FP8 MLA decode (fp8_mla_decode.cu beside this file): built with the host's nvcc for its SM,
loaded and launched through the CUDA driver API (cuda-python, which SGLang installs), on PyTorch's current
stream so that a CUDA graph captures it like any PyTorch kernel.

Why CUDA beside the Triton kernel: Triton converted each FP8 byte three times (twice through a scalar
f16 -> bf16 step), staged the transposed operand one byte at a time and left the tile load synchronous
(NOTES.md). Here each byte is converted once per product by one packed instruction, every fragment read is
a conflict-free 4- or 16-byte shared load of the FP8 row, and rows arrive by TMA bulk copies into a ring.
The split partials use the Triton kernel's layout, so its merge kernel combines them.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import torch

# DEFAULT, SMALL_BATCH: the package's API; SHIPPED: the kernels every cubin holds
from ._picks import DEFAULT, SHIPPED, SMALL_BATCH, kernel_name  # noqa: F401

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fp8_mla_decode.cu"
# the padded shared-memory row of the .cu file
ROW_BYTES = 592
# kernel name -> rows per tile, ring depth, CTAs per SM its registers are bounded for (the .cu's
# DEFINE_DECODE). Only the kernels the package launches; the research variants and their record:
# lab/fp8_mla_decode/.
KERNELS = {
    # sm90: one CTA barrier per tile, lazy rescale, each warp's softmax on its rows
    "n64_s2_b2_1b_lz_x2": (64, 2, 2),
    # sm120: two CTAs fit its ~100 KB of shared memory, no register cap to spill
    "n32_s2_b2_tma4": (32, 2, 2),
}
# the split merge (fp8_mla_merge), in every cubin
MERGE = "merge"
THREADS = 128
# Launch the merge with programmatic dependent launch (sm_90+): its CTAs start while the decode runs and wait
# in griddepcontrol.wait, so the kernel boundary could cost less at small batches. Opt-in
# (SGLOPS_FP8_MLA_PDL=1): on the H100 it gained 2-3.5% where the merge is short and lost 5-10% where it is
# long (1 x 32K; BENCH.md v0.6.1).
PDL = os.environ.get("SGLOPS_FP8_MLA_PDL") == "1"
# the .cu's XCH area: row maxima / sums and P fragments (_x2)
XCH_BYTES = 4096


def smem_bytes(block_n: int, stages: int, pipe: int = 0) -> int:
    """Dynamic shared memory of one CTA: the ring of padded rows, the partial S tiles (pipe 0: one padded
    [4 warps][16][block_n + 8] fp32 buffer; pipe 1: two [4 warps][block_n / 8][32 lanes] float4 buffers) and
    the stages' mbarriers (64 B; pipe 1: 128 B)."""
    sx = 4 * 16 * (block_n + 8) * 4 + 64 if pipe == 0 else 2 * 4 * (block_n // 8) * 32 * 16 + 128
    return stages * block_n * ROW_BYTES + sx


def pipe_of(name: str) -> int:
    """How the kernel's warps meet per tile (the .cu's PIPE): 0 two CTA barriers, 1 one (_1b)."""
    return 1 if "_1b" in name else 0


def threads_of(name: str) -> int:
    return THREADS


def xch_of(name: str) -> int:
    """The .cu's XCH: how the partial S tiles are combined (0 all-reduce, 2 each warp's own rows)."""
    m = re.search(r"_x(\d)$", name)
    return int(m.group(1)) if m else 0


def kernel_smem(name: str) -> int:
    block_n, stages, _ = KERNELS[name]
    return smem_bytes(block_n, stages, pipe_of(name)) + (XCH_BYTES if xch_of(name) else 0)


def ctas_for(name: str, sm_count: int, heads: int = 16, batch: int = 0) -> int:
    """The decode grid's CTAs per head block (static; the schedule inside the kernel shares any batch's rows
    among them): one wave over the head blocks (the kernel's CTAs per SM on every SM, divided among the blocks
    of 16 heads), and at least one per request, so that the per-request form of the schedule can give every
    request a CTA of its own (128 heads x 64 requests x 8K: 512 CTAs reading a request each, no merge, as v0.5
    did)."""
    return max(KERNELS[name][2] * sm_count // -(-heads // 16), batch, 1)


def arch_of(cc: tuple[int, int]) -> str:
    """The nvcc target for a compute capability: Hopper gets sm_90a (this kernel uses only mma.sync, but the
    'a' target is what the rest of the host's kernels are built for)."""
    major, minor = cc
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def find_nvcc() -> str:
    """nvcc from PATH, else CUDA_HOME's (FlashInfer's JIT needs the same toolkit on a serving host)."""
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cand = Path(home) / "bin" / "nvcc"
    if cand.exists():
        return str(cand)
    raise RuntimeError("nvcc not found (PATH, CUDA_HOME): the CUDA FP8 MLA kernel is built on the host")


def compile_cubin(arch: str, dest: Path, nvcc: str | None = None) -> str:
    """nvcc the .cu into `dest` for `arch` (sm_90a, sm_120, ...), atomically; returns ptxas's -v report."""
    num = arch.removeprefix("sm_")
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    proc = subprocess.run(
        [
            nvcc or find_nvcc(),
            "-cubin",
            f"-gencode=arch=compute_{num},code=sm_{num}",
            "-O3",
            "-Xptxas",
            "-v",
            "-o",
            str(tmp),
            str(SOURCE),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"nvcc failed for {arch}: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    os.replace(tmp, dest)
    return proc.stderr


def build(arch: str, dest_dir: Path, nvcc: str | None = None) -> tuple[Path, str]:
    """A cubin for `arch` in a cache folder, keyed by the source's hash; returns it and ptxas's report."""
    tag = hashlib.sha256(SOURCE.read_bytes() + arch.encode()).hexdigest()[:16]
    dest_dir.mkdir(parents=True, exist_ok=True)
    cubin = dest_dir / f"fp8_mla_decode_{arch}_{tag}.cubin"
    report = cubin.with_suffix(".ptxas.txt")
    if cubin.exists() and report.exists():
        return cubin, report.read_text()
    text = compile_cubin(arch, cubin, nvcc)
    report.write_text(text)
    return cubin, text


# per target: shared memory per SM and per block (bytes), per-CTA reservation, registers per SM
LIMITS = {
    "sm_90a": {"smem_sm": 233472, "smem_block": 232448, "reserved": 1024, "regs_sm": 65536},
    "sm_120": {"smem_sm": 102400, "smem_block": 101376, "reserved": 1024, "regs_sm": 65536},
}


def resources(ptxas_text: str, arch: str) -> dict[str, dict]:
    """Per kernel of the .cu: registers, spills, stack (ptxas -v), dynamic shared memory, and how many CTAs
    fit on one SM of `arch` by registers and by shared memory. Registers are held per quarter of the SM (16 K
    each, warps dealt round-robin), so a 5-warp CTA fits by the fullest quarter: two such CTAs put 3 warps on
    one quarter (ptxas caps a 160-thread kernel bounded for 2 CTAs at 168 registers, not 204)."""
    lim = LIMITS[arch]
    out: dict[str, dict] = {}
    current = None
    for line in ptxas_text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1).removeprefix("fp8_mla_")
            out[current] = {}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[current].update(
                stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3))
            )
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["registers"] = int(m.group(1))
    for name, r in out.items():
        if name not in KERNELS or "registers" not in r:
            continue
        smem = kernel_smem(name)
        per_warp, warps = (r["registers"] + 7) // 8 * 8 * 32, threads_of(name) // 32
        by_regs = 0
        while -(-(by_regs + 1) * warps // 4) * per_warp <= lim["regs_sm"] // 4:
            by_regs += 1
        r.update(
            smem=smem,
            ctas_by_regs=by_regs,
            ctas_by_smem=lim["smem_sm"] // (smem + lim["reserved"]) if fits_block(name, arch) else 0,
            wanted_ctas=KERNELS[name][2],
        )
        r["fits"] = r.get("spill_stores", 0) == 0 and r["ctas_by_smem"] >= 1
        r["ctas_per_sm"] = min(r["ctas_by_regs"], r["ctas_by_smem"])
    return out


def _driver():
    try:
        from cuda.bindings import driver
    # cuda-python < 12.6
    except ImportError:
        from cuda import cuda as driver
    return driver


def _check(res):
    err, *rest = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def family_of(arch: str) -> str:
    """The picks' family of an nvcc target (_picks.DEFAULT's keys)."""
    return "sm120" if arch.startswith("sm_12") else "sm90"


def fits_block(name: str, arch: str) -> bool:
    """Whether kernel `name`'s dynamic shared memory fits one block of `arch` (unknown targets: assumed to).
    Every cubin holds both families' picks, and the sm90 pick's 112,768 B exceed sm_120's 101,376: raising
    that kernel's limit fails on an SM120 GPU, so it is left unloaded there instead of failing the whole
    module."""
    limit = LIMITS.get(arch, {}).get("smem_block")
    return limit is None or kernel_smem(name) <= limit


def required_kernels(arch: str) -> list[str]:
    """The kernels a cubin for `arch` must hold: its family's picks."""
    return sorted(set(DEFAULT[family_of(arch)].values()))


class Module:
    """One loaded cubin: its decode kernels with their dynamic shared memory limits raised (those that fit
    this GPU) and the merge."""

    def __init__(self, cubin: Path, arch: str | None = None):
        cu = _driver()
        torch.cuda.init()
        # makes PyTorch's primary context current on this thread
        torch.empty(1, device="cuda")
        self._cu = cu
        self._image = cubin.read_bytes()
        self._module = _check(cu.cuModuleLoadData(self._image))
        self.functions = {}
        arch = arch or arch_of(torch.cuda.get_device_capability())
        for name in KERNELS:
            err, fn = cu.cuModuleGetFunction(self._module, f"fp8_mla_{name}".encode())
            if int(err) != 0 or not fits_block(name, arch):
                continue
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(cu.cuFuncSetAttribute(fn, attr, kernel_smem(name)))
            self.functions[name] = fn
        self.functions[MERGE] = _check(cu.cuModuleGetFunction(self._module, f"fp8_mla_{MERGE}".encode()))
        missing = [n for n in required_kernels(arch) if n not in self.functions]
        if missing:
            raise RuntimeError(
                f"{cubin} lacks the shipped kernel(s) {', '.join(missing)}: built from another source?"
            )

    def launch(
        self, name: str, grid: tuple[int, int, int], args: tuple, types: tuple, pdl: bool = False
    ) -> None:
        """pdl: the launch may begin before the kernel before it on the stream ends (the kernel waits for it
        in griddepcontrol.wait); graph capture keeps the programmatic edge."""
        if name not in self.functions:
            raise RuntimeError(
                f"kernel {name} is not loaded: a kernel whose shared memory exceeds this GPU's block "
                f"({kernel_smem(name)} B) is left out"
            )
        cu = self._cu
        stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        smem = 0 if name == MERGE else kernel_smem(name)
        if not pdl:
            _check(
                cu.cuLaunchKernel(self.functions[name], *grid, THREADS, 1, 1, smem, stream, (args, types), 0)
            )
            return
        _check(
            cu.cuLaunchKernelEx(pdl_config(cu, grid, smem, stream), self.functions[name], (args, types), 0)
        )


def pdl_config(cu, grid: tuple[int, int, int], smem: int, stream):
    """cuLaunchKernelEx's configuration with programmatic stream serialization allowed."""
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = THREADS, 1, 1
    cfg.sharedMemBytes = smem
    cfg.hStream = stream
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return cfg


_MODULES: dict[str, Module] = {}
_AVAILABLE: dict[str, bool] = {}


def packaged_cubin(arch: str) -> Path:
    """Where build.py leaves the cubin for `arch` inside the package (installed with it)."""
    return HERE / f"fp8_mla_decode_{arch}.cubin"


def available() -> bool:
    """Whether this GPU can run the CUDA kernel: cuda-python imports, and a cubin was built for its arch
    (build-kernel) or one can be built here (nvcc)."""
    try:
        cc = torch.cuda.get_device_capability()
    except Exception:
        return False
    arch = arch_of(cc)
    if arch not in _AVAILABLE:
        try:
            # cuda-python launches it: without it the Triton kernel serves
            _driver()
        except ImportError:
            _AVAILABLE[arch] = False
            return False
        ok = cc >= (9, 0) and (
            arch in _MODULES or packaged_cubin(arch).exists() or bool(os.environ.get("SGLOPS_FP8_MLA_CUBIN"))
        )
        if cc >= (9, 0) and not ok:
            try:
                find_nvcc()
                ok = True
            except RuntimeError:
                ok = False
        _AVAILABLE[arch] = ok
    return _AVAILABLE[arch]


def module(cache_dir: Path | None = None) -> Module:
    """The kernel module for this GPU: SGLOPS_FP8_MLA_CUBIN, else the packaged cubin for its arch, else built
    on first use into a cache folder."""
    arch = arch_of(torch.cuda.get_device_capability())
    if arch not in _MODULES:
        pre = os.environ.get("SGLOPS_FP8_MLA_CUBIN")
        if pre:
            cubin = Path(pre)
        elif packaged_cubin(arch).exists():
            cubin = packaged_cubin(arch)
        else:
            cache = cache_dir or Path(
                os.environ.get("SGLOPS_KERNEL_CACHE", Path.home() / ".cache" / "sglops-kernels")
            )
            cubin, _ = build(arch, cache)
        _MODULES[arch] = Module(cubin, arch)
    return _MODULES[arch]


def config_for(heads: int, family: str | None = None, batch: int | None = None) -> dict:
    fam = family or ("sm120" if torch.cuda.get_device_capability()[0] >= 12 else "sm90")
    return config_of(kernel_name(heads, fam, batch))


def config_of(name: str, min_rows: int = 256) -> dict:
    """The launch config of kernel `name`, in the shape
    splits_for reads (16 heads per CTA at any head count)."""
    block_n, _, per_sm = KERNELS[name]
    return {
        "kernel": name,
        "block_h": 16,
        "block_n": block_n,
        "programs_per_sm": per_sm,
        "min_rows": min_rows,
    }


def min_rows_for(max_len: int) -> int:
    """Rows per split at least for the Triton kernel's per-request splits (splits_for): 256, down to 64 for
    short contexts."""
    return max(64, min(256, -(-max_len // 64)))


# Rows per CTA at least, whatever the batch (the .cu's sched_chunk): each chunk costs a prologue (q, the
# ring's fill) and a 32 KB partial per 16 heads that the merge reads back, so a small batch is cut into chunks
# of at least this many rows rather than one per CTA of the wave. 128: H200/H100 sweep, BENCH.md v0.6.
MIN_ROWS = 128
# Rows each request is charged on top of its own (the .cu's ovh): a segment's fixed cost (q, the ring's fill,
# the partial) in rows, so that CTAs meeting many short requests read fewer rows. H100 sweep, BENCH.md v0.6.
OVH_ROWS = 256
# the merge's shared weights (MERGE_MAX_SLOTS)
MAX_CTAS = 2048


# the merge's grid, at most (merge_grid); H100 sweep, BENCH.md v0.6
MERGE_CTAS = 2048


def merge_grid(batch: int, heads: int) -> tuple[int, int]:
    """The merge's grid beyond the requests: (head groups, dim groups). A few requests: every head its own
    CTAs and up to 8 per head (512 / 8 output dims each): a small batch's request has up to a CTA per slot to
    combine, and more CTAs keep more loads in flight. Many requests: one CTA per request and group of heads,
    at most MERGE_CTAS in all (most of them find their request written whole and return: launching more costs
    time)."""
    z = 8
    while z > 1 and batch * heads * z > MERGE_CTAS:
        z //= 2
    hy = heads
    while hy > 1 and batch * hy > MERGE_CTAS:
        hy = -(-hy // 2)
    return hy, z


_SMS: dict[int, int] = {}


def sm_count(device=None) -> int:
    idx = torch.cuda.current_device() if device is None else torch.device(device).index or 0
    if idx not in _SMS:
        _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SMS[idx]


def slots_for(batch: int, name: str, sms: int, heads: int = 16) -> int:
    """Partial slots per head the workspace must hold: a CTA per slot plus one per request (slot c + b), and 4
    more for the schedule's form that the decode leaves for the merge (3 ints after the slots'
    log-sum-exps)."""
    return ctas_for(name, sms, heads, batch) + batch + 4


def mla_decode(
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
    min_rows=None,
    ovh=None,
):
    """The same contract as the Triton kernel's mla_decode (q [B, H, 576] BF16, pool FP8 [N, 1, 576] or
    [pages, P, 576], kv_indptr/kv_indices as SGLang plans FlashInfer MLA, out [B, H, 512] BF16). The split
    count is the kernel's own (one wave of CTAs sharing the batch's rows evenly, on the device); n_splits is
    accepted for the common contract and unused. workspace: (part, lse) of at least slots_for(...) x heads x
    512 / x heads fp32 (larger is fine; smaller, or none: fresh buffers)."""
    batch, heads, d = q.shape
    if d != 576:
        raise ValueError(f"q's last dim is {d}; this kernel is for MLA's 512 + 64")
    if q.dtype != torch.bfloat16:
        raise ValueError(f"q is {q.dtype}; the kernel takes BF16 q")
    if q.stride(-1) != 1:
        q = q.contiguous()
    raw = pool.view(torch.uint8)
    if raw.dim() == 3 and raw.shape[1] != 1:
        raw = raw.reshape(-1, 1, d)
    if raw.stride(0) % 16:
        raise ValueError("pool rows must be 16-byte aligned")
    if out is None:
        out = torch.empty(batch, heads, 512, dtype=q.dtype, device=q.device)
    if out.stride(-1) != 1 or out.dtype != torch.bfloat16:
        raise ValueError("out must be BF16 with contiguous rows")
    if kv_indptr.dtype != torch.int32 or kv_indices.dtype != torch.int32:
        raise ValueError("kv_indptr and kv_indices must be int32")
    if page_size > 1 and kv_lens is None:
        raise ValueError("page_size > 1 needs kv_lens (tokens per request, on the device)")
    if batch == 0:
        return out
    cfg = config or config_for(heads, batch=batch)
    name = cfg.get("kernel") or config_for(heads, batch=batch)["kernel"]
    ctas = int(cfg.get("ctas") or ctas_for(name, sm_count(q.device), heads, batch))
    rows = int(min_rows if min_rows is not None else cfg.get("sched_min_rows", MIN_ROWS))
    ovh = int(ovh if ovh is not None else cfg.get("sched_ovh", OVH_ROWS))
    if not 1 <= ctas <= MAX_CTAS:
        raise ValueError(f"{ctas} CTAs per head block: the merge takes 1 to {MAX_CTAS}")
    # slots_for: the slots, then the schedule's form (3 ints) in lse
    need = (ctas + batch + 4) * heads
    if workspace is not None and workspace[0].numel() >= need * 512 and workspace[1].numel() >= need:
        part, lse = workspace
    else:
        part = torch.empty(need * 512, dtype=torch.float32, device=q.device)
        lse = torch.empty(need, dtype=torch.float32, device=q.device)
    lens = kv_lens if kv_lens is not None else kv_indptr
    qk_scale = float(sm_scale) * float(kv_scale) * 1.4426950408889634
    vp, f32, i32, i64 = ctypes.c_void_p, ctypes.c_float, ctypes.c_int, ctypes.c_longlong
    args = (
        q.data_ptr(),
        raw.data_ptr(),
        kv_indptr.data_ptr(),
        kv_indices.data_ptr(),
        lens.data_ptr(),
        part.data_ptr(),
        lse.data_ptr(),
        out.data_ptr(),
        qk_scale,
        float(kv_scale),
        heads,
        raw.stride(0),
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        batch,
        int(page_size),
        rows,
        ovh,
    )
    types = (vp, vp, vp, vp, vp, vp, vp, vp, f32, f32, i32, i64, i64, i64, i64, i64, i32, i32, i32, i32)
    mod = module()
    mod.launch(name, ((heads + 15) // 16, ctas, 1), args, types)
    margs = (
        kv_indptr.data_ptr(),
        part.data_ptr(),
        lse.data_ptr(),
        out.data_ptr(),
        heads,
        out.stride(0),
        out.stride(1),
        batch,
        int(page_size),
        ctas,
        rows,
        KERNELS[name][0],
        ovh,
    )
    mtypes = (vp, vp, vp, vp, i32, i64, i64, i32, i32, i32, i32, i32, i32)
    mod.launch(MERGE, (batch, *merge_grid(batch, heads)), margs, mtypes, pdl=PDL)
    return out
