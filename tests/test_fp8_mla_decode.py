"""The zero-copy FP8 MLA decode kernel (kernels/fp8_mla_decode) computes attention over the FP8 rows:
its split-KV stage and merge, run by Triton's CPU interpreter against fp32 torch attention, for both
MMA orientations (16 heads), 16 and 128 heads (a head block of 64 inside one program), page size 1 and 64, one
split (direct BF16 store) and several (merge), empty requests, a kv_scale, and an index buffer whose
stale tail holds ids far outside the pool (the kernel must read only kv_indptr's range).
Skipped where Triton is not installed (the H200 figures are in kernels/fp8_mla_decode/BENCH.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglops.patch.names import parse as parse_python

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNEL = Path(__file__).resolve().parent.parent / "kernels" / "fp8_mla_decode"
# research variants, out of the package (v0.6)
LAB = Path(__file__).resolve().parent.parent / "lab" / "fp8_mla_decode"
SCRIPT = r"""
import torch
from sglops_kernels.fp8_mla_decode import mla_decode, reference, splits_for, workspace
from sglops_kernels.fp8_mla_decode import _triton as impl

torch.manual_seed(1)
failures = []


def check(label, out, ref, tol):
    if torch.isnan(out.float()).any():
        failures.append(f"{label}: unwritten (NaN) outputs")
        return
    rel = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))
    err = float((out.float() - ref).abs().max())
    if err > tol:
        failures.append(f"{label}: max abs err {err:.3g} > {tol} (rel {rel:.3g})")


ROWS = 700
pool = (torch.randn(ROWS, 1, 576) * 0.5).to(torch.float8_e4m3fn)
# page size 1: three requests, the middle one empty; a stale tail of wild ids past indptr[-1]
indptr = torch.tensor([0, 37, 37, 150], dtype=torch.int32)
ids = torch.randint(0, ROWS, (150 + 40,), dtype=torch.int32)
ids[150:] = 10**8  # never to be read
# page size 64: pages of the same pool ([ROWS // 64 pages, 64, 576]), lengths not page multiples
pages = ROWS // 64
pindptr = torch.tensor([0, 1, 1, 4], dtype=torch.int32)
pids = torch.tensor([3, 0, 7, 5, 10**7], dtype=torch.int32)  # last: stale
plens = torch.tensor([50, 0, 129], dtype=torch.int32)

for heads, bh in ((16, 16), (128, 64)):
    q = torch.randn(3, heads, 576).to(torch.bfloat16)
    for page in (1, 64) if heads == 16 else (1,):  # 128 heads: page 64 is the same indexing
        if page == 1:
            args, kw = (indptr, ids), {}
            ref = reference(q, pool, indptr, ids, 0.07, 0.5)
        else:
            args, kw = (pindptr, pids), {"page_size": 64, "kv_lens": plens}
            ref = reference(q, pool, pindptr, pids, 0.07, 0.5, page_size=64, kv_lens=plens)
        for trans in (0, 1) if heads == 16 else (0,):  # 128 heads: the interpreter is slow, one pass
            cfg = dict(impl.config_for(heads), block_h=bh, block_n=32 if trans == 0 else 64, trans=trans)
            for splits in (1, 3) if heads == 16 else (3,):
                out = torch.full((3, heads, 512), float("nan"), dtype=torch.float32)
                ws = workspace(3, heads, splits, "cpu") if splits > 1 else None
                mla_decode(
                    q,
                    pool.view(torch.uint8),
                    *args,
                    0.07,
                    0.5,
                    n_splits=splits,
                    out=out,
                    workspace=ws,
                    config=cfg,
                    **kw,
                )
                check(f"heads={heads} page={page} trans={trans} splits={splits}", out, ref, 2e-5)
# a graph captured for a long context: far more splits than rows (most of them empty), over several
# merge chunks
q = torch.randn(3, 16, 576, generator=torch.Generator().manual_seed(37)).to(
    torch.bfloat16
)  # leaves the global draw
out = torch.full((3, 16, 512), float("nan"), dtype=torch.float32)
mla_decode(
    q,
    pool.view(torch.uint8),
    indptr,
    ids,
    0.07,
    0.5,
    n_splits=37,
    out=out,
    workspace=workspace(3, 16, 37, "cpu"),
    config=dict(impl.config_for(16), block_h=16, block_n=32, trans=0),
)
check("heads=16 splits=37 (mostly empty)", out, reference(q, pool, indptr, ids, 0.07, 0.5), 2e-5)
# BF16 output (the production dtype): within bf16 rounding of fp32
q = torch.randn(3, 16, 576).to(torch.bfloat16)
out = mla_decode(q, pool, indptr, ids, 0.07, 1.0, n_splits=2)
ref = reference(q, pool, indptr, ids, 0.07, 1.0)
check("bf16 out", out, ref, float(ref.abs().max()) * 2**-8 + 1e-6)
# split policy: never more than the rows allow, fills the GPU at small batches
assert splits_for(1, 16, 131072, 132) >= 100, splits_for(1, 16, 131072, 132)
assert splits_for(64, 16, 4096, 132) <= 8
assert splits_for(1, 16, 64, 132) == 1
print("\n".join(failures) if failures else "ok")
"""

VARIANT_SCRIPT = r"""
import json
import sys
import traceback
import torch
from sglops_kernels.fp8_mla_decode import reference, workspace
import _variants as V  # lab/fp8_mla_decode/_variants.py (research variants, out of the package since v0.6)


def one(name, heads, page, splits):
    torch.manual_seed(2)
    ROWS = 700
    pool = (torch.randn(ROWS, 1, 576) * 0.5).to(torch.float8_e4m3fn)
    if page == 1:
        indptr = torch.tensor([0, 37, 37, 150], dtype=torch.int32)
        ids = torch.randint(0, ROWS, (190,), dtype=torch.int32)
        ids[150:] = 10**8  # stale tail, never to be read
        args, kw = (indptr, ids), {}
    else:
        indptr = torch.tensor([0, 1, 1, 4], dtype=torch.int32)
        ids = torch.tensor([3, 0, 7, 5, 10**7], dtype=torch.int32)
        args, kw = (
            (indptr, ids),
            {"page_size": 64, "kv_lens": torch.tensor([50, 0, 129], dtype=torch.int32)},
        )
    q = torch.randn(3, heads, 576).to(torch.bfloat16)
    ref = reference(q, pool, *args, 0.07, 0.5, **kw)
    cfg = {
        "block_h": 16 if heads == 16 else 64,
        "block_n": 32,
        "warps": 4,
        "stages": 1,
        "trans": 0,
        "programs_per_sm": 1,
        "min_rows": 256,
    }
    out = torch.full((3, heads, 512), float("nan"), dtype=torch.float32)
    ws = workspace(3, heads, splits, "cpu") if splits > 1 else None
    V.mla_decode_variant(
        name,
        q,
        pool.view(torch.uint8),
        *args,
        0.07,
        0.5,
        n_splits=splits,
        out=out,
        workspace=ws,
        config=cfg,
        **kw,
    )
    err = float((out - ref).abs().max())
    # q and p are rounded to the variant's 16-bit MMA type (the interpreter multiplies in fp32)
    tol = float(ref.abs().max()) * 2**-7
    return "ok" if not torch.isnan(out).any() and err <= tol else f"err {err:.3g} > {tol:.3g}"


for name, heads, page, splits in json.loads(sys.argv[1]):
    try:
        said = one(name, heads, page, splits)
    except Exception:
        said = traceback.format_exc().replace("\n", " | ")
    print(json.dumps([[name, heads, page, splits], said]), flush=True)
"""

# One interpreter process for every case (each one imported torch and Triton for itself: ~16 x 4 s of CPU);
# each case starts from the same seed as in a process of its own, and reports its own outcome to its own test.
VARIANT_CASES = [
    ("f16", 16, 1, 3),
    ("pf", 16, 1, 3),
    ("f16pf", 16, 1, 1),
    ("f16pf", 16, 64, 3),
    ("f16pf_n64", 16, 1, 3),
    ("f16pf_w4", 16, 64, 1),
    ("f16pf_t64", 16, 1, 3),
    ("f16pf_t64", 16, 64, 1),
    ("f16pf2", 16, 1, 3),
    ("f16pf2", 16, 64, 1),
    ("f16pf", 128, 1, 2),
    ("cpa", 16, 1, 3),
    ("cpa_vm", 16, 64, 1),
    ("cpa_vm_n16", 16, 1, 3),
    ("cpa_vm_n64", 16, 64, 3),
    ("cpa_vm", 128, 1, 2),
]


@pytest.fixture(scope="module")
def variant_outcomes() -> dict:
    """{case: what the interpreter said} for every VARIANT_CASES case, from one process."""
    import json

    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(KERNEL), str(LAB), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", VARIANT_SCRIPT, json.dumps(VARIANT_CASES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300 * len(VARIANT_CASES),
    )
    said = {
        tuple(case): line
        for case, line in (json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("[["))
    }
    return {"said": said, "rc": proc.returncode, "tail": (proc.stdout[-2000:], proc.stderr[-2000:])}


@pytest.mark.parametrize("name,heads,page,splits", VARIANT_CASES)
def test_split_stage_variants_match_fp32_attention_in_the_interpreter(
    variant_outcomes, name, heads, page, splits
):
    """The candidate split stages (lab/fp8_mla_decode/_variants.py: FP16 MMA, register prefetch, 64-row tiles)
    give the same attention as fp32 torch: page 1 and 64, one split and several, an empty request, stale
    ids."""
    said = variant_outcomes["said"].get((name, heads, page, splits))
    assert said == "ok", (said, variant_outcomes["rc"], variant_outcomes["tail"])


def test_split_kv_decode_matches_fp32_attention_in_the_interpreter():
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        proc.stdout[-2000:],
        proc.stderr[-2000:],
    )


PATCH_SCRIPT = r"""
import sys, types, torch

ns = {"torch": torch}
exec(compile(open(sys.argv[1]).read(), "fp8-mla-native helpers", "exec"), ns)
from sglops_kernels.fp8_mla_decode import reference

assert ns["_sglops_mla_decode"] is not None
ns["_SGLOPS_SMS"][torch.device("cpu")] = 4  # no CUDA here: the split policy needs an SM count
torch.manual_seed(3)
pool = (torch.randn(300, 1, 576) * 0.5).to(torch.float8_e4m3fn)
indptr = torch.tensor([0, 40, 41, 140], dtype=torch.int32)
ids = torch.randint(0, 300, (140,), dtype=torch.int32)
layer = types.SimpleNamespace(scaling=0.08)
q = torch.randn(3, 16, 576).to(torch.bfloat16)
ref = reference(q, pool, indptr, ids, 0.08)
bad = []


def close(label, got):
    if got is None:
        bad.append(label + ": stock path taken")
    elif float((got.float() - ref).abs().max()) > float(ref.abs().max()) * 2**-7:
        bad.append(f"{label}: max abs err {float((got.float() - ref).abs().max()):.3g}")


# eager plan: this plan's indptr/indices; q as the two halves of one tensor, and as two tensors
w = types.SimpleNamespace()
ns["_sglops_native_record"](w, indptr, ids, 140, 16, True)
out = torch.empty(3, 16, 512, dtype=torch.bfloat16)
close("eager halves", ns["_sglops_native_decode"](w, q[:, :, :512], q[:, :, 512:], pool, layer, out))
close(
    "eager split q",
    ns["_sglops_native_decode"](
        w, q[:, :, :512].contiguous(), q[:, :, 512:].contiguous(), pool, layer, torch.empty_like(out)
    ),
)
# graph wrapper: the tag's buffer is read (the plan's kv_indices are a temporary), stale tail wild
buf = torch.full((4096,), 10**8, dtype=torch.int32)
buf[:140] = ids
g = types.SimpleNamespace(_use_cuda_graph=True)
g._sglops_native_graph = ns["_sglops_native_graph"](buf, 1024)
ns["_sglops_native_record"](g, indptr, torch.zeros(140, dtype=torch.int32), 140, 16, True)
close(
    "graph",
    ns["_sglops_native_decode"](g, q[:, :, :512], q[:, :, 512:], pool, layer, torch.empty_like(out)),
)
# untagged graph wrapper (verify/draft), disabled plans, a BF16 pool: the stock path
u = types.SimpleNamespace(_use_cuda_graph=True)
ns["_sglops_native_record"](u, indptr, ids, 140, 16, True)
d = types.SimpleNamespace()
ns["_sglops_native_record"](d, indptr, ids, 140, 16, False)
for label, wr, p in (
    ("untagged graph", u, pool),
    ("disabled", d, pool),
    ("bf16 pool", w, pool.to(torch.bfloat16)),
):
    if ns["_sglops_native_decode"](wr, q[:, :, :512], q[:, :, 512:], p, layer, out) is not None:
        bad.append(label + ": took the kernel")
    if ns["_sglops_native_kv_buffer"](p, wr, torch.bfloat16).dtype != torch.bfloat16:
        bad.append(label + ": stock buffer not bf16")
# 16 heads: no live-row buffer, the stock run (if ever taken) casts the whole pool
if (
    ns["_sglops_native_kv_buffer"](pool, w, torch.bfloat16).shape != pool.shape
    or w._sglops_native_rows is not None
):
    bad.append("16 heads: a live-row buffer")
# more than 16 heads per GPU: gather-cast measured faster, so the plan records its rows and the stock run
# reads a pool-shaped buffer whose live rows hold exactly the whole-pool cast's bytes (eager, and a graph's
# tagged buffer)
whole = pool.to(torch.bfloat16)
q128 = torch.randn(3, 128, 576).to(torch.bfloat16)
old = torch.randint(
    0, 300, (4096,), dtype=torch.int32
)  # a graph's stale tail: older slot ids (cast, never read)
old[:140] = ids
for label, wr, live_ids in (("eager 128", types.SimpleNamespace(), ids), ("graph 128", None, ids)):
    if wr is None:
        wr = types.SimpleNamespace(_use_cuda_graph=True)
        wr._sglops_native_graph = ns["_sglops_native_graph"](old, 1024)
        ns["_sglops_native_record"](wr, indptr, torch.zeros(140, dtype=torch.int32), 140, 128, True)
    else:
        ns["_sglops_native_record"](wr, indptr, ids, 140, 128, True)
    if (
        ns["_sglops_native_decode"](
            wr,
            q128[:, :, :512],
            q128[:, :, 512:],
            pool,
            layer,
            torch.empty(3, 128, 512, dtype=torch.bfloat16),
        )
        is not None
    ):
        bad.append(label + ": took the kernel where gather-cast is faster")
    kv = ns["_sglops_native_kv_buffer"](pool, wr, torch.bfloat16)
    rows = live_ids.long()
    if kv.shape != pool.shape or not torch.equal(kv[rows].view(torch.int16), whole[rows].view(torch.int16)):
        bad.append(label + ": live rows differ from the whole-pool cast")
# a paged prefill (an extend with a prefix): FlashInfer's BF16 prefill reads the pool, so only the plan's
# rows are cast; a disabled plan (speculative, DCP, a BF16 pool) and a graph-captured prefill keep the stock
# whole-pool cast
ext_ids = torch.randint(0, 300, (90,), dtype=torch.int32)
for label, wr, enable, whole_pool in (
    ("extend", types.SimpleNamespace(), True, False),
    ("extend disabled", types.SimpleNamespace(), False, True),
    ("extend in a graph", types.SimpleNamespace(_use_cuda_graph=True), True, True),
):
    wr._sglops_native_rows = ("stale", 1, 1)  # a wrapper's earlier plan
    ns["_sglops_native_record_extend"](wr, ext_ids, enable)
    kv = ns["_sglops_native_kv_buffer"](pool, wr, torch.bfloat16)
    rows = ext_ids.long()
    if kv.shape != pool.shape or not torch.equal(kv[rows].view(torch.int16), whole[rows].view(torch.int16)):
        bad.append(label + ": plan rows differ from the whole-pool cast")
    if whole_pool != torch.equal(kv.view(torch.int16), whole.view(torch.int16)):
        bad.append(label + (": not the whole-pool cast" if whole_pool else ": cast the whole pool"))
# without gather-cast's package the kernel serves at 128 heads too (better than the whole-pool cast)
ns["_sglops_cast_live_rows"] = None
x = types.SimpleNamespace()
ns["_sglops_native_record_extend"](x, ext_ids, True)
if x._sglops_native_rows is not None:
    bad.append("extend, no gather-cast package: rows recorded")
n = types.SimpleNamespace()
ns["_sglops_native_record"](n, indptr, ids, 140, 128, True)
if n._sglops_native is None or n._sglops_native_rows is not None:
    bad.append("128 heads, no gather-cast package: kernel not recorded")
print("\n".join(bad) if bad else "ok")
"""


@pytest.mark.parametrize("variant", ["sglang-0.5.17", "sglang-0.5.23"])
def test_fp8_mla_native_patch_helpers_decode_from_the_fp8_pool(variant, tmp_path):
    """patches/fp8-mla-native applied to the real release file: its helper block, driven as the
    patched forward_decode / decode updater drive it, gives fp32 attention to BF16 rounding (eager,
    q as halves and as two tensors, a graph wrapper reading its tagged buffer past a stale tail) and
    leaves untagged graphs, disabled plans and BF16 pools on the stock path; a paged prefill casts its
    plan's rows alone (the rows equal to the whole-pool cast's bytes)."""
    import ast

    from sglops.patch import diff as patch_diff
    from sglops.patch.spec import load
    from sglops.sandbox import trees

    v = load("fp8-mla-native").variant(variant)
    (fp,) = v.files()
    new, conflicts = patch_diff.apply(
        [fp], {fp.path: (trees.sglang_template(v.sglang[0]) / fp.path).read_text()}
    )
    assert not conflicts
    tree = parse_python(new[fp.path])
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name.startswith("_sglops_native"))
        or (isinstance(n, ast.Try) and "sglops_kernels" in ast.unparse(n))
        or (isinstance(n, ast.Assign) and ast.unparse(n.targets[0]).startswith("_SGLOPS"))
    ]
    helpers = tmp_path / "helpers.py"
    helpers.write_text(ast.unparse(ast.Module(keep, [])))
    # the live-row cast the patch falls back to above 16 heads
    gather = KERNEL.parent / "gather_cast"
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(KERNEL), str(gather), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PATCH_SCRIPT, str(helpers)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        proc.stdout[-2000:],
        proc.stderr[-2000:],
    )


def _variants_script(*args: str) -> subprocess.CompletedProcess:
    root = KERNEL.parent.parent
    env = {**os.environ, "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, str(root / "benchmarks" / "gpu_fp8_mla_variants.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_variants_bench_registry_resolves_every_default_variant_without_a_gpu():
    """The device A/B (benchmarks/gpu_fp8_mla_variants.py) lists, on a CPU, the configuration each
    default variant runs per head count: every name is a _variants.VARIANTS entry, the cp.async
    variants keep their ring depth (stages) and the split policy's programs per SM, and at 128 heads
    only the variants with a 128-head configuration run; bad names and head counts end in one line."""
    import json

    proc = _variants_script("--list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfgs = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()}
    assert {"base", "f16pf_w4", "cpa", "cpa_vm", "cpa_vm_n16"} <= set(cfgs)
    assert cfgs["cpa_vm"]["16"]["prefetch"] == 3 and cfgs["cpa_vm"]["16"]["vmode"] == 1
    assert cfgs["cpa_vm"]["16"]["stages"] >= 5 and cfgs["cpa_vm"]["16"]["programs_per_sm"] == 1
    assert cfgs["cpa_vm"]["128"]["block_h"] == 32 and cfgs["cpa_h64"]["128"]["block_h"] == 64
    assert cfgs["cpa_h64"]["16"] is None
    assert cfgs["cpa_vm_n16"]["16"]["block_n"] == 16 and cfgs["cpa_vm_n16"]["16"]["programs_per_sm"] == 2
    assert cfgs["f16pf_w4"]["128"] is None and cfgs["base"]["128"]["block_h"] == 64
    for bad, why in (
        (("--variants", "cpa,nope"), "unknown variant(s) nope"),
        (("--heads", "16,x"), "integers"),
        (("--heads", "32"), "16 and/or 128"),
    ):
        proc = _variants_script("--list", *bad)
        assert proc.returncode != 0 and why in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
            proc.stderr
        )


def _run_ptx(asm: str, word: int) -> tuple[int, int]:
    """Execute the straight-line PTX of lab/fp8_mla_decode/_variants._e4m3_f16_int (prmt.b32, shr.b32,
    and.b32, add.u32 on 32-bit registers) for one packed input word; returns ($0, $1)."""
    import re

    regs = {"$2": word}
    val = lambda t: int(t, 0) if t[0].isdigit() else regs[t]  # noqa: E731
    for op, args in re.findall(r"^\s*(prmt\.b32|shr\.b32|and\.b32|add\.u32)\s+([^;]+);", asm, re.M):
        d, *src = [a.strip() for a in args.split(",")]
        if op == "prmt.b32":
            pool = val(src[0]) | (val(src[1]) << 32)
            sel = val(src[2])
            regs[d] = sum(((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        elif op == "shr.b32":
            regs[d] = val(src[0]) >> val(src[1])
        elif op == "and.b32":
            regs[d] = val(src[0]) & val(src[1])
        else:
            regs[d] = (val(src[0]) + val(src[1])) & 0xFFFFFFFF
    return regs["$0"], regs["$1"]


def test_integer_pipe_e4m3_conversion_is_exact_for_every_finite_code():
    """The ALU variants' inline PTX (read from _variants.py, executed instruction by instruction) turns
    each of the 254 finite e4m3 codes, in every byte position of a packed word, into the fp16 of its
    value x 2^-8 exactly (the kernel folds 2^8 into its scales): the interpreter cannot run inline asm."""
    import re

    import numpy as np
    import torch

    src = (LAB / "_variants.py").read_text()
    asm = re.search(r'def _e4m3_f16_int.*?asm="""(.*?)"""', src, re.S).group(1)
    codes = np.arange(256, dtype=np.uint8)
    ref = torch.from_numpy(codes.copy()).view(torch.float8_e4m3fn).float().numpy() / 256.0
    bad = []
    for shift in (0, 1, 2, 3):
        for c in range(256):
            lanes = [int(codes[(c + k * 37) % 256]) for k in range(4)]
            lanes[shift] = c
            lo, hi = _run_ptx(asm, sum(b << (8 * i) for i, b in enumerate(lanes)))
            halves = np.array([lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16], dtype=np.uint16).view(
                np.float16
            )
            for b, h in zip(lanes, halves.astype(np.float32), strict=True):
                if np.isfinite(ref[b]) and h != ref[b]:
                    bad.append((b, float(h), float(ref[b])))
    assert not bad, bad[:5]


def test_variants_summary_reads_the_recorded_h200_run(capsys):
    """The A/B's summary, fed the committed 2026-12-03 H200 JSON, names each cell's best variant with its
    TB/s and ratios (f16pf_w4 at 128K x bs 64: 1.33 TB/s, 1.31x (c)), keeps a column per requested variant
    (a variant the run did not time shows '-') and prints every correctness row."""
    import importlib.util
    import json

    root = KERNEL.parent.parent
    spec = importlib.util.spec_from_file_location(
        "gpu_fp8_mla_variants", root / "benchmarks" / "gpu_fp8_mla_variants.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rec = json.loads((root / "benchmarks/results/fp8-mla-decode-h200/variants-2026-12-03.json").read_text())
    mod.summary(rec, ["base", "f16pf_w4", "cpa_vm_n16_alu2"])
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.split()[:3] == ["16", "131072", "64"])
    assert row.split("|")[1].split() == ["5258.9", "3625.9", "-"], row
    assert row.split("|")[-1].split()[:3] == ["f16pf_w4", "1.33", "31.6%"] and "1.31" in row.split("|")[-1], (
        row
    )
    assert sum(line.startswith("check ") for line in lines) == len(rec["correctness"]) > 0
