"""gather-cast is bit-exact: the rows the kernel reads through the re-indexed compact buffer equal
the whole-pool cast indexed by the original kv_indices, for FP8 e4m3 -> BF16.

The code under test is the helper the patch adds, taken from the real release file after applying
the patch (the backend module itself cannot import without a GPU), and driven the way the backend
drives it: plan-time `_sglops_compact_kv(wrapper, kv_indices, enable)`, per-layer
`_sglops_gather_cast(pool, wrapper, q.dtype)`.
"""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from sglops import patch_diff  # noqa: E402
from sglops.patch_spec import load  # noqa: E402
from sglops.sandbox import trees  # noqa: E402

HELPERS = ("_sglops_compact_kv", "_sglops_gather_cast")
VARIANTS = [v.name for v in load("gather-cast").variants]


def patched_helpers(variant: str) -> dict:
    """Apply the variant to its real release file; exec the helper block it adds."""
    v = load("gather-cast").variant(variant)
    (fp,) = v.files()
    src = (trees.sglang_template(v.sglang[0]) / fp.path).read_text()
    new, conflicts = patch_diff.apply([fp], {fp.path: src})
    assert not conflicts
    text = new[fp.path]
    assert "sglops: gather-cast" in text
    tree = ast.parse(text)
    keep = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name in HELPERS)
            or (isinstance(n, ast.Try) and "sglops_kernels" in ast.unparse(n))]
    assert {n.name for n in keep if isinstance(n, ast.FunctionDef)} == set(HELPERS)
    ns: dict = {"torch": torch}
    exec(compile(ast.Module(keep, []), f"{variant}:helpers", "exec"), ns)
    return ns


def kernel_reads(buf, kv_indptr, kv_indices) -> list:
    """What FlashInfer's paged MLA kernel reads per request: buf[kv_indices[indptr[b]:indptr[b+1]]]."""
    return [buf[kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()] for b in range(len(kv_indptr) - 1)]


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)


def random_batch(gen, pool_rows: int, bs: int, max_len: int):
    seq_lens = torch.randint(1, max_len + 1, (bs,), generator=gen)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    # slot ids, repeats allowed (shared radix prefixes), slot 0 included (the padding slot)
    kv_indices = torch.randint(0, pool_rows, (int(kv_indptr[-1]),), generator=gen, dtype=torch.int32)
    return kv_indptr, kv_indices


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("pool_rows,bs,max_len", [(17, 1, 5), (1000, 8, 200), (4097, 33, 700)])
def test_compact_buffer_matches_whole_pool_cast(variant, pool_rows, bs, max_len):
    ns = patched_helpers(variant)
    gen = torch.Generator().manual_seed(pool_rows * 31 + bs)
    # every byte pattern, NaNs included: the pool is uint8 storage viewed as FP8, as in SGLang
    pool = torch.randint(0, 256, (pool_rows, 1, 576), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    kv_indptr, kv_indices = random_batch(gen, pool_rows, bs, max_len)
    wrapper = SimpleNamespace(_use_cuda_graph=False)

    planned = ns["_sglops_compact_kv"](wrapper, kv_indices, True)
    assert torch.equal(planned, torch.arange(len(kv_indices), dtype=planned.dtype))
    compact = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
    assert compact.dtype == torch.bfloat16 and compact.shape == (len(kv_indices), 1, 576)

    expected = kernel_reads(pool.to(torch.bfloat16), kv_indptr, kv_indices)  # the unpatched path
    got = kernel_reads(compact, kv_indptr, planned)
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(bits(e), bits(g))
    # the point of it: rows cast are the active ones, not the pool
    assert compact.shape[0] == int(kv_indptr[-1])


@pytest.mark.parametrize("variant", VARIANTS)
def test_graph_wrappers_and_disabled_plans_keep_the_whole_pool_cast(variant):
    ns = patched_helpers(variant)
    gen = torch.Generator().manual_seed(7)
    pool = torch.randint(0, 256, (300, 1, 576), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    kv_indptr, kv_indices = random_batch(gen, 300, 4, 50)
    for wrapper, enable in ((SimpleNamespace(_use_cuda_graph=True), True), (SimpleNamespace(), False)):
        wrapper._sglops_kv_rows = kv_indices  # a stale plan must not survive a re-plan
        planned = ns["_sglops_compact_kv"](wrapper, kv_indices, enable)
        assert planned is kv_indices
        buf = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
        assert buf.shape[0] == 300
        for e, g in zip(kernel_reads(pool.to(torch.bfloat16), kv_indptr, kv_indices),
                        kernel_reads(buf, kv_indptr, planned), strict=True):
            assert torch.equal(bits(e), bits(g))


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_kernel_is_preferred_when_installed(variant):
    ns = patched_helpers(variant)
    calls = []

    def fused(pool, idx, out_dtype=torch.bfloat16, scale=None):
        calls.append(len(idx))
        return pool[idx.long()].to(out_dtype)

    ns["_fused_gather_cast"] = fused
    gen = torch.Generator().manual_seed(3)
    pool = torch.randint(0, 256, (64, 1, 576), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    kv_indptr, kv_indices = random_batch(gen, 64, 3, 20)
    wrapper = SimpleNamespace(_use_cuda_graph=False)
    planned = ns["_sglops_compact_kv"](wrapper, kv_indices, True)
    buf = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
    assert calls == [len(kv_indices)]
    for e, g in zip(kernel_reads(pool.to(torch.bfloat16), kv_indptr, kv_indices),
                    kernel_reads(buf, kv_indptr, planned), strict=True):
        assert torch.equal(bits(e), bits(g))


def test_bf16_pool_is_gathered_unchanged():
    ns = patched_helpers(VARIANTS[0])
    gen = torch.Generator().manual_seed(11)
    pool = torch.randn((500, 1, 576), generator=gen).to(torch.bfloat16)
    kv_indptr, kv_indices = random_batch(gen, 500, 5, 80)
    wrapper = SimpleNamespace(_use_cuda_graph=False)
    planned = ns["_sglops_compact_kv"](wrapper, kv_indices, True)
    buf = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
    for e, g in zip(kernel_reads(pool, kv_indptr, kv_indices), kernel_reads(buf, kv_indptr, planned), strict=True):
        assert torch.equal(bits(e), bits(g))
