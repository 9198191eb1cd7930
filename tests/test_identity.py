"""Output identity and run-config differences between two
recorded runs (sglops.bench.identity, sglops.bench.runconfig).

The unit part works on outputs.json entries and launch arguments as the real SGLang 0.5.23 CPU server gives
them; the end-to-end part (two real-server runs, a KV-dtype profile difference) is in test_identity_real.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from sglops.bench.compare import Run
from sglops.bench.identity import OUTPUTS_FILE, Tolerance, compare_entries, compare_outputs, ids_hash
from sglops.bench.runconfig import config_diff, normalise_variable
from sglops.core.errors import ConfigError


def entry(
    n: int,
    ids: list[int],
    logprobs: list[float] | None = None,
    text: str | None = None,
    prompt: list[int] | None = None,
    **extra,
) -> dict:
    prompt = prompt or [100 + n, 200 + n, 300 + n]
    return {
        "n": n,
        "prompt": ids_hash(prompt),
        "output": ids_hash(ids),
        "ids": ids,
        "logprobs": logprobs,
        "text": text,
        "outcome": "ok",
        "concurrency": 1,
        "repeat": 0,
        **extra,
    }


A = [
    entry(
        0,
        [805, 833, 396, 921],
        [-6.374382019042969, -6.405150890350342, -6.492127418518066, -6.4354982],
        "date formatup end",
    ),
    entry(1, [7, 8, 9], [-1.0, -2.0, -3.0], "abc"),
    entry(2, [1, 2, 3], [-0.5, -0.25, -0.125], "xyz"),
]


def test_the_same_outputs_are_identical():
    v = compare_entries(A, [dict(e) for e in A])
    assert v.identical and v.tokens_identical and v.within_tolerance and v.status == "identical"
    assert v.compared == 3 and v.max_logprob_diff == 0.0 and v.first_divergence is None
    assert v.line() == "outputs identical (3 prompts, logprobs equal)"


def test_a_changed_token_is_named_with_its_prompt_token_ids_and_text():
    b = [dict(e) for e in A]
    b[1] = entry(1, [7, 8, 4], [-1.0, -2.0, -0.1], "abX")
    v = compare_entries(A, b)
    assert not v.identical and not v.within_tolerance and v.status == "differ"
    d = v.first_divergence
    assert (d.prompt_index, d.token_index, d.a_id, d.b_id) == (1, 2, 9, 4)
    assert d.before == "ab" and d.a_after == "c" and d.b_after == "X"
    assert v.line().startswith("OUTPUTS DIFFER at token 2 of prompt 1 (9 vs 4): 1/3 prompts differ")
    # logprobs compared only where both chose the same tokens
    assert v.max_logprob_diff == 0.0
    assert v.differing == [1]


def test_per_token_text_from_the_openai_api_names_both_tokens():
    a = [entry(0, [1, 2, 3], [-1.0, -1.0, -1.0], tokens=["The", " cat", " sat"])]
    b = [entry(0, [1, 2, 4], [-1.0, -1.0, -2.0], tokens=["The", " cat", " ran"])]
    d = compare_entries(a, b).first_divergence
    assert (d.a_token, d.b_token, d.before) == (" sat", " ran", "The cat")
    assert "' sat' vs 4 ' ran'" in d.describe()


def test_a_shorter_output_diverges_at_its_end():
    v = compare_entries([entry(0, [1, 2, 3])], [entry(0, [1, 2])])
    d = v.first_divergence
    assert (d.token_index, d.a_id, d.b_id) == (2, 3, None) and "end of output" in d.describe()


def test_logprob_noise_with_the_same_tokens_is_not_identical_unless_tolerated():
    b = [dict(e, logprobs=[x + 3e-6 for x in e["logprobs"]]) for e in A]
    v = compare_entries(A, b)
    assert v.tokens_identical and not v.identical and v.status == "logprobs_differ"
    assert v.max_logprob_diff == pytest.approx(3e-6, rel=1e-3)
    assert "LOGPROBS DIFFER" in v.line()
    tol = compare_entries(A, b, Tolerance(1e-5, 1.0))
    assert tol.within_tolerance and tol.status == "within_tolerance"
    assert not compare_entries(A, b, Tolerance(1e-6, 1.0)).within_tolerance


def test_a_share_of_identical_prompts_is_a_tolerance_too():
    b = [dict(e) for e in A]
    b[2] = entry(2, [1, 2, 9], [-0.5, -0.25, -3.0])
    # 2/3 identical
    assert compare_entries(A, b, Tolerance(math.inf, 0.6)).within_tolerance
    assert not compare_entries(A, b, Tolerance(math.inf, 0.7)).within_tolerance
    with pytest.raises(ConfigError):
        Tolerance(0.1, 1.5)
    with pytest.raises(ConfigError):
        Tolerance(-1, 1.0)
    assert Tolerance.from_options(None, None) is None
    assert Tolerance.from_options(0.02, None) == Tolerance(0.02, 1.0)


def test_prompts_are_matched_by_their_input_ids_not_their_place():
    # another run that answered two of the prompts, in another order
    b = [dict(A[2], n=0), dict(A[0], n=1)]
    v = compare_entries(A, b)
    assert v.identical and v.compared == 2 and v.only_a == 1 and v.only_b == 0
    none = compare_entries(A, [entry(5, [1], prompt=[9, 9, 9])])
    assert none.status == "not_compared" and not none.identical and "not compared" in none.line()


def test_failed_requests_are_not_compared():
    b = [dict(e) for e in A]
    b[0] = dict(b[0], outcome="wrong_length", ids=[805])
    v = compare_entries(A, b)
    assert v.compared == 2 and v.identical


def _run(
    tmp_path: Path,
    name: str,
    launch: dict | None,
    patches: list[dict] | None = None,
    outputs: list[dict] | None = None,
) -> Run:
    folder = tmp_path / name
    folder.mkdir()
    if outputs is not None:
        (folder / OUTPUTS_FILE).write_bytes(orjson.dumps({"kind": "sglops-outputs", "requests": outputs}))
    doc = {
        "launch_args": launch,
        "patches": patches or [],
        "sglang": {"version": (launch or {}).get("version")},
        "outputs": {"hashes": {e["prompt"]: e["output"] for e in outputs or []}},
    }
    return Run(name, "h", folder, doc)


LAUNCH = {
    "model_path": "/m",
    "attention_backend": "torch_native",
    "kv_cache_dtype": "auto",
    "page_size": 1,
    "disable_cuda_graph": False,
    "tp_size": 1,
    "version": "0.5.23",
    "port": 30000,
    "random_seed": 1,
    "launch_command": "--port 30000",
    "cuda_graph_config": {"decode": {"max_bs": 8}},
}


def test_config_diff_flags_what_was_not_named_as_the_variable(tmp_path):
    a = _run(tmp_path, "a", LAUNCH)
    b = _run(
        tmp_path,
        "b",
        {
            **LAUNCH,
            "kv_cache_dtype": "fp8_e5m2",
            "port": 30001,
            "random_seed": 7,
            "launch_command": "--port 30001",
            "cuda_graph_config": {"decode": {"max_bs": 16}},
        },
        patches=[{"patch": "gather-cast", "variant": "v2", "intact": True}],
    )
    diff = config_diff(a, b)
    assert [d.key for d in diff.differences] == [
        "patches",
        "kv_cache_dtype",
        "cuda_graph_config.decode.max_bs",
    ]
    assert [d.key for d in diff.unintended] == ["kv_cache_dtype", "cuda_graph_config.decode.max_bs"]
    assert diff.line().startswith("2 UNINTENDED config differences: kv_cache_dtype auto -> fp8_e5m2")
    named = config_diff(a, b, variable="kv_dtype,cuda_graph_config")
    assert named.unintended == [] and named.line().startswith("config differs only as intended")
    assert config_diff(a, _run(tmp_path, "c", {**LAUNCH, "port": 1})).line() == "same server config"
    assert normalise_variable("tp, kv_dtype") == ["tp_size", "kv_cache_dtype"]


def test_the_standin_decode_model_is_state_not_config_and_floats_print_short(tmp_path):
    a = _run(tmp_path, "a", {**LAUNCH, "standin_decode_tps": 10.5, "standin_decode_model": {"rows": 495000}})
    b = _run(tmp_path, "b", {**LAUNCH, "standin_decode_tps": 32.7, "standin_decode_model": {"rows": 4096}})
    assert config_diff(a, b).line() == "same server config"
    c = _run(tmp_path, "c", {**LAUNCH, "mem_fraction_static": 0.1 + 0.59})
    assert config_diff(a, c).line() == "1 UNINTENDED config difference: mem_fraction_static - -> 0.69"


def test_a_run_without_server_config_compares_version_and_patches_only(tmp_path):
    diff = config_diff(_run(tmp_path, "a", LAUNCH), _run(tmp_path, "b", None))
    assert diff.missing == ["b"] and [d.key for d in diff.differences] == ["sglang_version"]


def test_compare_outputs_reads_the_run_folders_and_falls_back_to_manifest_hashes(tmp_path):
    a = _run(tmp_path, "a", LAUNCH, outputs=A)
    b = _run(tmp_path, "b", LAUNCH, outputs=[dict(e) for e in A[:2]] + [entry(2, [1, 2, 4])])
    v = compare_outputs(a, b)
    assert v.first_divergence.token_index == 2 and v.source == OUTPUTS_FILE
    (b.path / OUTPUTS_FILE).unlink()
    # prompt by prompt from the manifest's hashes
    v = compare_outputs(a, b)
    assert v.source == "manifest hashes" and v.compared == 3 and v.identical_prompts == 2
    assert v.line().startswith("OUTPUTS DIFFER for prompt 2")
    # no outputs recorded
    assert compare_outputs(a, _run(tmp_path, "c", LAUNCH)) is None


# -- the host client's reading of real SGLang 0.5.23 chunks
# ------------------------------------------------------- /generate with return_logprob, as the real CPU
# server streamed it (cumulative; the second chunk is the last)
REAL_CHUNKS = [
    (
        b'{"text":"date format","output_ids":[805,833],"meta_info":{"id":"536b2ffdf35a4f5b8f953f46287b4199",'
        b'"finish_reason":null,"prompt_tokens":8,"weight_version":"default","num_retractions":0,"input_token_logprobs":[],'
        b'"output_token_logprobs":[[-6.374382019042969,805,null],[-6.405150890350342,833,null]],'
        b'"output_token_logprobs_length":2,"reasoning_tokens":0,"completion_tokens":2,"cached_tokens":7,'
        b'"cached_tokens_details":{"device":7,"host":0},"dp_rank":null,"response_sent_to_client_ts":1796245032.8021667}}'
    ),
    (
        b'{"text":"date formatup'
        b' end","output_ids":[805,833,396,921],"meta_info":{"id":"536b2ffdf35a4f5b8f953f46287b4199",'
        b'"finish_reason":{"type":"length","length":4},"prompt_tokens":8,"weight_version":"default","num_retractions":0,'
        b'"input_token_logprobs":[],"output_token_logprobs":[[-6.374382019042969,805,null],[-6.405150890350342,833,null],'
        b'[-6.492127418518066,396,null],[-6.435498237609863,921,null]],"output_token_logprobs_length":4,'
        b'"reasoning_tokens":0,"completion_tokens":4,"cached_tokens":7,"weight_versions":[{"version":"default","start":0,'
        b'"end":4}],"cached_tokens_details":{"device":7,"host":0},"dp_rank":null,"e2e_latency":0.03298155500124267}}'
    ),
]


def _client() -> dict:
    """The bench client's stream parsing as it runs on a host (the module sent there)."""
    from sglops.host import _bench_stream

    return vars(_bench_stream)


def test_a_streaming_chunk_is_read_without_decoding_its_logprobs_and_the_last_one_whole():
    client = _client()
    meta, whole = client["_native_meta"](REAL_CHUNKS[0], True)
    # still streaming: only the numbers were read from its bytes
    assert whole is None
    assert meta == {"finish_reason": None, "completion_tokens": 2, "cached_tokens": 7, "prompt_tokens": 8}
    meta, whole = client["_native_meta"](REAL_CHUNKS[1])
    assert whole is not None and meta["finish_reason"] == {"type": "length", "length": 4}
    rec = {"ids": None, "logprobs": None, "text": None}
    client["_native_outputs"](whole, rec, False)
    assert rec["ids"] == [805, 833, 396, 921] and rec["text"] == "date formatup end"
    assert rec["logprobs"] == [-6.374382019042969, -6.405150890350342, -6.492127418518066, -6.435498237609863]
    # a server streaming incrementally (--incremental-streaming-output): pieces are appended
    inc = {"ids": None, "logprobs": None, "text": None}
    client["_native_outputs"](
        {"text": "date", "output_ids": [805], "meta_info": {"output_token_logprobs": [[-6.37, 805, None]]}},
        inc,
        True,
    )
    client["_native_outputs"](
        {
            "text": " format",
            "output_ids": [833],
            "meta_info": {"output_token_logprobs": [[-6.41, 833, None]]},
        },
        inc,
        True,
    )
    assert inc == {"ids": [805, 833], "logprobs": [-6.37, -6.41], "text": "date format"}
    # the hash is the laptop's
    assert client["ids_hash"]([805, 833]) == ids_hash([805, 833])


def test_a_text_that_looks_like_a_key_does_not_fool_the_chunk_reader():
    client = _client()
    tricky = (
        b'{"text":"\\"completion_tokens\\":99 \\"finish_reason\\":null","output_ids":[5],"meta_info":'
        b'{"id":"x","finish_reason":null,"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0}}'
    )
    meta, _ = client["_native_meta"](tricky, True)
    assert meta["completion_tokens"] == 1 and meta["prompt_tokens"] == 3


def test_runs_that_asked_for_different_lengths_are_compared_on_the_common_tokens(tmp_path):
    a = _run(tmp_path, "a", LAUNCH, outputs=A)
    b = _run(
        tmp_path, "b", LAUNCH, outputs=[dict(e, ids=e["ids"][:2], logprobs=e["logprobs"][:2]) for e in A]
    )
    a.doc["config"], b.doc["config"] = {"output_len": 3}, {"output_len": 2}
    v = compare_outputs(a, b)
    assert (
        v.identical
        and v.limit == 2
        and v.line().endswith("(first 2 tokens: the runs asked for different lengths)")
    )


def _with_argv(run: Run, *flags: str) -> Run:
    run.doc["server"] = {"argv": ["python3", "-m", "sglang.launch_server", "--model-path", "/m", *flags]}
    return run


def test_a_setting_sglang_derives_from_the_named_change_is_intended_and_says_so(tmp_path):
    """The H200 sweep: flashmla makes SGLang choose page_size 64; neither command line set it, and the backend
    was the variable, so it follows from that change. Set on a command line, or with no intended change beside
    it, or without recorded command lines, the same difference stays unintended."""
    a = _with_argv(_run(tmp_path, "a", LAUNCH), "--attention-backend", "flashinfer")
    b = _with_argv(
        _run(tmp_path, "b", {**LAUNCH, "attention_backend": "flashmla", "page_size": 64}),
        "--attention-backend",
        "flashmla",
    )
    diff = config_diff(a, b, variable="attention_backend")
    assert (
        diff.unintended == []
        and diff.line() == "config differs only as intended (attention_backend, page_size)"
    )
    assert diff.differences[-1].why.endswith("follows from attention_backend")
    pinned = _with_argv(
        _run(tmp_path, "c", {**LAUNCH, "attention_backend": "flashmla", "page_size": 64}),
        "--attention-backend",
        "flashmla",
        "--page-size",
        "64",
    )
    assert [d.key for d in config_diff(a, pinned, variable="attention_backend").unintended] == ["page_size"]
    alone = _with_argv(_run(tmp_path, "d", {**LAUNCH, "page_size": 64}), "--attention-backend", "flashinfer")
    assert [d.key for d in config_diff(a, alone).unintended] == ["page_size"]
    bare = _run(tmp_path, "e", {**LAUNCH, "attention_backend": "flashmla", "page_size": 64})
    assert [d.key for d in config_diff(a, bare, variable="attention_backend").unintended] == ["page_size"]


def test_a_divergence_between_near_tied_tokens_is_told_from_one_between_unlike_ones():
    """Two attention kernels that round differently part greedy outputs where two tokens were nearly tied (an
    untrained model's flat distributions: the GPU tier's FP8 MLA E2E, docs/patches.md); a real defect parts
    them where the runs disagree on what is likely. The gap of the runs' own tokens' logprobs at the
    divergence, against the logprob noise before it, tells the two apart."""
    a = [entry(0, [5, 6, 7, 8], [-5.60, -5.51, -5.632, -5.4]), entry(1, [1, 2, 3], [-5.2, -5.3, -5.1])]
    tie = [entry(0, [5, 6, 9, 8], [-5.61, -5.52, -5.633, -5.4]), entry(1, [1, 2, 3], [-5.21, -5.3, -5.1])]
    v = compare_entries(a, tie)
    assert v.status == "differ" and v.divergence_gap == pytest.approx(0.001) and v.near_ties_only
    assert "; each divergence a near tie (the runs' tokens there within 0.001 in logprob);" in v.line()
    unlike = [entry(0, [5, 6, 9, 8], [-5.61, -5.52, -0.2, -5.4]), entry(1, [1, 2, 3], [-5.21, -5.3, -5.1])]
    w = compare_entries(a, unlike)
    assert w.divergence_gap == pytest.approx(5.432) and not w.near_ties_only
    assert "; logprob gap at a divergence up to 5.43" in w.line() and w.to_json()["near_ties_only"] is False
    shorter = compare_entries(a, [entry(0, [5, 6], [-5.6, -5.51]), entry(1, [1, 2, 3], [-5.2, -5.3, -5.1])])
    # an output that ended: no gap
    assert shorter.divergence_gap is None and "near tie" not in shorter.line()


def test_first_tokens_tell_a_prefill_difference_from_a_decode_one():
    """The first output token is the prefill's alone: bit-equal first tokens with later tokens apart put a
    difference in decode (an attention patch of the decode path); unequal ones in the prefill."""
    a = [entry(0, [5, 6, 7, 8], [-1.0, -2.0, -3.0, -4.0]), entry(1, [1, 2, 3], [-0.5, -0.6, -0.7])]
    decode_only = [
        entry(0, [5, 6, 9, 8], [-1.0, -2.01, -3.0, -4.0]),
        entry(1, [1, 2, 3], [-0.5, -0.61, -0.71]),
    ]
    v = compare_entries(a, decode_only)
    assert (v.first_token_equal, v.first_token_compared) == (2, 2)
    assert v.line().endswith("; first tokens (prefill) bit-equal on all 2")
    # 0, .01 | 0, .01, .01
    assert v.median_logprob_diff == pytest.approx(0.01) and v.logprob_tokens == 5
    prefill = [
        entry(0, [5, 6, 7, 8], [-1.0 + 2**-20, -2.0, -3.0, -4.0]),
        entry(1, [4, 2, 3], [-0.4, -0.6, -0.7]),
    ]
    w = compare_entries(a, prefill)
    assert (w.first_token_equal, w.first_token_compared) == (0, 2)
    assert "; first tokens (prefill) differ on 2/2" in w.line() and w.to_json()["first_token_equal"] == 0
    assert compare_entries(a, a).line() == "outputs identical (2 prompts, logprobs equal)"
