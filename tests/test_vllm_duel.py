"""The duel's plan, no server: the vLLM profile normalised to the SGLang reference (the repo's own profiles
and the tiny h32 Llama's config.json shape), the refusals when more than the engine differs, and the limits as
the servers report them side by side (their own names: SGLang's /server_info, vLLM's start-up arguments
line)."""

from __future__ import annotations

import pytest

from sglops.core.errors import ConfigError
from sglops.experiment.duel_plan import effective_rows, kv_bytes_per_token, plan
from sglops.launch.profiles import load_profile

# the tiny Llama with head_dim 32 (sglops/sandbox/make_tiny_model.py, HEADS["h32"])
CONFIG = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1024,
}
VARS = {"model_dir": "/m16", "vllm_model_dir": "/m32", "vllm_python": "/py"}


def _profiles():
    a = load_profile("sandbox-sglang-cpu-vllm-duel").with_vars(VARS, "h")
    b = load_profile("sandbox-vllm-cpu").with_vars(VARS, "h")
    return a, b


def test_the_vllm_side_is_set_to_the_references_limits():
    a, b = _profiles()
    p = plan(a, b, CONFIG)
    # 2 x 2 layers x 1 KV head x 32 x 2 bytes
    assert kv_bytes_per_token(CONFIG) == 256 and p.vocab_size == 1024
    assert p.b.args["max_running_requests"] == 8 and p.b.args["context_length"] == 2048
    extra = p.b.extra_args
    assert extra[extra.index("--kv-cache-memory-bytes") + 1] == str(8192 * 256)
    assert extra.count("--kv-cache-memory-bytes") == 1 and p.b.cuda_graph["disable"] is True
    how = {r["knob"]: r["how"] for r in p.rows}
    assert how["max running requests"] == "sandbox-vllm-cpu set to sandbox-sglang-cpu-vllm-duel's"
    assert how["the served model"] == "equal" and how["attention_backend"] == "the engine's own"


def test_refused_unless_only_the_engine_differs():
    a, b = _profiles()
    other_model = type(b)(**{**b.__dict__, "args": {**b.args, "model_path": "/m16"}})
    with pytest.raises(ConfigError, match="refused: more than the engine differs: the served model"):
        plan(a, other_model, CONFIG)
    unsized = type(a)(**{**a.__dict__, "args": {k: v for k, v in a.args.items() if k != "max_total_tokens"}})
    with pytest.raises(ConfigError, match="does not size its KV pool"):
        plan(unsized, b, CONFIG)
    with pytest.raises(ConfigError, match="both SGLang"):
        plan(a, a, CONFIG)


def test_the_limits_the_servers_reported_side_by_side():
    a, b = _profiles()
    p = plan(a, b, CONFIG)
    sglang = {
        "context_length": 2048,
        "max_running_requests": 8,
        "max_total_tokens": 8192,
        "kv_cache_dtype": "auto",
    }
    vllm = {"max_model_len": 2048, "max_num_seqs": 8, "kv_cache_memory_bytes": 8192 * 256}
    rows = {r["knob"]: r for r in effective_rows(p, sglang, vllm)}
    # vLLM's line omits defaults: cache_dtype reads as auto
    assert all(r["same"] for r in rows.values()), rows
    rows = {r["knob"]: r for r in effective_rows(p, sglang, {**vllm, "max_num_seqs": 16})}
    assert rows["max_running_requests"]["same"] is False and rows["kv_pool"]["b"] == 8192


def test_each_sides_profile_names_its_top_cost_and_a_failed_one_is_named_not_fatal():
    """No start: the side's profile (a ProfileResult's analysis) gives its top cost; a profile that fails is
    said in the side and the verdict, the duel's figures stand."""
    from types import SimpleNamespace

    from sglops.core.errors import SglopsError
    from sglops.experiment.duel import DuelResult, _profiled, verdict_line

    cpu = SimpleNamespace(
        self_total_us=100.0,
        top_self=lambda n: [
            ("execute_context_0(0)_generation_1(1)", 60.0, 3, 90.0, True),
            ("_C::cpu_attention_with_kv_cache", 30.0, 3, 30.0, False),
        ],
    )
    got = SimpleNamespace(
        analysis=SimpleNamespace(has_gpu=False, gpu_us=0.0, cpu=cpu), run_id="r-vllm-profile"
    )
    ok = _profiled(lambda port, engine: got, 1, "vllm")
    assert ok == {
        "top_cost": "_C::cpu_attention_with_kv_cache 30.0% of CPU self time (3 calls)",
        "profile_run": "r-vllm-profile",
    }

    def broken(port: int, engine: str) -> None:
        raise SglopsError("no trace files")

    bad = _profiled(broken, 1, "sglang")
    assert bad["top_cost"] == "profile failed: no trace files"
    tok = {"median": 10.0, "values": [10.0, 10.0, 10.0]}
    r = DuelResult(
        "h",
        ["a", "b"],
        ["sglang", "vllm"],
        [],
        sides=[
            {"engine": "sglang", "decode_tok_s": tok, **bad},
            {"engine": "vllm", "decode_tok_s": tok, **ok},
        ],
        outputs={"identical": 2, "compared": 2, "max_logprob_diff": 0.0},
    )
    line = verdict_line(r)
    assert line.endswith(
        "; top cost: sglang profile failed: no trace files; vllm _C::cpu_attention_with_kv_cache "
        "30.0% of CPU self time (3 calls)"
    ), line


def test_the_gpu_shape_sizes_vllms_fp8_mla_pool_by_the_latent_row():
    """The GPU tier's tiny MLA model (make_tiny_mla.config: 4 layers, kv_lora_rank 512 + rope 64): both
    engines cache one 576-wide latent row per token and layer, one byte each in FP8, so SGLang's 1M-token pool
    is 4 x 576 x 1 = 2,304 bytes per token in vLLM's --kv-cache-memory-bytes (K and V per head: 14x that)."""
    from sglops.sandbox.make_tiny_mla import config

    gpu = {
        "model_dir": "/t/tiny-mla",
        "vllm_python": "/py",
        "pythonpath": "/s",
        "jit_dir": "/j",
        "trace_dir": "/tr",
    }
    a = load_profile("h200-tiny-mla-fp8-duel").with_vars(gpu, "h")
    b = load_profile("h200-tiny-mla-fp8-vllm").with_vars(gpu, "h")
    p = plan(a, b, config())
    assert p.bytes_per_token == 2304 == kv_bytes_per_token(config(), 1)
    extra = p.b.extra_args
    assert extra[extra.index("--kv-cache-memory-bytes") + 1] == str(1048576 * 2304)
    assert p.b.args["kv_cache_dtype"] == "fp8" and p.b.args["attention_backend"] == "FLASHMLA"
    assert p.b.args["model_path"] == a.args["model_path"] == "/t/tiny-mla-rw"
    how = {r["knob"]: r["how"] for r in p.rows}
    assert how["KV cache dtype"] == how["context length"] == how["eager (no graphs / no compile)"] == "equal"
