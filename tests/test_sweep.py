"""`inv sweep` without a server: the candidates, the probe facts that rule each out (real 0.5.17 / 0.5.23
trees), the table's recommendation, and the dry run of the GPU tier's sweep over real SSH on a sandbox H200
(stand-in nvidia-smi saying cc 9.0, the real sglang 0.5.17 tree): the plan only, nothing changed or recorded.
"""

from __future__ import annotations

import json

import pytest

from sglops.core.errors import ConfigError
from sglops.core.hosts import Host
from sglops.core.remote import LocalRemote
from sglops.experiment.ab_plan import Found
from sglops.experiment.sweep_plan import candidates, parse_candidate, platform_majors, screen
from sglops.experiment.sweep_result import Row, SweepResult
from sglops.patch import spec as patch_spec
from sglops.probe.scan import scan
from sglops.probe.spec import load_probe_set
from sglops.sandbox import trees
from sglops.views.sweep import sweep_markdown
from tests.conftest import inv_cmd

_FACTS: dict[str, dict] = {}
# the GPU tier's base profile, in short
MLA = {"attention_backend": "flashinfer", "kv_cache_dtype": "fp8_e4m3"}
GATHER = {"gather-cast": patch_spec.load("gather-cast").files}


def facts(version: str) -> dict:
    if version not in _FACTS:
        root = trees.sglang_template(version)
        _FACTS[version] = scan(
            LocalRemote(Host(name="local", address="local", python="/usr/bin/python3", sglang_root=str(root)))
        ).facts
    return _FACTS[version]


def _screen(spec: str, version: str = "0.5.17", cc: str | None = "9.0", base: dict | None = None):
    return screen(parse_candidate(spec, 1), base or MLA, facts(version), load_probe_set().aliases, cc, GATHER)


# -- what rules a candidate out ------------------------------------------------------------------------------
def test_trtllm_mla_on_an_h200_is_ruled_out_by_the_blackwell_requirement():
    s = _screen("attention_backend=trtllm_mla")
    assert s.reasons == [
        "trtllm_mla requires is_blackwell_supported (overrides.py:2120); the host's GPU is sm90"
    ]
    # an RTX PRO 6000 (SM120) may run it
    assert _screen("attention_backend=trtllm_mla", cc="12.0").reasons == []
    assert "the host has no GPU" in _screen("attention_backend=trtllm_mla", cc=None).reasons[0]
    on_cpu = _screen("attention_backend=trtllm_mla", cc="12.0", base={**MLA, "device": "cpu"})
    # no GPU check holds on a CPU server
    assert on_cpu.reasons[0].endswith("and the server runs on device cpu")


def test_a_backend_this_release_does_not_offer_is_ruled_out_with_its_choices():
    s = _screen("attention_backend=cutlass_mla", version="0.5.23")
    assert len(s.reasons) == 1 and s.reasons[0].startswith(
        "--attention-backend cutlass_mla is not a choice of sglang 0.5.23 ("
    )
    # 0.5.17 still has it
    assert _screen("attention_backend=cutlass_mla", version="0.5.17").reasons == []
    s = _screen("kv_cache_dtype=fp4_e2m1", version="0.5.23")
    assert s.reasons and "--kv-cache-dtype fp4_e2m1 is not a choice" in s.reasons[0]


def test_q_quantising_backends_are_marked_differs_by_design_only_with_fp8_kv():
    assert _screen("attention_backend=triton").q_quantised is True
    assert _screen("attention_backend=flashmla").q_quantised is True
    fi = _screen("attention_backend=flashinfer")
    assert fi.q_quantised is False and fi.fp8_modes == {
        "flashinfer": "dequant_in_smem",
        "flashinfer_mla": "whole_pool_cast",
    }
    assert any("flashinfer_mla whole_pool_cast (flashinfer_mla_backend.py:598)" in n for n in fi.notes)
    bf16 = {"attention_backend": "flashinfer", "kv_cache_dtype": "bf16"}
    # q.to(bf16) changes nothing
    assert _screen("attention_backend=triton", base=bf16).q_quantised is False


def test_a_patch_on_a_backend_the_candidate_never_runs_is_ruled_out():
    s = _screen("attention_backend=triton+gather-cast")
    assert s.reasons == [
        "patch gather-cast changes only flashinfer_mla_backend.py, which triton never runs (same "
        "code as without it)"
    ]
    assert _screen("attention_backend=flashinfer+gather-cast").reasons == []


def test_a_dsa_profile_rules_out_backends_without_a_sparse_path():
    dsa = {**MLA, "dsa_decode_backend": "flashmla_kv"}
    s = _screen("attention_backend=triton", version="0.5.23", base=dsa)
    assert any("a DSA profile (dsa_decode_backend) and triton has no NSA/DSA path" in r for r in s.reasons)
    assert not any("DSA" in r for r in _screen("attention_backend=dsa", version="0.5.23", base=dsa).reasons)


def test_model_overrides_are_notes_not_reasons():
    s = _screen("attention_backend=triton", version="0.5.23")
    assert s.reasons == [] and any(
        "nemotron_h.py:147: a nemotron_h override picks triton" in n for n in s.notes
    )


@pytest.mark.parametrize(
    "pred,majors",
    [
        ("is_blackwell", {10, 11, 12}),
        ("is_blackwell_supported", {10, 11, 12}),
        ("is_sm100", {10}),
        ("is_sm100_or_sm110_supported", {10, 11}),
        ("is_sm90_supported", {9}),
        ("is_sm120", {12}),
        ("get_device_capability", None),
    ],
)
def test_platform_predicates(pred, majors):
    assert platform_majors(pred) == majors


# -- candidates
# ------------------------------------------------------------------------------------------------
def test_cross_product_of_vary_and_patch_axes_and_explicit_lists():
    cs = candidates(
        ["attention_backend=flashinfer,triton", "kv_cache_dtype=fp8_e4m3,bf16"], ["none", "gather-cast"], None
    )
    assert len(cs) == 8 and cs[0].label == "attention_backend=flashinfer,kv_cache_dtype=fp8_e4m3"
    assert cs[1].label == "attention_backend=flashinfer,kv_cache_dtype=fp8_e4m3+gather-cast"
    listed = candidates(
        None,
        None,
        [
            "attention_backend=flashinfer",
            "attention_backend=flashinfer+gather-cast",
            "mem_fraction_static=0.5",
        ],
    )
    assert [c.patches for c in listed] == [(), ("gather-cast",), ()] and listed[2].settings == (
        ("mem_fraction_static", 0.5),
    )


@pytest.mark.parametrize(
    "vary,patches,listed,msg",
    [
        (["attention_backend"], None, None, "write KEY=VALUE"),
        (["attn=triton,flashmla"], None, None, "'attn' is not a profile setting"),
        (["max_total_tokens=lots,2"], None, None, "max_total_tokens takes a int, got 'lots'"),
        (["attention_backend=triton"], None, None, "at least two candidates"),
        (["attention_backend=triton,triton"], None, None, "a value is given twice"),
        (None, None, None, "nothing to sweep"),
        (["attention_backend=a,b"], None, ["attention_backend=a"], "not both"),
        (None, None, ["attention_backend=a", "attention_backend=a"], "listed twice"),
        (None, None, ["attention_backend=a+../x", "attention_backend=b"], "patch name"),
    ],
)
def test_bad_candidates_are_one_line(vary, patches, listed, msg):
    with pytest.raises(ConfigError, match=msg):
        candidates(vary, patches, listed)


# -- the table's recommendation
# ---------------------------------------------------------------------------------
def _row(i: int, label: str, tok: float | None, identity: str | None, status: str = "started", **kw) -> Row:
    c = parse_candidate(label, i)
    return Row(
        c,
        status=status,
        decode_tok_s=tok,
        ci95=[tok * 0.9, tok * 1.1] if tok else None,
        identity=identity,
        **kw,
    )


def _result(rows: list[Row]) -> SweepResult:
    return SweepResult(
        host="h",
        profile="p",
        sglang_version="0.5.17",
        compute_capability="9.0",
        found=Found(True, "p", 30000, []),
        rows=rows,
        bench={},
        managed=[],
        restore={"ok": True},
        wall_s=100.0,
        split={"restarts": 60.0, "benches": 30.0, "profiles": 0.0, "tool": 10.0},
    )


def test_recommendation_fastest_identical_and_fastest_overall():
    r = _result(
        [
            _row(1, "attention_backend=flashinfer", 132.0, "baseline"),
            _row(2, "attention_backend=flashinfer+gather-cast", 530.0, "identical"),
            _row(
                3, "attention_backend=flashmla", 900.0, "differs by design", first_token=3, max_dlogprob=0.25
            ),
            _row(
                4,
                "attention_backend=trtllm_mla",
                None,
                None,
                status="skipped",
                reasons=["trtllm_mla requires is_blackwell_supported (overrides.py:2120)"],
            ),
            _row(
                5,
                "attention_backend=fa3",
                None,
                None,
                status="crashed",
                crash="invalid_argument",
                crash_label="invalid argument",
                crash_line="ValueError: boom",
            ),
        ]
    )
    line = r.recommendation()
    assert line.startswith(
        "fastest with outputs identical to the baseline: attention_backend=flashinfer+gather-cast "
        "(530.0 [477.0, 583.0] tok/s)"
    )
    assert (
        "fastest overall: attention_backend=flashmla (900.0" in line
        and "differs by design at token 3" in line
    )
    md = sweep_markdown(r)
    assert "| 4 | `attention_backend=trtllm_mla` | skipped: trtllm_mla requires" in md
    assert "crashed: invalid argument: ValueError: boom" in md
    assert "restarts 60.0 s, benches 30.0 s, profiles 0.0 s, the tool's own steps 10.0 s" in md
    only = _result(
        [_row(1, "attention_backend=a", 10.0, "baseline"), _row(2, "attention_backend=b", 5.0, "differs")]
    )
    assert only.recommendation().endswith("it is also the fastest overall")
    fell = _result(
        [
            _row(1, "attention_backend=torch_native", 10.0, "baseline"),
            _row(
                2,
                "attention_backend=intel_amx",
                12.0,
                "identical",
                served_as={"attention_backend": "torch_native"},
            ),
        ]
    )
    # a fallback is not the candidate asked for
    assert fell.recommendation().startswith(
        "fastest with outputs identical to the baseline: attention_backend=torch_native (10.0"
    )
    assert fell.rows[1].outcome() == (
        "started, but the server runs attention_backend=torch_native (asked intel_amx): "
        "not the candidate asked for"
    )
    none = _result([_row(1, "attention_backend=a", None, None, status="crashed", crash="x")])
    assert none.recommendation() == "no recommendation: no candidate started and benched"


# -- the GPU tier's sweep, planned over real SSH on a sandbox H200 ------------------------------------------
@pytest.fixture(scope="module")
def h200(make_sandbox):
    return make_sandbox(
        [
            {
                "name": "h200",
                "sglang": "0.5.17",
                "flashinfer": "0.6.12",
                "gpus": {"count": 1, "name": "NVIDIA H200", "compute_cap": "9.0", "memory_mib": 143771},
                "vars": {
                    "model_dir": "/models/tiny-mla",
                    "pythonpath": "/site",
                    "jit_dir": "/jit",
                    "trace_dir": "/traces",
                },
            }
        ],
        name="sweep",
    )


GPU_SWEEP = [
    "sweep",
    "--host",
    "h200",
    "--profile",
    "h200-tiny-mla-fp8",
    "--candidates",
    "attention_backend=flashinfer;attention_backend=flashinfer+gather-cast;attention_backend=triton;"
    "attention_backend=flashmla;attention_backend=trtllm_mla",
    "--dry-run",
]


def test_gpu_sweep_dry_run_plans_and_writes_nothing(h200, tmp_path):
    env = {"SGLOPS_INVENTORY": str(h200.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = inv_cmd(*GPU_SWEEP, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["dry_run"] is True and doc["changed"] is False and doc["compute_capability"] == "9.0"
    status = {r["candidate"]["label"]: r["status"] for r in doc["rows"]}
    assert status == {
        "attention_backend=flashinfer": "planned",
        "attention_backend=flashinfer+gather-cast": "planned",
        "attention_backend=triton": "planned",
        "attention_backend=flashmla": "planned",
        "attention_backend=trtllm_mla": "skipped",
    }
    by = {r["candidate"]["label"]: r for r in doc["rows"]}
    assert by["attention_backend=triton"]["q_quantised"] and by["attention_backend=flashmla"]["q_quantised"]
    assert (
        "is_blackwell_supported (overrides.py:2120); the host's GPU is sm90"
        in by["attention_backend=trtllm_mla"]["reasons"][0]
    )
    assert doc["plan"][1].startswith(
        "candidate 2 attention_backend=flashinfer+gather-cast: restart "
        "h200-tiny-mla-fp8@attention_backend=flashinfer+gather-cast, patches gather-cast"
    )
    assert doc["plan"][-1] == "restore: patches back to none, stop the server (none ran before)"
    # a dry run records nothing
    assert not (tmp_path / "artifacts").exists()
    table = inv_cmd(*GPU_SWEEP, env={**env, "COLUMNS": "200"})
    assert table.returncode == 0 and "skip (trtllm_mla requires is_blackwell_supported" in table.stdout


def test_bad_sweep_input_is_one_line_before_any_host(h200, tmp_path):
    env = {"SGLOPS_INVENTORY": str(h200.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "a")}
    for args, msg in (
        (["--vary", "attn=a,b"], "'attn' is not a profile setting"),
        (["--vary", "attention_backend=a"], "at least two candidates"),
    ):
        proc = inv_cmd("sweep", "--host", "h200", "--profile", "h200-tiny-mla-fp8", *args, env=env)
        assert proc.returncode == 2 and msg in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = inv_cmd("sweep", "--host", "h200", "--vary", "attention_backend=a,b", env=env)
    assert proc.returncode == 2 and "--profile" in proc.stderr


def test_gpu_sweep_play_dry_run_reaches_the_sweep_step(h200, tmp_path):
    """playbooks/gpu-sweep.yaml is checked whole and its sweep step plans the GPU tier's candidates."""
    env = {"SGLOPS_INVENTORY": str(h200.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = inv_cmd("play", "gpu-sweep", "--host", "h200", "--dry-run", "--json", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    sweep = next(s for s in doc["steps"] if s["id"] == "sweep")
    assert sweep["status"] == "ok", sweep
    assert sweep["summary"] == "dry run: 5 of 6 candidate(s) would run; nothing changed or recorded"
    assert sweep["result"]["profile_trace"] is True and sweep["result"]["bench"]["output_len"] == 256
