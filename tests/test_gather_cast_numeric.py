"""gather-cast is bit-exact: every row the MLA kernel reads, through the stock plan and slot ids,
holds the bytes of the whole-pool cast, for FP8 e4m3 -> BF16, eager and under CUDA graphs.

The code under test is the helper block the patch adds, taken from the real release file after
applying the patch (the backend module itself cannot import without a GPU), and driven the way the
backend drives it: plan-time `_sglops_record_rows(wrapper, kv_indices, kv_indptr, enable)`,
per-layer `_sglops_cast_kv(pool, wrapper, q.dtype)`; under CUDA graphs also capture-time
`_sglops_graph_rows(...)` on the graph wrapper, and replays that only rewrite the graph's
kv_indices buffer and kv_indptr in place (stale tail included).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglops.patch.names import parse as parse_python

torch = pytest.importorskip("torch")

from sglops.patch import diff as patch_diff  # noqa: E402
from sglops.patch.spec import load  # noqa: E402
from sglops.sandbox import trees  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels" / "gather_cast"))
from sglops_kernels.gather_cast import torch_cast_live_rows  # noqa: E402

HELPERS = ("_sglops_graph_rows", "_sglops_record_rows", "_sglops_cast_kv")
VARIANTS = [v.name for v in load("gather-cast").variants]
# int16 bits no e4m3 -> bf16 cast produces
POISON = -12345


def patched_text(variant: str) -> str:
    """The variant applied to its real release file."""
    v = load("gather-cast").variant(variant)
    (fp,) = v.files()
    src = (trees.sglang_template(v.sglang[0]) / fp.path).read_text()
    new, conflicts = patch_diff.apply([fp], {fp.path: src})
    assert not conflicts
    text = new[fp.path]
    assert "sglops: gather-cast" in text
    return text


def helper_block(text: str) -> ast.Module:
    tree = parse_python(text)
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in HELPERS)
        or (isinstance(n, ast.Try) and "sglops_kernels" in ast.unparse(n))
    ]
    assert {n.name for n in keep if isinstance(n, ast.FunctionDef)} == set(HELPERS)
    return ast.Module(keep, [])


def patched_helpers(variant: str) -> dict:
    """Apply the variant to its real release file; exec the helper block it adds."""
    ns: dict = {"torch": torch}
    exec(compile(helper_block(patched_text(variant)), f"{variant}:helpers", "exec"), ns)
    # The torch path unless a test installs a kernel: whether this process can import sglops_kernels
    # must not decide what is tested.
    ns["_fused_cast_live_rows"] = None
    return ns


def kernel_reads(buf, kv_indptr, kv_indices) -> list:
    """What FlashInfer's paged MLA kernel reads per request: buf[kv_indices[indptr[b]:indptr[b+1]]]."""
    return [buf[kv_indices[kv_indptr[b] : kv_indptr[b + 1]].long()] for b in range(len(kv_indptr) - 1)]


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)


def assert_same_reads(pool, buf, kv_indices, kv_indptr) -> None:
    """Per request, the rows the kernel reads from the patched buffer through the stock slot ids
    equal, bit for bit, the rows it reads from the whole-pool cast through the same ids."""
    assert buf.shape == pool.shape and buf.dtype == torch.bfloat16
    stock = pool.to(torch.bfloat16) if pool.dtype != torch.bfloat16 else pool
    for e, g in zip(
        kernel_reads(stock, kv_indptr, kv_indices), kernel_reads(buf, kv_indptr, kv_indices), strict=True
    ):
        assert torch.equal(bits(e), bits(g))


def device_count_kernel(ns) -> list:
    """Install a stand-in for the Triton kernel with its exact contract: it reads the live count
    from the tensor it is given at call time (as the GPU reads kv_indptr[bs] at replay), casts only
    ids[:n] (all rows once n >= pool rows) into a poisoned buffer, and records each call."""
    calls: list = []

    def fused(pool, ids, live, most, out_dtype=torch.bfloat16):
        n = int(live[0]) if isinstance(live, torch.Tensor) else int(live)
        calls.append((n, most, isinstance(live, torch.Tensor)))
        out = torch.full(pool.shape, POISON, dtype=torch.int16).view(out_dtype)
        sel = torch.arange(pool.shape[0]) if n >= pool.shape[0] else ids[:n].long()
        out[sel] = pool.view(torch.uint8)[sel].view(pool.dtype).to(out_dtype)
        return out

    ns["_fused_cast_live_rows"] = fused
    return calls


def random_batch(gen, pool_rows: int, bs: int, max_len: int):
    seq_lens = torch.randint(1, max_len + 1, (bs,), generator=gen)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    # slot ids, repeats allowed (shared radix prefixes), slot 0 included (the padding slot)
    kv_indices = torch.randint(0, pool_rows, (int(kv_indptr[-1]),), generator=gen, dtype=torch.int32)
    return kv_indptr, kv_indices


def fp8_pool(gen, rows: int):
    """Every byte pattern, NaNs included: the pool is uint8 storage viewed as FP8, as in SGLang."""
    return torch.randint(0, 256, (rows, 1, 576), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("pool_rows,bs,max_len", [(17, 1, 5), (1000, 8, 200), (4097, 33, 700)])
def test_eager_plan_reads_the_whole_pool_cast_rows(variant, pool_rows, bs, max_len):
    ns = patched_helpers(variant)
    gen = torch.Generator().manual_seed(pool_rows * 31 + bs)
    pool = fp8_pool(gen, pool_rows)
    kv_indptr, kv_indices = random_batch(gen, pool_rows, bs, max_len)
    wrapper = SimpleNamespace(_use_cuda_graph=False)
    ns["_sglops_record_rows"](wrapper, kv_indices, kv_indptr, True)
    assert wrapper._sglops_rows[1] == wrapper._sglops_rows[2] == len(kv_indices)
    assert_same_reads(pool, ns["_sglops_cast_kv"](pool, wrapper, torch.bfloat16), kv_indices, kv_indptr)
    calls = device_count_kernel(ns)
    assert_same_reads(pool, ns["_sglops_cast_kv"](pool, wrapper, torch.bfloat16), kv_indices, kv_indptr)
    # the host knows n: no device count
    assert calls == [(len(kv_indices), len(kv_indices), False)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_graph_wrappers_without_rows_and_disabled_plans_keep_the_whole_pool_cast(variant):
    """A CUDA-graph wrapper not built with _sglops_graph_rows (verify, draft graphs) and a disabled
    plan (speculative, DCP, BF16 KV) cast the whole pool; a stale record does not survive a re-plan."""
    ns = patched_helpers(variant)
    calls = device_count_kernel(ns)
    gen = torch.Generator().manual_seed(7)
    pool = fp8_pool(gen, 300)
    kv_indptr, kv_indices = random_batch(gen, 300, 4, 50)
    for wrapper, enable in ((SimpleNamespace(_use_cuda_graph=True), True), (SimpleNamespace(), False)):
        wrapper._sglops_rows = (kv_indices, 3, 3)
        ns["_sglops_record_rows"](wrapper, kv_indices, kv_indptr, enable)
        assert wrapper._sglops_rows is None
        buf = ns["_sglops_cast_kv"](pool, wrapper, torch.bfloat16)
        assert torch.equal(bits(buf), bits(pool.to(torch.bfloat16)))
    assert calls == []


def test_bf16_pool_is_returned_as_is():
    ns = patched_helpers(VARIANTS[0])
    device_count_kernel(ns)
    gen = torch.Generator().manual_seed(11)
    pool = torch.randn((500, 1, 576), generator=gen).to(torch.bfloat16)
    kv_indptr, kv_indices = random_batch(gen, 500, 5, 80)
    wrapper = SimpleNamespace(_use_cuda_graph=False)
    ns["_sglops_record_rows"](wrapper, kv_indices, kv_indptr, True)
    assert ns["_sglops_cast_kv"](pool, wrapper, torch.bfloat16) is pool


def test_the_package_fallback_is_what_the_patch_falls_back_to():
    """sglops_kernels' torch path (what the patch calls where Triton is missing) gives the rows the
    kernel reads the whole-pool cast's bytes, for a host count and a device count alike."""
    gen = torch.Generator().manual_seed(13)
    pool = fp8_pool(gen, 2000)
    kv_indptr, kv_indices = random_batch(gen, 2000, 6, 300)
    n = len(kv_indices)
    assert_same_reads(pool, torch_cast_live_rows(pool, kv_indices, n), kv_indices, kv_indptr)
    assert_same_reads(
        pool, torch_cast_live_rows(pool, kv_indices, kv_indptr[-1:], cap=n), kv_indices, kv_indptr
    )


# --- CUDA graphs ---------------------------------------------------------------------------------
# What the real code does, read from the releases (0.5.23, 0.5.15; 0.4.10 differs where noted):
# - init_cuda_graph_state: `cuda_graph_kv_indices = zeros(max_bs * max_context_len)`, one buffer for
#   every captured batch size; the decode indices updater keeps one `kv_indptr` for all of them.
# - capture (init_forward_metadata_out_graph(in_capture=True); 0.4.10 ..._capture_cuda_graph): the
#   decode wrapper is built once per bs with `use_cuda_graph=True` on the fixed buffers and planned
#   once by stock plan() (which copies kv_indices into the fixed buffer); the updater writes
#   `kv_indptr[1 : bs + 1] = cumsum(seq_lens)` first. The patch tags the wrapper with
#   `_sglops_graph_rows(self.cuda_graph_kv_indices, bs, width)` before that plan, and the plan
#   records (that buffer, kv_indptr[bs:bs+1], bs x width).
# - replay (call_begin_forward(init_metadata_replay=True)): the updater rewrites kv_indptr[1:bs+1]
#   on the device and the slot ids IN PLACE into cuda_graph_kv_indices[:sum(seq_lens)] (the tail
#   keeps older ids); fast_mla_decode_plan re-plans from host arrays only. The graph replays the
#   captured cast and the MLA kernel on the same tensors. Here a replay calls _sglops_cast_kv again
#   with the record capture left: its inputs are those tensors, so it computes what the graph would.
# - FlashInfer's MLA kernels read kv_indices entry kv_indptr[b] + j only while j < kv_len[b].


class FakeGraphBackend:
    """The buffers of FlashInferMLAAttnBackend and its decode updater the graph path touches."""

    def __init__(self, max_bs: int, max_context_len: int):
        self.cuda_graph_kv_indices = torch.zeros(max_bs * max_context_len, dtype=torch.int32)
        # the updater's, shared by every bs
        self.kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32)


def capture(ns, backend, bs, row_width, enable=True):
    """Capture-time code of the patched backend for the decode graph of batch size bs."""
    wrapper = SimpleNamespace(_use_cuda_graph=True, _kv_indices_buf=backend.cuda_graph_kv_indices)
    wrapper._sglops_graph = ns["_sglops_graph_rows"](backend.cuda_graph_kv_indices, bs, row_width)
    # capture batch: seq_len_fill_value
    seq_lens = torch.ones(bs, dtype=torch.int32)
    backend.kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens, 0)
    # a fresh tensor, as in capture
    capture_ids = torch.arange(1, bs + 1, dtype=torch.int32)
    ns["_sglops_record_rows"](wrapper, capture_ids, backend.kv_indptr[: bs + 1], enable)
    # stock plan(), use_cuda_graph branch
    backend.cuda_graph_kv_indices[:bs].copy_(capture_ids)
    return wrapper


def replay(gen, backend, bs, pool_rows, max_len, raw_bs=None):
    """Replay-time metadata, in place: this batch's kv_indptr and slot ids (padded lanes get
    seq_len 1 and slot 0). Nothing else changes before the graph replays."""
    raw_bs = bs if raw_bs is None else raw_bs
    seq_lens = torch.ones(bs, dtype=torch.int64)
    seq_lens[:raw_bs] = torch.randint(1, max_len + 1, (raw_bs,), generator=gen)
    backend.kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens, 0)
    kv_indptr = backend.kv_indptr[: bs + 1].clone()
    n = int(kv_indptr[-1])
    ids = torch.randint(0, pool_rows, (n,), generator=gen, dtype=torch.int32)
    ids[int(kv_indptr[raw_bs]) :] = 0
    backend.cuda_graph_kv_indices[:n].copy_(ids)
    return kv_indptr


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kernel", ["device-count", "torch"])
@pytest.mark.parametrize("pool_rows", [4000, 300])
def test_cuda_graph_replays_read_exactly_the_whole_pool_cast_rows(variant, kernel, pool_rows):
    """Capture decode graphs for several batch sizes (largest first, as SGLang does), then replay
    them in mixed order with random batches, padded lanes and stale index tails. Every graph size
    takes the cast of live rows (none falls back to the whole pool), and per layer the rows the
    kernel reads equal the whole-pool cast's, bit for bit. With the device-count kernel, the count
    it sees is this replay's (it casts nothing beyond it)."""
    ns = patched_helpers(variant)
    calls = device_count_kernel(ns) if kernel == "device-count" else None
    gen = torch.Generator().manual_seed(pool_rows)
    # req_to_token rows are context_len + a few slots wide
    ctx, width, max_bs = 60, 64, 16
    backend = FakeGraphBackend(max_bs, ctx)
    layers = [fp8_pool(gen, pool_rows) for _ in range(2)]
    wrappers = {bs: capture(ns, backend, bs, width) for bs in (16, 8, 4, 2, 1)}
    for bs, w in wrappers.items():
        ids, live, most = w._sglops_rows
        assert ids is backend.cuda_graph_kv_indices and most == min(bs * width, max_bs * ctx)
        # a view of the live buffer
        assert live.data_ptr() == backend.kv_indptr[bs:].data_ptr()
    stale_tail_seen = False
    for _ in range(24):
        bs = [16, 8, 4, 2, 1][torch.randint(0, 5, (1,), generator=gen).item()]
        raw_bs = int(torch.randint(1, bs + 1, (1,), generator=gen))
        kv_indptr = replay(gen, backend, bs, pool_rows, ctx, raw_bs)
        n = int(kv_indptr[-1])
        stale_tail_seen |= bool(backend.cuda_graph_kv_indices[n : bs * width].any())
        for pool in layers:
            if calls is not None:
                calls.clear()
            buf = ns["_sglops_cast_kv"](pool, wrappers[bs], torch.bfloat16)
            assert_same_reads(pool, buf, backend.cuda_graph_kv_indices, kv_indptr)
            if calls is not None:
                assert calls == [(n, min(bs * width, max_bs * ctx), True)]
                cast = bits(buf).reshape(pool_rows, -1)[:, 0] != POISON
                want = torch.zeros(pool_rows, dtype=torch.bool)
                want[backend.cuda_graph_kv_indices[:n].long()] = True
                # only this replay's live rows
                assert torch.equal(cast, want) or n >= pool_rows
    # the claim under test: a stale tail is there and never read
    assert stale_tail_seen


@pytest.mark.parametrize("variant", VARIANTS)
def test_live_rows_beyond_the_pool_switch_to_every_row_on_the_device(variant):
    """Shared prefixes can make sum(seq_lens) exceed the pool; the same captured graph then casts
    the whole pool (cost min(n, pool rows)), and the reads stay bit-exact."""
    ns = patched_helpers(variant)
    calls = device_count_kernel(ns)
    gen = torch.Generator().manual_seed(5)
    backend = FakeGraphBackend(8, 100)
    pool = fp8_pool(gen, 120)
    w = capture(ns, backend, 8, 104)
    kv_indptr = replay(gen, backend, 8, 120, 100)
    # 8 requests of up to 100 tokens on 120 slots (seeded)
    assert int(kv_indptr[-1]) > 120
    buf = ns["_sglops_cast_kv"](pool, w, torch.bfloat16)
    assert_same_reads(pool, buf, backend.cuda_graph_kv_indices, kv_indptr)
    assert torch.equal(bits(buf), bits(pool.to(torch.bfloat16))) and calls[0][0] > 120


def _method(tree: ast.Module, cls: str, names: tuple[str, ...]) -> ast.FunctionDef:
    (c,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    (f,) = [n for n in c.body if isinstance(n, ast.FunctionDef) and n.name in names]
    return f


@pytest.mark.parametrize("variant", VARIANTS)
def test_patched_backend_wires_the_graph_rows_as_simulated(variant):
    """The simulation above matches the patched file: the decode graph wrapper keeps the stock
    kv_indices buffer and is tagged with _sglops_graph_rows before its plan; plans record rows with
    the updater's kv_indptr; the replay plan records nothing; forward casts through _sglops_cast_kv."""
    text = patched_text(variant)
    tree = parse_python(text)
    cap = _method(
        tree,
        "FlashInferMLAAttnBackend",
        ("init_forward_metadata_out_graph", "init_forward_metadata_capture_cuda_graph"),
    )
    ctors = [
        n
        for n in ast.walk(cap)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "BatchMLAPagedAttentionWrapper"
    ]
    kv = [ast.unparse(k.value) for c in ctors for k in c.keywords if k.arg == "kv_indices"]
    assert kv and set(kv) == {"self.cuda_graph_kv_indices"}
    src = ast.unparse(cap)
    tag = src.index("decode_wrapper._sglops_graph = _sglops_graph_rows(self.cuda_graph_kv_indices, bs, ")
    assert tag < src.index("self.indices_updater_decode.update(")
    begin = _method(tree, "FlashInferMLAIndicesUpdaterDecode", ("call_begin_forward",))
    (branch,) = [
        n
        for n in ast.walk(begin)
        if isinstance(n, ast.If)
        and ast.unparse(n.test) == "not init_metadata_replay"
        and "wrapper.plan(" in ast.unparse(n)
    ]
    assert "_sglops_record_rows(wrapper, kv_indices, kv_indptr, " in ast.unparse(ast.Module(branch.body, []))
    assert "_sglops" not in ast.unparse(ast.Module(branch.orelse, []))
    # its definition, forward_extend, forward_decode
    assert text.count("_sglops_cast_kv(") == 3
    assert "get_key_buffer(layer.layer_id).to(q.dtype)" not in text
