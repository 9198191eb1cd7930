"""Kernel names in charts and tables: shortened at a word
boundary, the full name kept (real names from real traces)."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from sglops.trace.analysis import analyze
from sglops.trace.diff import diff_specs
from sglops.trace.names import _SEPARATORS, ELLIPSIS, full_names_markdown, short_kernel, shorten
from sglops.views.trace import markdown as trace_markdown
from sglops.views.trace_diff import markdown as diff_markdown

TRACES = Path(__file__).parent / "data" / "traces"


@cache
def real_kernel_names() -> list[str]:
    names = set()
    for f in sorted(TRACES.glob("*.trace.json.gz")):
        for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]:
            if e.get("cat") == "kernel":
                names.add(e["name"])
    return sorted(names)


def _full(prefix: str) -> str:
    (name,) = [n for n in real_kernel_names() if n.startswith(prefix)]
    return name


# (start of the real name, width, what a chart or table shows)
CASES = [
    (
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()()"
            " const::{lambda()#12}"
        ),
        72,
        "unrolled_elementwise_kernel[direct_copy_kernel_cuda, BFloat16]",
    ),
    (
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()()"
            " const::{lambda()#7}"
        ),
        72,
        "unrolled_elementwise_kernel[direct_copy_kernel_cuda, float]",
    ),
    (
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()()"
            " const::{lambda()#12}"
        ),
        40,
        "unrolled_elementwise_kernel[direct_copy…",
    ),
    (
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda()#3}::operator()()"
            " const::{lambda()#12}"
        ),
        60,
        "unrolled_elementwise_kernel[direct_copy, BFloat16]",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add",
        72,
        "vectorized_elementwise_kernel[CUDAFunctor_add, BFloat16]",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add",
        40,
        "vectorized_elementwise_kernel…",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda",
        72,
        "vectorized_elementwise_kernel[bfloat16_copy_kernel_cuda, float]",
    ),
    (
        (
            "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous"
            " namespace)::launch_clamp_scalar"
        ),
        72,
        "vectorized_elementwise_kernel[launch_clamp_scalar, BFloat16]",
    ),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg", 72, "cunn_SoftMaxForwardReg[float]"),
    ("void at::native::vectorized_gather_kernel", 72, "vectorized_gather_kernel"),
    # a library's namespace stays
    ("void cublasLt::splitKreduce_kernel", 72, "cublasLt::splitKreduce_kernel"),
    ("nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_NNT", 72, "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_NNT"),
    ("nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_NNT", 30, "nvjet_sm90_tst_64x16_64x16…"),
    ("nvjet_sm90_tst_192x8_64x8_4x1_v_bz_splitK_NNT", 20, "nvjet_sm90_tst…"),
]


@pytest.mark.parametrize(("start", "width", "shown"), CASES)
def test_real_kernel_names_shorten_to_what_a_reader_needs(start, width, shown):
    name = _full(start)
    assert len(name) >= len(shown)
    assert short_kernel(name, width) == shown
    assert len(shown) <= width


def _words(text: str) -> set[str]:
    return {w for w in re.split("[" + re.escape("".join(sorted(_SEPARATORS))) + "]", text) if w}


@pytest.mark.parametrize("width", [12, 20, 30, 40, 50, 60, 72, 90])
def test_no_real_kernel_name_is_ever_cut_mid_word(width):
    names = real_kernel_names()
    assert len(names) >= 14
    for name in names:
        shown = short_kernel(name, width)
        kept = shown.removesuffix(ELLIPSIS)
        # every word shown is a whole word of the name
        assert _words(kept) <= _words(name), (width, shown)
        first_word = next((i for i, ch in enumerate(kept) if ch in _SEPARATORS), len(kept))
        # longer than width only to keep a word whole
        assert len(shown) <= width or len(kept) == first_word


def test_shorten_edge_cases():
    assert shorten("aten::linear", 60) == "aten::linear"
    assert shorten("scheduler.run_batch.forward_extend", 20) == "scheduler.run_batch…"
    # nothing to cut at: whole
    assert shorten("averyveryverylongsingleword", 5) == "averyveryverylongsingleword"
    assert shorten("averyveryverylongword_tail", 5) == "averyveryverylongword…"


def test_full_names_stay_in_the_reports_and_the_json():
    a = analyze([str(TRACES / "h200_decode_fullcast.trace.json.gz")])
    page = trace_markdown(a)
    top = [n for n, _, _ in a.top_kernels(15)]
    copy = next(n for n in top if "direct_copy_kernel_cuda" in n)
    # table shows it short, the list below in full
    assert f"`{short_kernel(copy)}`" in page and copy in page
    assert "<details><summary>full kernel names</summary>" in page
    assert copy in json.dumps(a.to_json())
    # nothing shortened: no list
    assert full_names_markdown(["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT"]) == []

    diff = diff_specs(
        str(TRACES / "h200_decode_fullcast.trace.json.gz"),
        str(TRACES / "h200_decode_gathercast.trace.json.gz"),
    )
    md = diff_markdown(diff)
    assert "full kernel names" in md and copy in md
    assert any(d.name == copy for d in diff.kernels)
