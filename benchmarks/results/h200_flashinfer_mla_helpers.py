from functools import partial

import torch

# --- gather-cast sglang-0.5.23, patched (extracted by sglops)
try:
    from sglops_kernels.gather_cast import cast_live_rows as _fused_cast_live_rows
except ImportError:
    _fused_cast_live_rows = None


def _sglops_graph_rows(kv_indices_buf, bs, row_width):
    """(index buffer, most live rows) of the CUDA-graph decode wrapper of batch size bs.

    A replay rewrites the graph's kv_indices buffer and kv_indptr in place; the captured cast
    reads the live count kv_indptr[bs] from the device, so it costs the rows live at replay.
    The most is bs x req_to_token width (a request's slots fill one row), at most the buffer."""
    return (kv_indices_buf, min(bs * row_width, kv_indices_buf.numel()))


def _sglops_record_rows(wrapper, kv_indices, kv_indptr, enable):
    """At plan time: remember where the rows of this plan are (ids, live count, most rows).

    Eager plans: this plan's kv_indices and its length. Graph wrappers built with
    _sglops_graph_rows: the graph's index buffer and kv_indptr[bs] as a device tensor, which
    replays rewrite in place. Other graph wrappers (verify, draft) and disabled plans (speculative,
    DCP, a KV pool in the compute dtype) keep the whole-pool cast."""
    graph = getattr(wrapper, "_sglops_graph", None)
    if not enable:
        wrapper._sglops_rows = None
    elif getattr(wrapper, "_use_cuda_graph", False):
        wrapper._sglops_rows = None if graph is None else (graph[0], kv_indptr[-1:], graph[1])
    else:
        wrapper._sglops_rows = (kv_indices, kv_indices.numel(), kv_indices.numel())


def _sglops_cast_kv(pool, wrapper, dtype):
    """The KV buffer for wrapper.run: pool-shaped, its live rows cast to dtype (else the whole pool)."""
    rows = getattr(wrapper, "_sglops_rows", None)
    if rows is None or pool.element_size() != 1:
        return pool.to(dtype)
    ids, live, most = rows
    if not isinstance(live, torch.Tensor) and pool.is_cuda and torch.cuda.is_current_stream_capturing():
        return pool.to(dtype)
    if _fused_cast_live_rows is not None:
        return _fused_cast_live_rows(pool, ids, live, most, out_dtype=dtype)
    count = min(most, ids.numel())
    if count >= pool.shape[0]:
        return pool.to(dtype)
    sel = ids[:count].long()
    out = torch.empty(pool.shape, dtype=dtype, device=pool.device)
    out[sel] = pool.view(torch.uint8)[sel].view(pool.dtype).to(dtype)
    return out


# --- fp8-kv-direct sglang-0.5.23, patched (extracted by sglops)
def _sglops_fp8_plan_kwargs(wrapper, kv_dtype):
    """plan() keywords for an FP8 KV pool; none for BF16 KV and for SGLang's fast re-plans
    (functools.partial stand-ins for plan under CUDA graphs, which take no keywords)."""
    if kv_dtype != torch.float8_e4m3fn or isinstance(wrapper.plan, partial):
        return {}
    return {"scale_mode": "kv-per-tensor"}


def _sglops_fp8_run_kwargs(kv_buffer):
    """run() keywords for an FP8 KV buffer. The MLA pool stores cache_k.to(fp8) unscaled
    (MLATokenToKVPool.set_kv_buffer) and the stock path dequantises with .to(q.dtype), so the
    per-tensor scale that reproduces it is 1."""
    if kv_buffer.dtype != torch.float8_e4m3fn:
        return {}
    return {"ckv_scale": 1.0, "kpe_scale": 1.0}
