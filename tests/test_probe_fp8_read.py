"""FP8 read mode per attention backend, followed into the
kernels it imports, on the real 0.5.15/0.5.17/0.5.23 trees.

Each row was read by hand in the release's files; the test also reads the evidence line back from the tree, so
a probe that drifts (or a mode decided on the wrong line) fails.
"""

from __future__ import annotations

import pytest

from sglops.core.errors import ConfigError
from sglops.core.hosts import Host
from sglops.core.remote import LocalRemote
from sglops.probe.scan import scan
from sglops.sandbox import trees

_REPORTS: dict[str, object] = {}


def _report(version: str):
    if version not in _REPORTS:
        root = trees.sglang_template(version)
        _REPORTS[version] = scan(
            LocalRemote(Host(name="local", address="local", python="/usr/bin/python3", sglang_root=str(root)))
        )
    return _REPORTS[version]


def _line(version: str, where: str) -> str:
    rel, _, n = where.rpartition(":")
    path = trees.sglang_template(version) / "python" / "sglang" / rel
    return path.read_text().splitlines()[int(n) - 1]


# (release, backend, mode, one evidence file:line, text that line must hold)
MODES = [
    (
        "0.5.23",
        "flashinfer_mla",
        "whole_pool_cast",
        "srt/layers/attention/flashinfer_mla_backend.py:822",
        "get_key_buffer(layer.layer_id).to(q.dtype)",
    ),
    (
        "0.5.23",
        "triton",
        "q_quantised",
        "kernels/ops/attention/decode_attention.py:661",
        "q_k = q.to(K_Buffer.dtype.element_ty)",
    ),
    (
        "0.5.23",
        "flashmla",
        "q_quantised",
        "srt/layers/attention/flashmla_backend.py:476",
        "scaled_fp8_quant(reshape_q",
    ),
    (
        "0.5.23",
        "flashinfer",
        "dequant_in_smem",
        "srt/layers/attention/flashinfer_backend.py:1605",
        "self.q_data_type = model_runner.dtype",
    ),
    (
        "0.5.23",
        "torch_native",
        "rows_cast",
        "srt/layers/attention/torch_native_backend.py:145",
        "per_req_key = per_req_key.to(per_req_query.dtype)",
    ),
    (
        "0.5.23",
        "flashattention",
        "whole_pool_cast",
        "srt/layers/attention/flashattention_backend.py:2350",
        "get_key_buffer(layer.layer_id).to(q.dtype)",
    ),
    (
        "0.5.17",
        "flashinfer_mla",
        "whole_pool_cast",
        "srt/layers/attention/flashinfer_mla_backend.py:660",
        "get_key_buffer(layer.layer_id).to(q.dtype)",
    ),
    (
        "0.5.17",
        "triton",
        "q_quantised",
        "kernels/ops/attention/decode_attention.py:487",
        "q_k = q.to(K_Buffer.dtype.element_ty)",
    ),
    (
        "0.5.17",
        "flashmla",
        "q_quantised",
        "srt/layers/attention/flashmla_backend.py:446",
        "scaled_fp8_quant(reshape_q",
    ),
    (
        "0.5.15",
        "triton",
        "q_quantised",
        "srt/layers/attention/triton_ops/decode_attention.py:447",
        "q_k = q.to(K_Buffer.dtype.element_ty)",
    ),
    (
        "0.5.15",
        "flashinfer_mla",
        "whole_pool_cast",
        "srt/layers/attention/flashinfer_mla_backend.py:639",
        "get_key_buffer(layer.layer_id).to(q.dtype)",
    ),
    (
        "0.5.15",
        "cutlass_mla",
        "dequant_in_smem",
        "srt/layers/attention/cutlass_mla_backend.py:82",
        "self.q_data_type = model_runner.dtype",
    ),
]


@pytest.mark.parametrize("version,backend,mode,where,text", MODES, ids=[f"{m[0]}-{m[1]}" for m in MODES])
def test_fp8_read_mode_with_evidence(version, backend, mode, where, text):
    f = _report(version).facts
    assert f[f"backend.{backend}.fp8_read_mode"] == mode
    assert where in f[f"backend.{backend}.fp8_read_evidence"]
    assert text in _line(version, where)


@pytest.mark.parametrize("version", ["0.5.15", "0.5.17", "0.5.23"])
def test_unknown_and_absent_are_said(version):
    f = _report(version).facts
    assert (
        f["backend.intel_amx.fp8_read_mode"] == "unknown" and f["backend.intel_amx.fp8_read_evidence"] == []
    )
    # cutedsl_mla arrived in 0.5.17
    if version == "0.5.15":
        assert f["backend.cutedsl_mla.exists"] is False and f["backend.cutedsl_mla.fp8_read_mode"] is None


def test_triton_verdict_names_the_kernel_line_not_no_fp8_handling():
    rep = _report("0.5.23")
    v = rep.backend("triton").verdict(rep.facts)
    assert "quantises q" in v and "decode_attention.py:661" in v and "differ" in v


# (release, backend, where, kind, platform, values, model)
RULES = [
    (
        "0.5.23",
        "trtllm_mla",
        "srt/arg_groups/overrides.py:1210",
        "requirement",
        "is_blackwell",
        ["trtllm_mla"],
        None,
    ),
    (
        "0.5.23",
        "cutedsl_mla",
        "srt/arg_groups/overrides.py:1244",
        "requirement",
        "is_sm100",
        ["cutedsl_mla"],
        None,
    ),
    (
        "0.5.23",
        "flashattention",
        "srt/arg_groups/attention_hook.py:648",
        "requirement",
        "is_sm100_or_sm110",
        ["fa4"],
        None,
    ),
    (
        "0.5.23",
        "triton",
        "srt/arg_groups/model_overrides/nemotron_h.py:147",
        "model_override",
        "is_sm100",
        ["triton"],
        "nemotron_h",
    ),
    (
        "0.5.17",
        "trtllm_mla",
        "srt/arg_groups/overrides.py:2120",
        "requirement",
        "is_blackwell_supported",
        ["trtllm_mla"],
        None,
    ),
    (
        "0.5.17",
        "flashattention",
        "srt/server_args.py:7856",
        "requirement",
        "is_sm100_or_sm110_supported",
        ["fa4"],
        None,
    ),
    (
        "0.5.15",
        "trtllm_mla",
        "srt/arg_groups/overrides.py:1595",
        "requirement",
        "is_blackwell_supported",
        ["trtllm_mla"],
        None,
    ),
]


@pytest.mark.parametrize(
    "version,backend,where,kind,platform,values,model", RULES, ids=[f"{r[0]}-{r[1]}-{r[3]}" for r in RULES]
)
def test_argument_checks_are_rules_with_model_and_platform(
    version, backend, where, kind, platform, values, model
):
    rules = _report(version).facts[f"backend.{backend}.arch_rules"]
    rule = next(r for r in rules if r["where"] == where)
    assert (rule["kind"], rule["platform"], rule["values"], rule["model"]) == (kind, platform, values, model)


def test_nemotron_override_is_credited_by_exact_name_only():
    """nemotron_h.py:147 sits under `attention_backend = "triton"` and a speculative-draft `"flashinfer"`: it
    is triton's (a Nemotron-H override), never flashinfer_mla's (by alias) nor flashinfer's (a draft
    backend)."""
    f = _report("0.5.23").facts
    assert (
        f["backend.flashinfer_mla.arch_guard_args"] is False and f["backend.flashinfer_mla.arch_rules"] == []
    )
    assert not any("nemotron_h" in r["where"] for r in f["backend.flashinfer.arch_rules"])
    assert any(r["model"] == "nemotron_h" for r in f["backend.triton.arch_rules"])


def test_follow_is_only_for_backend_probes(tmp_path):
    from sglops.probe.spec import load_probe_set

    bad = tmp_path / "p.yaml"
    bad.write_text("probes:\n  - id: x\n    files: [a.py]\n    regex: 'x'\n    follow: [kernels/*.py]\n")
    with pytest.raises(ConfigError, match=r"p.yaml:2: probe 'x': follow .* is for scope: backend"):
        load_probe_set(bad)
