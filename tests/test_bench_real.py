"""`inv bench` against a REAL SGLang 0.5.23 server (tiny random Llama, vocabulary 1,024, ids 0/1/2 special).

One server for the module (start_server, ~2.4 GB, 20-40 s to come up on a busy machine), reached through a
normal sandbox sshd host with `--port`: the client runs on the host and talks to 127.0.0.1, as on a GPU host.
The last test kills the server on purpose (an out-of-vocabulary prompt), so it stays last.
"""

from __future__ import annotations

import json

import pytest

from sglops import artifacts, bench
from sglops.errors import SglopsError
from sglops.sandbox.sglang_cpu import SGLANG_VERSION, model_dir, start_server, venv_python
from sglops.sandbox.sshd import free_port
from tests.conftest import inv_cmd

IN, OUT = 16, 16


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("real-bench") / "server.log"
    server = start_server(free_port(), log, timeout=600)
    yield server
    server.stop()


def _prompts(result: bench.BenchResult) -> list[dict]:
    return [rec for rep in result.raw for rec in rep["requests"]]


@pytest.mark.parametrize("api", ["sglang", "openai"])
def test_both_apis_at_concurrency_1_and_4_count_the_servers_tokens(real_server, remote_a, api):
    result = bench.run_bench(remote_a, runs=2, input_len=IN, output_len=OUT, concurrency="1,4", api=api,
                             port=real_server.port, with_facts=False)
    assert result.status == "ok", result.problems()
    one, four = result.levels
    assert one.outcomes == {"ok": 2} and four.outcomes == {"ok": 8}
    for rec in _prompts(result):
        assert rec["tokens"] == OUT and rec["prompt_tokens"] == IN  # the server's own counts
        assert rec["chunk_n"][-1] == OUT and rec["chunk_n"] == sorted(rec["chunk_n"])
        assert len(rec["chunk_t"]) <= OUT  # chunks may carry several tokens; never more chunks than tokens
    for lv in (one, four):
        assert lv.decode_tok_s["median"] > 0 and lv.tpot_ms["median"] > 0 and lv.ttft_ms["median"] > 0
        assert lv.itl_ms["n"] + lv.suspects * (OUT - 1) >= (lv.ok - lv.suspects) * (OUT - 1)
    assert four.output_tok_s["median"] > 0
    # prompts were drawn from the model's own vocabulary, specials excluded (ids 1000-30000 killed it before)
    space = result.config["token_space"]
    assert space["high"] == 1024 and space["special_ids"] == 3 and "config.json" in space["source"]
    # what served, from the server itself: version without --sglang-root, its own Python and torch
    assert result.sglang["version"] == SGLANG_VERSION and result.sglang["version_from"] == "server /server_info"
    assert result.server["python"]["executable"] == str(venv_python())
    assert result.server["python"]["torch"]["version"].startswith("2.14.1")
    assert result.server["log"] == str(real_server.log)


def test_inv_bench_records_the_servers_python_and_version(real_server, use_sandbox):
    proc = inv_cmd("bench", "--host", "gpu-a", "--port", str(real_server.port), "--runs", "1", "--input-len",
                   str(IN), "--output-len", str(OUT), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    manifest = artifacts.read_json(artifacts.find_run(doc["run_id"]) / "manifest.json")
    assert manifest["bench"]["status"] == "ok" and manifest["bench"]["problems"] == []
    assert manifest["sglang"]["version"] == SGLANG_VERSION
    assert manifest["server"]["python"]["executable"] == str(venv_python())
    # facts describe the Python SGLang runs on (the server's venv), the sshd host's own python apart
    facts = manifest["facts"]
    assert facts["python"]["executable"] == str(venv_python()) and "the server on port" in facts["python"]["source"]
    assert facts["torch"]["version"].startswith("2.14.1")
    assert facts["host_python"]["executable"] != str(venv_python())
    assert manifest["launch_args"]["model_path"] == str(model_dir())


def test_facts_on_a_pip_installed_sglang_describe_its_venv_not_the_host_python(use_sandbox, tmp_path):
    import sys

    from sglops.sandbox.sglang_cpu import sglang_tree

    proc = inv_cmd("facts", "--host", "local", "--sglang-root", str(sglang_tree()), "--json",
                   env={"SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["sglang"]["version"] == SGLANG_VERSION and doc["sglang"]["kind"] == "installed"
    assert doc["python"]["executable"] == str(venv_python()) and doc["torch"]["version"].startswith("2.14.1")
    assert doc["host_python"]["executable"] == sys.executable  # the python sglops runs on, reported apart


def test_a_request_that_stops_short_makes_the_run_partial(real_server, remote_a, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    # tests only: the first request of each repeat asks the server for fewer tokens than the run expects,
    # as a server that does not honour ignore_eos would stop early
    result = bench.run_bench(remote_a, runs=2, input_len=IN, output_len=OUT, requests=2, port=real_server.port,
                             with_facts=False, test_options={"test_sampling_override": {"max_new_tokens": OUT - 5}})
    (lv,) = result.levels
    assert lv.outcomes == {"ok": 2, "wrong_length": 2} and result.status == "partial"
    assert f"{OUT - 5} tokens, {OUT} asked" in lv.errors[0]
    assert len(lv.per_request["tpot_ms"]) == 2  # only the full-length requests are in the figures
    bench.record(result)
    manifest = artifacts.read_json(artifacts.find_run(result.run_id) / "manifest.json")
    assert manifest["bench"]["status"] == "partial"
    assert any("wrong_length 2" in p for p in manifest["bench"]["problems"])
    with pytest.raises(bench.BenchIncomplete, match="partial"):
        bench.check([result])


def test_a_server_that_dies_mid_run_is_named_with_its_logs_cause(real_server, remote_a):
    # tests only: prompt ids past the vocabulary, as sglops drew them before; SGLang does not check them,
    # its embedding lookup raises and the whole server goes down
    result = bench.run_bench(remote_a, runs=3, input_len=IN, output_len=OUT, port=real_server.port, warmup=0,
                             with_facts=False, test_options={"test_token_range": [5000, 6000]})
    down = result.server_down
    print(down["line"])  # what the operator reads (pytest -rP shows it)
    assert result.status == "failed" and down["state"] == "died"
    assert "IndexError" in down["cause"] and down["log"] == str(real_server.log)
    assert f"the server on 127.0.0.1:{real_server.port} died" in down["line"] and "IndexError" in down["line"]
    assert result.levels[0].requests_total == 1  # nothing more was sent to a dead server
    with pytest.raises(bench.BenchIncomplete, match="died"):
        bench.check([result])
    with pytest.raises(SglopsError, match="no server on 127.0.0.1"):
        bench.run_bench(remote_a, runs=1, port=real_server.port, with_facts=False)
