"""`inv profile` over real SSH to a sandbox host, against the stand-in SGLang server on loopback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, inv_cmd

from sglops.core import artifacts
from sglops.core.errors import RemoteError
from sglops.core.op import new_run_id
from sglops.host import _profile_request as profile_request
from sglops.host import profile_capture
from sglops.sandbox.sshd import HOST_PYTHON, free_port
from sglops.trace.profile import run_profile
from sglops.views.files import draw

STANDIN = REPO / "sglops" / "sandbox" / "standin_server.py"


@pytest.fixture
def standin(use_sandbox, tmp_path):
    """standin(tp=..., env=...) -> port of a stand-in server serving gpu-a's SGLang tree."""
    procs: list[subprocess.Popen] = []
    root = use_sandbox.host("gpu-a").sglang_root

    def start(tp: int = 2, env: dict | None = None) -> int:
        port = free_port()
        full = {k: v for k, v in os.environ.items() if not k.startswith("SGLOPS_STANDIN")}
        full.update(
            {
                "PYTHONPATH": str(root / "python"),
                "SGLOPS_STANDIN_TPS": "400",
                "SGLOPS_STANDIN_STARTUP_S": "0",
                **(env or {}),
            }
        )
        log = open(tmp_path / f"standin-{port}.log", "wb")
        procs.append(
            subprocess.Popen(
                [HOST_PYTHON, str(STANDIN), "--model-path", "m", "--port", str(port), "--tp-size", str(tp)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        return port
            except OSError:
                time.sleep(0.05)
        raise AssertionError(
            "stand-in never healthy: " + (tmp_path / f"standin-{port}.log").read_text()[-500:]
        )

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_profile_two_ranks_end_to_end(remote_a, standin, tmp_path):
    port = standin(tp=2)
    r = run_profile(remote_a, steps=4, output_len=16, port=port, chart=True, draw=draw, run_id=new_run_id())
    # as the runner records it
    artifacts.keep("gpu-a", r.run_id, "profile.json", r, task="profile")
    assert r.port_from == "--port" and r.stopped_by == "num_steps" and r.standin
    assert r.request == {
        "output_dir": r.remote_dir,
        "num_steps": 4,
        "activities": ["CPU", "GPU"],
        "profile_prefix": "sglops",
        "profile_id": r.profile_id,
        "with_stack": False,
        "record_shapes": False,
    }
    names = sorted(Path(p).name for p in r.traces)
    assert names == [f"sglops-{r.profile_id}-TP-0.trace.json.gz", f"sglops-{r.profile_id}-TP-1.trace.json.gz"]
    folder = Path(os.environ["SGLOPS_ARTIFACTS"]) / "gpu-a" / r.run_id
    assert all(Path(p).parent == folder / "traces" for p in r.traces)
    # downloaded whole, byte for byte
    for p in r.traces:
        remote_copy = Path(r.remote_dir) / Path(p).name
        assert Path(p).read_bytes() == remote_copy.read_bytes()
        gzip.decompress(Path(p).read_bytes())
    a = r.analysis
    assert [f.rank for f in a.files] == [0, 1] and a.scope == "decode"
    # 4 decode steps on each rank
    assert [s["count"] for s in a.step_summary()] == [8]
    top = a.findings[0]
    assert top.rule == "dtype-cast" and top.share == pytest.approx(0.69, abs=0.02)
    assert "takes 69% of GPU time in decode steps" in top.message
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (
        manifest["task"] == "profile" and "profile.json" in manifest["files"] and manifest["status"] == "ok"
    )
    assert (folder / "report.md").exists() and (folder / "top_kernels.png").exists()


def test_port_comes_from_the_launch_state(remote_a, standin, use_sandbox):
    port = standin(tp=1)
    state = use_sandbox.host("gpu-a").sglang_root / ".sglops"
    state.mkdir(exist_ok=True)
    had = (state / "server.json").read_bytes() if (state / "server.json").exists() else None
    (state / "server.json").write_text(json.dumps({"port": port, "host": "127.0.0.1"}))
    try:
        r = run_profile(remote_a, steps=2, output_len=8, run_id=new_run_id())
    finally:
        if had is None:
            (state / "server.json").unlink()
        else:
            (state / "server.json").write_bytes(had)
    assert (r.port, r.port_from) == (port, ".sglops/server.json")
    assert len(r.traces) == 1 and r.analysis.files[0].rank == 0


def test_profiler_off_times_out_clearly(remote_a, standin):
    port = standin(tp=1, env={"SGLOPS_STANDIN_PROFILER": "off"})
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match=r"gpu-a: no trace files in .* after 2 s: .*profiler disabled"):
        run_profile(remote_a, steps=2, output_len=8, port=port, wait_s=2, run_id=new_run_id())
    assert time.monotonic() - t0 < 20


def test_no_server_on_the_port(remote_a):
    with pytest.raises(
        RemoteError, match=r"no SGLang server answering on 127.0.0.1:\d+ \(port from --port\)"
    ):
        run_profile(remote_a, steps=2, output_len=8, port=free_port(), run_id=new_run_id())


def test_inv_profile_json(use_sandbox, standin, tmp_path):
    port = standin(tp=2)
    env = {"SGLOPS_INVENTORY": str(use_sandbox.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "art")}
    r = inv_cmd(
        "profile",
        "--host",
        "gpu-a",
        "--port",
        str(port),
        "--steps",
        "3",
        "--output-len",
        "8",
        "--json",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and len(doc["traces"]) == 2 and doc["analysis"]["findings"][0]["rule"] == "dtype-cast"
    r = inv_cmd(
        "profile", "--host", "gpu-a", "--port", str(port), "--steps", "2", "--output-len", "8", env=env
    )
    assert r.returncode == 0, r.stderr
    assert (
        "dtype conversion (aten::copy_ -> elementwise kernel) takes 69% of GPU time in decode steps"
        in " ".join(r.stdout.split())
    )
    assert "stand-in server" in r.stdout and "report:" in r.stdout
    r = inv_cmd("profile", "--host", "gpu-a", "--port", str(free_port()), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "no SGLang server answering" in r.stderr


def test_host_script_completeness_and_compression(tmp_path):
    """The host-side checks, run as the host runs them (the script's own source, stdlib only)."""
    ns = _host_script()
    whole = gzip.compress(b'{"traceEvents": []}' * 1000)
    good, cut = tmp_path / "a-TP-0.trace.json.gz", tmp_path / "b-TP-0.trace.json.gz"
    good.write_bytes(whole)
    cut.write_bytes(whole[:-10])
    assert ns["_complete"](str(good)) and not ns["_complete"](str(cut))
    plain = tmp_path / "p1-TP-1.trace.json"
    plain.write_text(
        '{"traceEvents": [{"ph": "X"}],\n "traceName": "/root/x.json", "baseTimeNanoseconds": 17}\n'
    )
    half = tmp_path / "p1-TP-2.trace.json"
    half.write_text('{"traceEvents": [{"ph": "X", "args": {"grid": [1, 2]}}, {"ph": "X"}')
    assert ns["_complete"](str(plain)) and not ns["_complete"](str(half))
    out = ns["compress"](str(plain))
    assert out.endswith(".trace.json.gz") and not plain.exists()
    assert json.loads(gzip.decompress(Path(out).read_bytes()))["traceEvents"] == [{"ph": "X"}]
    pat = ns["_pattern"]("1700")
    assert pat.match("1700-TP-3.trace.json.gz").group(1) == "3"
    assert pat.match("glm5-1700-TP-0-DP-1-DECODE.trace.json.gz").group(3) == "DECODE"
    assert not pat.match("1700-TP-0-memory.pickle") and not pat.match("17000-TP-0.trace.json.gz")
    # the prefix we send is the prefix we wait for
    ours = ns["_pattern"]("1700", "sglops")
    assert ours.match("sglops-1700-TP-1-EXTEND.trace.json.gz").group(1, 3) == ("1", "EXTEND")
    assert not ours.match("glm5-1700-TP-0.trace.json.gz") and not ours.match("1700-TP-0.trace.json.gz")
    assert ns["_expected"]({"tp_size": 2, "pp_size": 1}, False) == 2
    # EXTEND and DECODE per rank
    assert ns["_expected"]({"tp_size": 2, "dp_size": 2}, True) == 8


def _host_script():
    """The profile host script's names and those of the module it shares with vLLM's profiler (read-only)."""
    return {**vars(profile_request), **vars(profile_capture)}


def test_prompt_ids_stay_inside_the_vocabulary(tmp_path):
    """Ids past the vocabulary kill a real SGLang server (its embedding lookup raises): never send one."""
    ns = _host_script()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"vocab_size": 1024, "bos_token_id": 0, "eos_token_id": [1, 7], "pad_token_id": 2})
    )
    ids = ns["prompt_ids"]({"model_path": str(model)}, 32)
    assert len(ids) == 32 and max(ids) < 1024 and not {0, 1, 2, 7} & set(ids)
    # the same prompt every run
    assert ids == ns["prompt_ids"]({"model_path": str(model)}, 32)
    nested = tmp_path / "vlm"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 40, "eos_token_id": 5}}))
    ids = ns["prompt_ids"]({"model_path": str(nested)}, 32)
    assert max(ids) < 40 and 5 not in ids
    with pytest.raises(Exception, match=r"cannot tell the served model's vocabulary .*pass --vocab-size N"):
        ns["prompt_ids"]({"model_path": "org/not-here"}, 32)
    assert max(ns["prompt_ids"]({"model_path": "org/not-here"}, 32, vocab_size=50)) < 50


def test_start_request_sends_only_what_was_asked():
    ns = _host_script()
    req = ns["start_request"]({"steps": 20}, {"device": "cpu"}, "/out", "id1")
    assert req == {
        "output_dir": "/out",
        "num_steps": 20,
        "activities": ["CPU"],
        "profile_prefix": "sglops",
        "profile_id": "id1",
        "with_stack": False,
        "record_shapes": False,
    }
    req = ns["start_request"](
        {"steps": 3, "with_stack": True, "record_shapes": True, "by_stage": True},
        {"device": "cuda"},
        "/out",
        "id2",
    )
    assert req["activities"] == ["CPU", "GPU"] and req["with_stack"] and req["record_shapes"]
    assert req["profile_by_stage"] is True


def test_a_dead_server_is_named_dead_with_its_logs_cause(tmp_path, monkeypatch):
    ns = _host_script()
    log = tmp_path / "server.log"
    log.write_text(
        '[2026-12-02 17:00:01] Traceback (most recent call last):\n  File "x.py", line 1\n'
        "IndexError: index out of range in self\n[2026-12-02 17:00:01] Received sigquit from a child\n"
    )
    base = f"http://127.0.0.1:{free_port()}"
    line = ns["explain_failure"](
        base, "/generate during profiling", None, "IncompleteRead(0 bytes read)", str(log)
    )
    assert line.startswith(
        "/generate during profiling failed (IncompleteRead(0 bytes read)) and the server died: "
        "IndexError: index out of range in self (from "
    )
    assert "restart it" in line
    import http.client

    def dies_mid_answer(*_a, **_kw):
        raise http.client.IncompleteRead(b"")

    shared = vars(profile_request)
    # the connection breaks mid-answer: an answer to explain
    monkeypatch.setitem(shared, "http", dies_mid_answer)
    assert shared["post"](base + "/generate", {}, 5) == (None, "IncompleteRead: IncompleteRead(0 bytes read)")


def test_a_native_crash_is_named_by_its_fatal_signal_and_frame(tmp_path):
    # a REAL SGLang 0.5.23 CPU server's log (verbatim): the torch profiler segfaulted stopping a by-stage
    # DECODE profile (docs/trace.md's record). A native crash prints no exception line; the fatal signal and
    # the crashing thread's innermost Python frame are what a person would quote.
    ns = _host_script()
    log = Path(__file__).parent / "data" / "runtime_logs" / "profiler_segfault--by-stage-decode-stop.log"
    base = f"http://127.0.0.1:{free_port()}"
    line = ns["explain_failure"](base, "/generate during profiling", None, "RemoteDisconnected", str(log))
    assert (
        "and the server died: Fatal Python error: Segmentation fault (in torch/autograd/profiler.py:442 "
        "__exit__) (from "
    ) in line and line.endswith("restart it (inv restart) before profiling again")
    # the same crash caught while the garbage collector ran:
    # the first frame under "Current thread" still names it
    gc = log.with_name("profiler_segfault--by-stage-decode-stop-while-collecting.log")
    assert ns["death_cause"](str(gc)) == (
        "Fatal Python error: Segmentation fault (in sglang/srt/managers/"
        "scheduler_components/profiler_manager.py:405 _stop_profile)"
    )
    # an exception after a fatal line would be the later cause: the last of either wins
    later = tmp_path / "later.log"
    later.write_text(log.read_text() + "[2026-12-04 03:18:00] RuntimeError: a later failure\n")
    assert ns["death_cause"](str(later)) == "RuntimeError: a later failure"


def test_a_server_started_by_hand_has_its_redirected_output_read_for_the_cause(tmp_path):
    # `nohup python -m sglang.launch_server ... > server.log 2>&1 &`: sglops kept no log of its own for it,
    # but the file its stderr goes to is the log that names the crash
    ns = _host_script()
    log = tmp_path / "by-hand.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["sleep", "30"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        assert ns["stdio_log"](proc.pid) == str(log)
    finally:
        proc.kill()
        proc.wait()
    quiet = subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert ns["stdio_log"](quiet.pid) is None and ns["stdio_log"](None) is None
    finally:
        quiet.kill()
        quiet.wait()


def test_runs_table_shows_a_profiles_own_status():
    """`inv runs` shows a profile run's status (ok / failed) though it has no bench headline."""
    from rich.console import Console

    from sglops.bench.compare import RunList
    from sglops.views.show import render

    out = Console(record=True, width=200)
    out.print(
        render(
            RunList(
                [
                    {
                        "run_id": "20261202-180000-ab12",
                        "host": "cpu-host",
                        "task": "profile",
                        "status": "failed",
                    }
                ]
            )
        )
    )
    row = next(line for line in out.export_text().splitlines() if "20261202-180000-ab12" in line)
    assert "profile" in row and "failed" in row
