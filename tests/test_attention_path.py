"""The launch question (`inv probe-backends --arch/--model --sm --kv-dtype`) on real release trees from PyPI.

Each expectation was read by hand in the release's files; every test also reads the line the prediction names
back from the tree and checks it holds the deciding text, so a rule that drifts (or one credited to the wrong
line) fails. The trees are the wheels as pip installs them (sglops.sandbox.trees.sglang_site, cached, never
committed).
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from sglops.core.hosts import Host
from sglops.core.remote import LocalRemote
from sglops.probe.backend_history import removed_note
from sglops.probe.launch_eval import Evaluator, Func, Obj
from sglops.probe.launch_path import predict
from sglops.probe.launch_rules import launch_for, load_rules
from sglops.probe.launch_text import launch_lines
from sglops.probe.scan import scan
from sglops.probe.spec import load_probe_set, with_launch_probes
from sglops.sandbox import trees
from tests.conftest import inv_cmd

_REPORTS: dict[str, object] = {}


def _report(version: str):
    if version not in _REPORTS:
        root = trees.sglang_site(version) / "sglang"
        _REPORTS[version] = scan(
            LocalRemote(
                Host(name="local", address="local", python="/usr/bin/python3", sglang_root=str(root))
            ),
            with_launch_probes(load_probe_set()),
        )
    return _REPORTS[version]


def _line(version: str, where: str) -> str:
    rel, _, n = where.rpartition(":")
    return (trees.sglang_site(version) / "sglang" / rel).read_text().splitlines()[int(n) - 1]


def _predict(version: str, arch: str, sm: str, kv: str = "fp8_e4m3", **flags):
    return predict(
        _report(version),
        launch_for(load_rules(), arch=arch, config=None, config_source="", kv_dtype=kv, sm=sm, flags=flags),
    )


# (release, arch, sm, sparse, prefill, decode, the rule's
# file:line, text on that line, FP8 read mode of decode)
CASES = [
    (
        "0.5.23",
        "GlmMoeDsaForCausalLM",
        "sm120",
        True,
        "flashinfer_sparse_mla",
        "flashinfer_sparse_mla",
        "srt/arg_groups/overrides.py:670",
        'declared["dsa_decode_backend"] = backend',
        "packed_fp8_inline_scales",
    ),
    (
        "0.5.23",
        "GlmMoeDsaForCausalLM",
        "sm90",
        True,
        "flashmla_kv",
        "flashmla_kv",
        "srt/arg_groups/overrides.py:720",
        'declared["dsa_decode_backend"] = default',
        "packed_fp8_inline_scales",
    ),
    (
        "0.5.23",
        "DeepseekV3ForCausalLM",
        "sm120",
        False,
        "triton",
        "triton",
        "srt/arg_groups/model_override_base.py:351",
        'return "triton"',
        "q_quantised",
    ),
    (
        "0.5.23",
        "DeepseekV3ForCausalLM",
        "sm100",
        False,
        "flashinfer",
        "flashinfer",
        "srt/arg_groups/model_override_base.py:340",
        'return "flashinfer"',
        "whole_pool_cast",
    ),
    (
        "0.5.23",
        "DeepseekV3ForCausalLM",
        "sm90",
        False,
        "fa3",
        "fa3",
        "srt/arg_groups/model_override_base.py:338",
        'return "fa3"',
        "whole_pool_cast",
    ),
    (
        "0.5.11",
        "GlmMoeDsaForCausalLM",
        "sm120",
        True,
        "trtllm",
        "trtllm",
        "srt/server_args.py:1622",
        'self.nsa_decode_backend = "trtllm"',
        "q_quantised",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1][:8]}-{c[2]}")
def test_the_path_and_the_rule_that_chose_it(case):
    version, arch, sm, sparse, prefill, decode, rule, text, mode = case
    lp = _predict(version, arch, sm)
    assert not lp.undetermined and not lp.refused, (lp.undetermined, lp.refused)
    assert lp.mla is True and lp.sparse is sparse
    assert (lp.choice("prefill").value, lp.choice("decode").value) == (prefill, decode)
    d = lp.choice("decode")
    assert d.rule == rule and text in _line(version, rule)
    assert d.read_mode == mode and d.evidence
    # every evidence line exists in the tree
    for ev in d.evidence:
        assert _line(version, ev).strip()
    # each condition taken is read off the line it names
    for step in d.because:
        where = step.split(" ", 1)[0]
        cond = re.sub(r"^not \(|\)$|^\(", "", step.split(" ", 1)[1]).split(" [")[0]
        assert cond.split("(")[0].split(" ")[0] in _line(version, where), (step, _line(version, where))


def test_flashinfer_selects_flashinfer_mla_for_an_mla_model_through_the_registry():
    lp = _predict("0.5.23", "DeepseekV3ForCausalLM", "sm120", attention_backend="flashinfer")
    d = lp.choice("decode")
    assert (d.value, d.backend_file, d.read_mode) == ("flashinfer", "flashinfer_mla", "whole_pool_cast")
    assert d.evidence[0].endswith("flashinfer_mla_backend.py:761")
    assert "get_key_buffer" in _line("0.5.23", d.evidence[0])


def test_a_backend_a_release_removed_is_refused_with_the_release_that_removed_it():
    lp = _predict("0.5.23", "DeepseekV3ForCausalLM", "sm100", attention_backend="cutlass_mla")
    assert lp.refused and "--attention-backend cutlass_mla is not a choice of sglang 0.5.23" in lp.refused[0]
    assert "removed in 0.5.20 (last offered by 0.5.19)" in lp.refused[0]
    assert "cutlass_mla" in _report("0.5.17").facts["attention_backends"]
    assert "cutlass_mla" not in _report("0.5.23").facts["attention_backends"]


def test_a_renamed_backend_is_followed_to_its_new_name():
    lp = _predict("0.5.23", "DeepseekV3ForCausalLM", "sm100", attention_backend="tokenspeed_mla")
    assert lp.renamed and "deprecated alias of cutedsl_mla" in lp.renamed[0]
    where = lp.renamed[0].rsplit("(", 1)[1].rstrip(")")
    assert '"tokenspeed_mla": "cutedsl_mla"' in _line("0.5.23", where)
    assert lp.choice("decode").backend_file == "cutedsl_mla"


def test_a_start_up_check_of_the_release_refuses_what_it_would_refuse():
    lp = _predict("0.5.23", "GlmMoeDsaForCausalLM", "sm120", dsa_decode_backend="flashmla_sparse")
    assert lp.refused and "supports only flashinfer_sparse_mla" in lp.refused[0]
    where = lp.refused[0].split(": ", 1)[0]
    assert "raise ValueError" in _line("0.5.23", where)


def test_fp8_changes_the_sparse_path_and_the_answer_says_how():
    lp = _predict("0.5.23", "GlmMoeDsaForCausalLM", "sm120")
    assert any(
        c.startswith("--kv-cache-dtype bfloat16: prefill flashmla_sparse, decode trtllm") for c in lp.changes
    )
    text = "\n".join(launch_lines(lp.to_json()))
    assert (
        "path: SPARSE (DSA/NSA)" in text and "FP8 KV: reads FP8 itself (packed pages, inline scales)" in text
    )


def test_an_unknown_condition_is_reported_never_guessed():
    src = "def pick(x):\n    if mystery_flag():\n        return 'a'\n    return 'b'\n"
    fn = Func.parse({"file": "f.py", "name": "pick", "line": 10, "source": src})
    ev = Evaluator([], {}, re.compile("$^"), {})
    out = ev.run(fn)
    assert out.undetermined == "f.py:11: mystery_flag()" and out.returned is None
    bound = Evaluator([(re.compile(r"mystery_flag\(\)"), False)], {}, re.compile("$^"), {})
    assert bound.run(fn).returned == "b" and bound.run(fn).returned_at == "f.py:13"
    # and/or over an unknown: decided where Python would decide it
    cfg = Obj("config", lambda a: None)
    e2 = Evaluator([], {}, re.compile("$^"), {"cfg": cfg})
    assert e2.expr(ast.parse("False and unknown_x", mode="eval").body, {}, 0) is False
    assert e2.expr(ast.parse("cfg.archs or ['x']", mode="eval").body, {}, 0) == ["x"]


def test_history_notes():
    assert (
        removed_note("attention_backends", "cutlass_mla", "0.5.23")
        == "; removed in 0.5.20 (last offered by 0.5.19)"
    )
    assert removed_note("dsa_decode_backends", "flashinfer_sparse_mla", "0.5.11") == "; added in 0.5.17"


def test_the_task_answers_in_the_probes_one_round_trip():
    site = trees.sglang_site("0.5.23") / "sglang"
    r = inv_cmd(
        "probe-backends",
        "--host",
        "local",
        "--sglang-root",
        str(site),
        "--arch",
        "GlmMoeDsaForCausalLM",
        "--kv-dtype",
        "fp8_e4m3",
        "--sm",
        "sm120",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    launch = doc["launch"]
    assert [c["value"] for c in launch["choices"]] == ["flashinfer_sparse_mla"] * 2 and launch["sparse"]
    r = inv_cmd(
        "probe-backends", "--host", "local", "--sglang-root", str(site), "--arch", "GlmMoeDsaForCausalLM"
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr and "--sm" in r.stderr


def test_a_profile_naming_a_removed_backend_is_refused_before_a_restart(tmp_path):
    import yaml

    from sglops.core.errors import ConfigError
    from sglops.host import server_inspect
    from sglops.launch import render as launch_render
    from sglops.launch.profiles import load_profile

    pkg = str(trees.sglang_site("0.5.23") / "sglang")
    flags, choices = server_inspect.launch_arguments(pkg)
    tree = launch_render.TreeArgs(
        "0.5.23", pkg, set(flags), choices, server_inspect.tree_facts(pkg), "installed"
    )
    path = tmp_path / "old-cutlass.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "engine": "sglang",
                "model_path": "/models/dsv3",
                "attention_backend": "cutlass_mla",
                "kv_cache_dtype": "fp8_e4m3",
            }
        )
    )
    with pytest.raises(ConfigError) as exc:
        launch_render.render(load_profile(str(path)), None, tree)
    msg = str(exc.value)
    assert (
        "unknown attention backend 'cutlass_mla'" in msg
        and "removed in 0.5.20 (last offered by 0.5.19)" in msg
    )


def test_a_functions_probe_without_names_or_regex_stops_before_any_host(tmp_path):
    from sglops.core.errors import ConfigError
    from sglops.probe.spec import load_probe_set

    bad = tmp_path / "p.yaml"
    bad.write_text("probes:\n  - id: f\n    kind: functions\n    files: [srt/server_args.py]\n")
    with pytest.raises(ConfigError, match=r"probe 'f': kind functions takes names"):
        load_probe_set(bad)
    bad.write_text("probes:\n  - id: g\n    kind: functions\n    files: [a.py]\n    names: '(unclosed'\n")
    with pytest.raises(ConfigError, match=r"probe 'g': invalid regex"):
        load_probe_set(bad)


def test_the_seeds_glm5_profile_is_forced_dense_by_its_own_flag():
    """glm5-nvfp4-sm120-flashinfer sets --attention-backend flashinfer: the release switches a DSA model to
    `dsa` only when no attention backend is set, so that launch takes dense flashinfer_mla, whose pool cast is
    the seeds'."""
    site = trees.sglang_site("0.5.23") / "sglang"
    r = inv_cmd(
        "probe-backends",
        "--host",
        "local",
        "--sglang-root",
        str(site),
        "--profile",
        "glm5-nvfp4-sm120-flashinfer",
        "--arch",
        "GlmMoeDsaForCausalLM",
        "--sm",
        "sm120",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    lp = json.loads(r.stdout)["launch"]
    # from the profile
    assert lp["kv_dtype"] == "fp8_e4m3" and lp["flags"]["attention_backend"] == "flashinfer"
    assert lp["sparse"] is False and "is_attention_backend_not_set(cfg) is False" in lp["sparse_rule"]
    where = lp["sparse_rule"].split(": ", 1)[1].split(" ", 1)[0]
    assert "is_attention_backend_not_set" in _line("0.5.23", where)
    d = next(c for c in lp["choices"] if c["stage"] == "decode")
    assert (d["backend_file"], d["read_mode"]) == ("flashinfer_mla", "whole_pool_cast")


def test_a_start_that_died_after_resolving_its_arguments_is_checked_against_its_logged_server_args(tmp_path):
    """The GPU tier's default launch of 0.5.17 resolved fa3 and died importing it: what a dead start chose is
    in the `server_args=ServerArgs(...)` line it logged, and the check reads it there."""
    from sglops.launch.path_check import check_restart
    from sglops.launch.results import RestartResult

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["DeepseekV2ForCausalLM"]}))
    remote = LocalRemote(
        Host(
            name="local",
            address="local",
            python="/usr/bin/python3",
            sglang_root=str(trees.sglang_site("0.5.17") / "sglang"),
        )
    )
    args = {"model_path": str(model), "attention_backend": "triton", "kv_cache_dtype": "fp8_e4m3"}

    def dead(backend: str | None) -> RestartResult:
        logged = (
            []
            if backend is None
            else [
                f"[2026-12-06] server_args=ServerArgs(model_path='{model}', attention_backend='{backend}', "
                "decode_attention_backend=None, prefill_attention_backend=None, mm_attention_backend=None)"
            ]
        )
        return RestartResult(
            host="local",
            profile="p",
            ok=False,
            state="died",
            port=1,
            log_tail=[*logged, "ImportError: Can not import FA3 in sgl_kernel"],
        )

    same = dead("triton")
    cmp = check_restart(remote, same, args)
    assert cmp is not None and "logged server_args" in cmp["source"]
    assert same.confirmed["attention decode"].startswith("triton as predicted (--attention-backend)")
    other = dead("flashinfer")
    check_restart(remote, other, args)
    assert other.mismatches["attention decode"] == {"asked": "predicted triton", "effective": "flashinfer"}
    silent = dead(None)
    assert check_restart(remote, silent, args) is None and not silent.confirmed and not silent.mismatches
