"""A patch that calls a kernel requires that kernel, built for this host's GPU: fp8-mla-native on a host where
`inv build-kernel fp8_mla_decode` never ran is refused with the way out, and the tree is untouched."""

from __future__ import annotations

import json
import subprocess

import pytest

from sglops.patch.kernel_facts import kernel_facts, same_sm
from sglops.patch.spec import load
from tests.conftest import inv_cmd

MLA = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
NEED = "kernel_fp8_mla_decode_for_this_gpu"


@pytest.mark.parametrize(
    "arch, sm, same",
    [
        ("sm_90a", "sm90", True),
        ("sm_120", "sm120", True),
        ("sm_90a", "sm120", False),
        ("sm_120", "sm12", False),
        (None, "sm90", False),
        ("sm_90a", None, False),
    ],
)
def test_build_arch_and_gpu_fact_name_the_same_sm(arch, sm, same):
    assert same_sm(arch, sm) is same


def test_facts_from_the_kernel_record_meet_or_refuse_the_requirement():
    patch = load("fp8-mla-native")
    (req,) = [r for r in patch.requires if r.fact == NEED]
    built = kernel_facts(
        [{"name": "fp8_mla_decode", "arch": "sm_90a"}, {"name": "gather_cast", "arch": "sm_90a"}], "sm90"
    )
    assert built == {
        "kernel_fp8_mla_decode_arch": "sm_90a",
        f"{NEED}": True,
        "kernel_gather_cast_arch": "sm_90a",
        "kernel_gather_cast_for_this_gpu": True,
    }
    assert req.check(built) is None
    other_gpu = kernel_facts([{"name": "fp8_mla_decode", "arch": "sm_90a"}], "sm120")
    assert "needs == True" in req.check(other_gpu) and "build-kernel fp8_mla_decode" in req.check(other_gpu)
    assert "unknown on this host" in req.check(kernel_facts([], "sm90"))


@pytest.fixture(scope="module")
def ksb(make_sandbox):
    return make_sandbox(
        [{"name": "k23", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox"]}], name="kernelfacts"
    )


def test_fp8_mla_native_is_refused_where_its_kernel_was_never_built(ksb, monkeypatch, tmp_path):
    monkeypatch.setenv("SGLOPS_INVENTORY", str(ksb.inventory))
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    root = ksb.host("k23").sglang_root
    before = (root / MLA).read_bytes()
    proc = inv_cmd("apply-patch", "fp8-mla-native", "--host", "k23")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert NEED in proc.stderr and "build-kernel fp8_mla_decode" in proc.stderr and "--force" in proc.stderr
    assert (root / MLA).read_bytes() == before
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert status == ""
    listed = json.loads(inv_cmd("patches", "--host", "k23", "--json").stdout)
    assert "fp8-mla-native" not in json.dumps(listed.get("applied", []))
