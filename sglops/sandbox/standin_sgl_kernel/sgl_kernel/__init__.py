"""STAND-IN for sgl-kernel's CPU extension, installed only into the sandbox's SGLang CPU venv.

No PyPI wheel ships sgl-kernel's CPU ops (`sglang-kernel` is CUDA-only), and with SGLANG_USE_CPU_ENGINE=1
SGLang imports them. A Llama model on the plain-torch paths calls only two, both KV bookkeeping; they are
written here in torch from what the ops are documented to do. Any other op raises when called, naming this
stand-in, so a run can never silently depend on a kernel we did not write.
"""

from __future__ import annotations

import ctypes

import torch

# sglops facts report this package as a stand-in
STANDIN = True


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """For each request i: req_to_token[req_pool_indices[i],
    start[i]:end[i]] = the next slots of out_cache_loc."""
    # the row width; req_to_token's shape carries it
    del pool_len
    taken = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        n = end - start
        req_to_token[row, start:end] = out_cache_loc[taken : taken + n].to(req_to_token.dtype)
        taken += n


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """For every layer buffer (base address, row size in bytes): copy row src_loc[j] to row tgt_loc[j].

    All source rows are read before any target row is written, so overlapping moves are safe.
    """
    pairs = list(zip(tgt_loc.tolist(), src_loc.tolist(), strict=True))
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + src * stride, stride) for _, src in pairs]
        for (tgt, _), data in zip(pairs, rows, strict=True):
            ctypes.memmove(base + tgt * stride, data, stride)


def __getattr__(name: str):
    """SGLang imports many ops at module import time; only calling one we did not write is an error."""
    if name.startswith("_"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name}: not provided by the sglops CPU stand-in of sgl-kernel "
            "(only assign_req_to_token_pool_cpu and copy_all_layer_kv_cache_cpu are)"
        )

    missing.__name__ = name
    return missing
