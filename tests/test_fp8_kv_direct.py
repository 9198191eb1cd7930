"""fp8-kv-direct calls FlashInfer's FP8 MLA on its terms, and requires exactly the probe facts that
say a FlashInfer release offers those terms.

FlashInfer 0.7.2 (and 0.7.4, benchmarks/results/flashinfer_fp8_mla_probe_facts.json) takes FP8 KV in
MLA only with scale_mode="kv-per-tensor" in plan() and ckv_scale/kpe_scale in run(), on SM90 only;
0.6.12 has no FP8 MLA. The patched calls ran on an H200 (benchmarks/gpu_flashinfer_mla.py).
"""

from __future__ import annotations

import ast
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglops.patch.names import parse as parse_python

torch = pytest.importorskip("torch")

from sglops.patch import diff as patch_diff  # noqa: E402
from sglops.patch.spec import load  # noqa: E402
from sglops.sandbox import trees  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from probe_flashinfer_releases import probe_package  # noqa: E402

PATCH = load("fp8-kv-direct")
VARIANTS = [v.name for v in PATCH.variants]
FP8_FACTS = (
    "flashinfer_mla_hopper_fp8",
    "flashinfer_mla_fp8_scale_mode",
    "flashinfer_mla_fp8_run_scales",
    "flashinfer_mla_fp8_sm90_only",
)


def patched_text(variant: str) -> str:
    v = PATCH.variant(variant)
    (fp,) = v.files()
    src = (trees.sglang_template(v.sglang[0]) / fp.path).read_text()
    new, conflicts = patch_diff.apply([fp], {fp.path: src})
    assert not conflicts
    return new[fp.path]


def helpers(text: str) -> dict:
    tree = parse_python(text)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_sglops_fp8_")]
    ns: dict = {"torch": torch, "partial": partial}
    exec(compile(ast.Module(keep, []), "fp8-helpers", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def release_facts() -> dict:
    return {v: probe_package(trees.flashinfer_site(v) / "flashinfer")["facts"] for v in ("0.7.2", "0.6.12")}


def unmet(facts: dict) -> list:
    return [why for r in PATCH.requires if (why := r.check(facts))]


def test_probes_read_fp8_mla_terms_per_release(release_facts):
    assert all(release_facts["0.7.2"][f] is True for f in FP8_FACTS)
    # files scanned, nothing found
    assert all(release_facts["0.6.12"][f] is False for f in FP8_FACTS)


def test_requirements_are_the_probe_facts(release_facts):
    assert {r.fact for r in PATCH.requires} == {
        "flashinfer_mla_hopper_fp8",
        "flashinfer_mla_fp8_scale_mode",
        "flashinfer_mla_fp8_run_scales",
        "gpu_sm",
    }
    assert unmet({**release_facts["0.7.2"], "gpu_sm": "sm90"}) == []
    assert [m.split(" ")[0] for m in unmet({**release_facts["0.7.2"], "gpu_sm": "sm120"})] == ["gpu_sm"]
    assert len(unmet({**release_facts["0.6.12"], "gpu_sm": "sm90"})) == 3


@pytest.mark.parametrize("variant", VARIANTS)
def test_plans_and_runs_carry_the_fp8_terms(variant):
    text = patched_text(variant)
    ns = helpers(text)
    real = SimpleNamespace(plan=lambda *a, **k: None)
    fast = SimpleNamespace()
    # SGLang's fast re-plan under graphs: positional only
    fast.plan = partial(lambda *a: None, fast)
    assert ns["_sglops_fp8_plan_kwargs"](real, torch.float8_e4m3fn) == {"scale_mode": "kv-per-tensor"}
    assert ns["_sglops_fp8_plan_kwargs"](fast, torch.float8_e4m3fn) == {}
    assert ns["_sglops_fp8_plan_kwargs"](real, torch.bfloat16) == {}
    fp8 = torch.zeros(2, 1, 576, dtype=torch.float8_e4m3fn)
    assert ns["_sglops_fp8_run_kwargs"](fp8) == {"ckv_scale": 1.0, "kpe_scale": 1.0}
    assert ns["_sglops_fp8_run_kwargs"](fp8.to(torch.bfloat16)) == {}
    tree = parse_python(text)
    calls = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    plans = [c for c in calls if c.startswith(("wrapper.plan(", "wrapper_paged.plan("))]
    runs = [c for c in calls if c.startswith(("decode_wrapper.run(", "prefill_wrapper_paged.run("))]
    # the first plan of each updater and the paged prefill plan carry the scale mode; replays do not
    assert sum("**_sglops_fp8_plan_kwargs(" in c for c in plans) == 2
    assert len(runs) == 2 and all("**_sglops_fp8_run_kwargs(" in c for c in runs)
    assert "get_key_buffer(layer.layer_id).to(q.dtype)" not in text
