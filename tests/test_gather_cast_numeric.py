"""gather-cast is bit-exact: the rows the kernel reads through the re-indexed compact buffer equal
the whole-pool cast indexed by the original kv_indices, for FP8 e4m3 -> BF16.

The code under test is the helper the patch adds, taken from the real release file after applying
the patch (the backend module itself cannot import without a GPU), and driven the way the backend
drives it: plan-time `_sglops_compact_kv(wrapper, kv_indices, enable)`, per-layer
`_sglops_gather_cast(pool, wrapper, q.dtype)`; under CUDA graphs also capture-time
`_sglops_graph_kv(...)`, which fixes the graph wrapper's layout, and replays that only rewrite the
graph's kv_indices buffer in place (stale tail included) and re-plan kv_indptr.
"""

from __future__ import annotations

import ast
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from sglops import patch_diff  # noqa: E402
from sglops.patch_spec import load  # noqa: E402
from sglops.sandbox import trees  # noqa: E402

HELPERS = ("_sglops_compact_kv", "_sglops_graph_kv", "_sglops_gather_cast")
VARIANTS = [v.name for v in load("gather-cast").variants]


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


def patched_helpers(variant: str) -> dict:
    """Apply the variant to its real release file; exec the helper block it adds."""
    tree = ast.parse(patched_text(variant))
    keep = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name in HELPERS)
            or (isinstance(n, ast.Try) and "sglops_kernels" in ast.unparse(n))]
    assert {n.name for n in keep if isinstance(n, ast.FunctionDef)} == set(HELPERS)
    ns: dict = {"torch": torch}
    exec(compile(ast.Module(keep, []), f"{variant}:helpers", "exec"), ns)
    # The torch path unless a test installs a kernel: whether this process can import sglops_kernels
    # (other test modules put it on sys.path) must not decide what is tested.
    ns["_fused_gather_cast"] = None
    return ns


def kernel_reads(buf, kv_indptr, kv_indices) -> list:
    """What FlashInfer's paged MLA kernel reads per request: buf[kv_indices[indptr[b]:indptr[b+1]]]."""
    return [buf[kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()] for b in range(len(kv_indptr) - 1)]


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)


def assert_same_reads(stock_buf, stock_indices, compact_buf, compact_indices, kv_indptr) -> None:
    """Per request, the rows the kernel reads through the compact layout equal, bit for bit, the rows
    it reads from the stock buffer (the whole-pool cast) through the stock kv_indices."""
    for e, g in zip(kernel_reads(stock_buf, kv_indptr, stock_indices),
                    kernel_reads(compact_buf, kv_indptr, compact_indices), strict=True):
        assert torch.equal(bits(e), bits(g))


def recording_kernel(ns) -> list:
    """Install a fused kernel stand-in (right answer, records each call's row count) in the helpers."""
    calls: list = []

    def fused(pool, idx, out_dtype=torch.bfloat16, scale=None):
        calls.append(len(idx))
        return pool.view(torch.uint8)[idx.long()].view(pool.dtype).to(out_dtype)

    ns["_fused_gather_cast"] = fused
    return calls


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

    assert_same_reads(pool.to(torch.bfloat16), kv_indices, compact, planned, kv_indptr)  # vs the unpatched path
    # the point of it: rows cast are the active ones, not the pool
    assert compact.shape[0] == int(kv_indptr[-1])


@pytest.mark.parametrize("variant", VARIANTS)
def test_graph_wrappers_and_disabled_plans_keep_the_whole_pool_cast(variant):
    """A CUDA-graph wrapper not built on _sglops_graph_kv (verify graphs, graphs too large to
    compact) and a disabled plan keep the stock layout and the whole-pool cast."""
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
        assert_same_reads(pool.to(torch.bfloat16), kv_indices, buf, planned, kv_indptr)


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_kernel_is_preferred_when_installed(variant):
    ns = patched_helpers(variant)
    calls = recording_kernel(ns)
    gen = torch.Generator().manual_seed(3)
    pool = torch.randint(0, 256, (64, 1, 576), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    kv_indptr, kv_indices = random_batch(gen, 64, 3, 20)
    wrapper = SimpleNamespace(_use_cuda_graph=False)
    planned = ns["_sglops_compact_kv"](wrapper, kv_indices, True)
    buf = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
    assert calls == [len(kv_indices)]
    assert_same_reads(pool.to(torch.bfloat16), kv_indices, buf, planned, kv_indptr)


def test_bf16_pool_is_gathered_unchanged():
    ns = patched_helpers(VARIANTS[0])
    gen = torch.Generator().manual_seed(11)
    pool = torch.randn((500, 1, 576), generator=gen).to(torch.bfloat16)
    kv_indptr, kv_indices = random_batch(gen, 500, 5, 80)
    wrapper = SimpleNamespace(_use_cuda_graph=False)
    planned = ns["_sglops_compact_kv"](wrapper, kv_indices, True)
    buf = ns["_sglops_gather_cast"](pool, wrapper, torch.bfloat16)
    assert_same_reads(pool, kv_indices, buf, planned, kv_indptr)


# --- CUDA graphs ---------------------------------------------------------------------------------
# What the real code does, read from the releases (0.5.23, 0.5.15; 0.4.10 differs where noted):
# - init_cuda_graph_state: `cuda_graph_kv_indices = zeros(max_bs * max_context_len)`, one buffer for
#   every captured batch size.
# - capture (init_forward_metadata_out_graph(in_capture=True); 0.4.10 ..._capture_cuda_graph): the
#   decode wrapper is built once per bs with `use_cuda_graph=True` on fixed buffers, planned once by
#   stock plan() (which copies kv_indptr / kv_indices into them); the patch builds it on
#   `_sglops_graph_kv(...)[1]` (a static arange) instead of the index buffer.
# - replay (call_begin_forward(init_metadata_replay=True)): the slot ids of the batch are written
#   IN PLACE into cuda_graph_kv_indices[:sum(seq_lens)] (the tail keeps older ids), and
#   fast_mla_decode_plan re-plans from the host kv_indptr / kv_len only, never touching kv_indices.
#   The graph then replays the captured gather-cast and the MLA kernel on the same tensors. Here a
#   replay calls _sglops_gather_cast again with the wrapper state capture left: its inputs are those
#   fixed tensors (gather index = a view of the live buffer), so it computes what the graph would.
# - FlashInfer's MLA kernels (mla.cuh, mla_hopper.cuh in 0.6.12 and 0.7.2) read kv_indices entry
#   kv_indptr[b] + j only while j < kv_len[b] (`packed_block_iter < packed_kv_bound`, with
#   packed_kv_bound = kv_indptr * block_size + kv_len from the plan); beyond it they read index 0.
# fp8_layers builds the stand-in for MLATokenToKVPool: `kv_buffer`, one uint8 (rows, 1, 576) per layer.


class FakeGraphBackend:
    """The parts of FlashInferMLAAttnBackend the CUDA-graph path touches, built like
    init_cuda_graph_state builds them."""

    def __init__(self, max_bs: int, max_context_len: int):
        self.cuda_graph_kv_indices = torch.zeros(max_bs * max_context_len, dtype=torch.int32)


def capture(ns, backend, pool, bs, row_width, enable=True):
    """Capture-time code of the patched backend for the decode graph of batch size bs: build the
    wrapper on _sglops_graph_kv's layout, plan it once (stock plan() copies the planned indices
    into the wrapper's fixed kv_indices buffer), and record the gather-cast the forward runs."""
    graph = ns["_sglops_graph_kv"](backend, pool, bs, row_width, enable)
    kernel_kv_indices = backend.cuda_graph_kv_indices if graph is None else graph[1]
    wrapper = SimpleNamespace(_use_cuda_graph=True, _kv_indices_buf=kernel_kv_indices, _sglops_graph=graph)
    # capture batch: seq_lens filled with 1, the ids of the capture's requests (fresh tensor)
    capture_ids = torch.arange(1, bs + 1, dtype=torch.int32)
    planned = ns["_sglops_compact_kv"](wrapper, capture_ids, enable)
    wrapper._kv_indices_buf[: len(planned)].copy_(planned)  # stock plan(), use_cuda_graph branch
    if graph is not None:
        assert torch.equal(graph[0][:bs], capture_ids)  # where stock plan() would have put them
    return wrapper


def replay(gen, backend, bs, pool_rows, max_len, raw_bs=None):
    """Replay-time metadata: write this batch's slot ids in place into the graph's kv_indices
    buffer (the builder fills [:sum]; padded lanes get seq_len 1 and slot 0) and the kv_indptr
    fast_mla_decode_plan re-plans from. Nothing else changes before the graph replays."""
    raw_bs = bs if raw_bs is None else raw_bs
    seq_lens = torch.ones(bs, dtype=torch.int64)
    seq_lens[:raw_bs] = torch.randint(1, max_len + 1, (raw_bs,), generator=gen)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq_lens, 0)
    n = int(kv_indptr[-1])
    ids = torch.randint(0, pool_rows, (n,), generator=gen, dtype=torch.int32)
    ids[int(kv_indptr[raw_bs]):] = 0
    backend.cuda_graph_kv_indices[:n].copy_(ids)  # in place: the captured graph reads this buffer
    return kv_indptr


def fp8_layers(gen, layers: int, rows: int):
    raw = [torch.randint(0, 256, (rows, 1, 576), generator=gen, dtype=torch.uint8) for _ in range(layers)]
    return SimpleNamespace(kv_buffer=raw), [r.view(torch.float8_e4m3fn) for r in raw]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("pool_rows", [4000, 1000])
def test_cuda_graph_replays_read_exactly_the_whole_pool_cast_rows(variant, pool_rows):
    """Capture decode graphs for several batch sizes (largest first, as SGLang does), then replay
    them in mixed order with random batches, padded lanes and stale index tails; per layer, the rows
    the kernel reads through the graph's fixed layout equal, bit for bit, the rows it reads from the
    whole-pool cast through the stock layout (the graph's kv_indices buffer)."""
    ns = patched_helpers(variant)
    gen = torch.Generator().manual_seed(pool_rows)
    ctx, width, max_bs = 60, 64, 16  # req_to_token rows are context_len + a few slots wide
    backend = FakeGraphBackend(max_bs, ctx)
    fake_pool, layers = fp8_layers(gen, 2, pool_rows)
    wrappers = {bs: capture(ns, backend, fake_pool, bs, width) for bs in (16, 8, 4, 2, 1)}

    compacted = {bs for bs, w in wrappers.items() if w._sglops_graph is not None}
    caps = {bs: min(bs * width, max_bs * ctx) for bs in wrappers}
    assert compacted == {bs for bs in wrappers if 2 * caps[bs] <= pool_rows} and compacted
    # one static arange serves every graph: the largest compacted graph's capacity
    assert backend._sglops_arange.numel() == max(caps[bs] for bs in compacted)
    stale_tail_seen = False
    for _ in range(24):
        bs = [16, 8, 4, 2, 1][torch.randint(0, 5, (1,), generator=gen).item()]
        raw_bs = int(torch.randint(1, bs + 1, (1,), generator=gen))
        kv_indptr = replay(gen, backend, bs, pool_rows, ctx, raw_bs)
        n = int(kv_indptr[-1])
        assert n <= caps[bs]
        w = wrappers[bs]
        stale_tail_seen |= bool(w._sglops_graph is not None and backend.cuda_graph_kv_indices[n:caps[bs]].any())
        for pool in layers:
            buf = ns["_sglops_gather_cast"](pool, w, torch.bfloat16)
            assert_same_reads(pool.to(torch.bfloat16), backend.cuda_graph_kv_indices, buf, w._kv_indices_buf,
                              kv_indptr)
            if bs in compacted:
                # static under the graph: cap rows gathered through the live index buffer, and
                # the kernel's indices still the arange it was built on
                assert buf.shape == (caps[bs], 1, 576) and buf.dtype == torch.bfloat16
                assert w._sglops_kv_rows.data_ptr() == backend.cuda_graph_kv_indices.data_ptr()
                assert torch.equal(w._kv_indices_buf, torch.arange(caps[bs], dtype=torch.int32))
                assert buf.shape[0] * 2 <= pool.shape[0]
            else:
                assert buf.shape[0] == pool_rows  # too large to win: the whole-pool cast
    assert stale_tail_seen  # the claim under test: a stale tail is gathered and never read


@pytest.mark.parametrize("variant", VARIANTS)
def test_cuda_graph_layout_off_for_spec_dcp_and_unknown_pools(variant):
    ns = patched_helpers(variant)
    gen = torch.Generator().manual_seed(5)
    backend = FakeGraphBackend(4, 32)
    fake_pool, _ = fp8_layers(gen, 1, 4096)
    assert ns["_sglops_graph_kv"](backend, fake_pool, 2, 36, False) is None
    assert ns["_sglops_graph_kv"](backend, SimpleNamespace(), 2, 36, True) is None
    stacked = SimpleNamespace(kv_buffer=torch.zeros(2, 4096, 1, 576, dtype=torch.uint8))  # not a per-layer list
    assert ns["_sglops_graph_kv"](backend, stacked, 2, 36, True) is None
    assert not hasattr(backend, "_sglops_arange")
    graph = ns["_sglops_graph_kv"](backend, fake_pool, 2, 36, True)
    assert graph is not None and graph[0].data_ptr() == backend.cuda_graph_kv_indices.data_ptr()
    assert graph[0].numel() == graph[1].numel() == 72


@pytest.mark.parametrize("variant", VARIANTS)
def test_cuda_graph_prefers_the_fused_kernel(variant):
    ns = patched_helpers(variant)
    calls = recording_kernel(ns)
    gen = torch.Generator().manual_seed(9)
    backend = FakeGraphBackend(4, 30)
    fake_pool, (pool,) = fp8_layers(gen, 1, 1000)
    w = capture(ns, backend, fake_pool, 4, 32)
    assert w._sglops_graph is not None
    kv_indptr = replay(gen, backend, 4, 1000, 30)
    buf = ns["_sglops_gather_cast"](pool, w, torch.bfloat16)
    assert calls == [min(4 * 32, 120)]  # a static row count under the graph
    assert_same_reads(pool.to(torch.bfloat16), backend.cuda_graph_kv_indices, buf, w._kv_indices_buf, kv_indptr)


def _method(tree: ast.Module, cls: str, names: tuple[str, ...]) -> ast.FunctionDef:
    (c,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    (f,) = [n for n in c.body if isinstance(n, ast.FunctionDef) and n.name in names]
    return f


@pytest.mark.parametrize("variant", VARIANTS)
def test_patched_backend_wires_the_graph_layout_as_simulated(variant):
    """The simulation above matches the patched file: the decode graph wrapper is built on
    _sglops_graph_kv's arange and carries the layout; capture plans go through
    _sglops_compact_kv; the replay plan leaves the wrapper's layout alone."""
    tree = ast.parse(patched_text(variant))
    cap = _method(tree, "FlashInferMLAAttnBackend",
                  ("init_forward_metadata_out_graph", "init_forward_metadata_capture_cuda_graph"))
    ctors = [n for n in ast.walk(cap) if isinstance(n, ast.Call) and ast.unparse(n.func) == "BatchMLAPagedAttentionWrapper"]
    kv = [ast.unparse(k.value) for c in ctors for k in c.keywords if k.arg == "kv_indices"]
    assert kv.count("self.cuda_graph_kv_indices if sglops_graph is None else sglops_graph[1]") == 1
    assert "decode_wrapper._sglops_graph = sglops_graph" in ast.unparse(cap)
    assert "_sglops_graph_kv(" in ast.unparse(cap)
    begin = _method(tree, "FlashInferMLAIndicesUpdaterDecode", ("call_begin_forward",))
    (branch,) = [n for n in ast.walk(begin) if isinstance(n, ast.If) and ast.unparse(n.test) == "not init_metadata_replay"
                 and "wrapper.plan(" in ast.unparse(n)]
    assert "_sglops_compact_kv(" in ast.unparse(ast.Module(branch.body, []))
    assert "_sglops" not in ast.unparse(ast.Module(branch.orelse, []))
