"""Probes of REAL vLLM release trees (PyPI's CUDA `vllm` wheels, Python files laid out as pip does; cached):
the MLA backends' FP8 read mode and arch gates, and the CUDA platform's MLA priority list per compute
capability. Two releases a year apart, so a probe that stops matching a release's lines shows as a changed
fact."""

from __future__ import annotations

import pytest

from sglops.probe.vllm_backends import scan_tree
from sglops.sandbox.vllm_trees import vllm_tree


@pytest.fixture(scope="module")
def old():
    return scan_tree(vllm_tree("0.10.2"))


@pytest.fixture(scope="module")
def new():
    return scan_tree(vllm_tree("0.32.0"))


def test_the_version_comes_from_the_tree(old, new):
    assert (old.version, new.version) == ("0.10.2", "0.32.0")


def test_triton_mla_refused_fp8_kv_then_dequantises_it_in_its_kernel(old, new):
    # NotImplementedError in 0.10.2
    assert old.backends["TRITON_MLA"]["facts"]["fp8_refused"]["hit"]
    facts = new.backends["TRITON_MLA"]["facts"]
    assert not facts["fp8_refused"]["hit"] and facts["fp8_kv_listed"]["hit"]
    assert facts["fp8_dequant_in_kernel"]["hit"] and facts["fp8_needs_sm89"]["hit"]
    assert any("triton_decode_attention.py" in ln for ln in facts["fp8_dequant_in_kernel"]["lines"])
    assert new.summary("TRITON_MLA").startswith(
        "TRITON_MLA: FP8 KV dequantised to the query dtype in the kernel"
    )


def test_blackwell_gates_moved_from_the_platform_into_the_backends(old, new):
    for name in ("FLASHINFER_MLA", "CUTLASS_MLA"):
        assert new.backends[name]["facts"]["arch_gate"]["capture"] == "10"
        assert (
            "arch_gate" in old.backends[name]["facts"] and not old.backends[name]["facts"]["arch_gate"]["hit"]
        )
    assert new.backends["FLASHMLA"]["facts"]["arch_gate"]["capture"] == "[9, 10]"
    assert any("is_device_capability(100)" in ln for ln in old.platform["sm100_branch"]["lines"])
    assert any(
        "Only FlashMLA and CUTLASS_MLA support fp8" in ln for ln in old.platform["fp8_mla_platform"]["lines"]
    )


def test_fp8_read_modes_of_the_blackwell_backends(new):
    assert new.backends["FLASHINFER_MLA"]["facts"]["fp8_scale_folded"]["hit"]
    assert new.backends["CUTLASS_MLA"]["facts"]["fp8_query"]["hit"]
    assert new.backends["FLASHMLA"]["facts"]["fp8_native_kernel"]["hit"]


def test_mla_priorities_per_compute_capability(old, new):
    # 0.10.2 picks with if-chains, no priority list
    assert old.priorities == {}
    assert new.priorities["10"][0][0] == "FLASHINFER_MLA" and new.priorities["10"][0][-1] == "TRITON_MLA"
    # SM120 (RTX PRO 6000): Triton MLA only
    assert new.priorities["12"] == [["TRITON_MLA"]]
    assert new.priorities["other"] == [["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA"]]
    assert not any("SPARSE" in n for lists in new.priorities.values() for names in lists for n in names)


def test_the_files_a_host_sends_back_probe_as_the_tree_itself(new):
    """probe-backends on a vLLM host: the files the probe
    set reads (host/engine_probe.py) are all it needs."""
    from sglops.host.engine_probe import read_files
    from sglops.probe.vllm_backends import files_read, scan_files

    tree = vllm_tree("0.32.0")
    files = read_files(str(tree), files_read())
    assert "platforms/cuda.py" in files and "_version.py" in files and len(files) < 40
    sent = scan_files(files, "h", {"package_dir": "/far/vllm", "version": None})
    assert sent.tree == "/far/vllm" and sent.version == "0.32.0" and sent.priorities == new.priorities
    assert {n: sent.summary(n) for n in sent.names()} == {n: new.summary(n) for n in new.names()}


def test_a_vllm_probe_record_is_not_taken_for_the_source_lines_of_a_profile(new, tmp_path, monkeypatch):
    """`inv profile` joins a trace's stacks with the host's newest SGLang probe record; a vLLM one has no such
    probes and is passed over (it would not read as one)."""
    from sglops.core import artifacts
    from sglops.trace import sources

    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path))
    new.host = "h"
    artifacts.keep("h", "r1", "probe.json", new, task="probe-backends")
    assert (tmp_path / "h" / "r1" / "probe.json").is_file()
    assert sources.latest_for("h") is None and sources.latest_for("h", "0.32.0") is None
