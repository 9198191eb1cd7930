"""`inv sweep` recorded through the runner, and `inv report` of a sweep.

The end-to-end part runs on a sandbox host (real sshd, real sglang 0.5.23 tree, real patch/ledger/restart host
scripts) whose server is the STAND-IN (sglops/sandbox/standin_server.py): its decode rates are SET BY THE
STAND-IN, so these tests check the records (which run keeps what, what `inv compare` / `inv report` / `inv
runs` read back, what a dry run writes), never a figure. A candidate whose port a real listening socket holds
fails its start through the real restart script (port_in_use): a crash row with its own record. The
real-server proof is tests/test_sweep_real.py.

The rest needs no host: a recorded sweep read back (from_json) draws the same table, and strings from a host
(crash lines, kernel names) reach neither the terminal, the markdown nor `--json` with control characters raw.
"""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest
import yaml
from conftest import REPO, inv_cmd, open_remote

from sglops.core import artifacts
from sglops.core.console import json_text
from sglops.experiment.ab_plan import Found
from sglops.experiment.sweep_plan import parse_candidate
from sglops.experiment.sweep_result import FailedStart, Row, SweepResult
from sglops.launch import server as launch
from sglops.launch.results import RestartResult
from sglops.patch import apply as patches
from sglops.sandbox.sshd import free_port
from sglops.views import report
from sglops.views.sweep import sweep_markdown, sweep_report, sweep_view

# \n aside
RAW_CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]


def _raw_controls(text: str) -> list[str]:
    return sorted({repr(ch) for ch in text if ch in RAW_CONTROLS})


# -- a sweep on a stand-in host, recorded by the runner
# ---------------------------------------------------------
@pytest.fixture(scope="module")
def sweep_host(make_sandbox, tmp_path_factory):
    """(sandbox, env, held port): one stand-in host, profile `sbx` on its own port, a port a socket holds."""
    sb = make_sandbox([{"name": "sw-1", "sglang": "0.5.23", "flashinfer": "0.7.2"}], name="sweeprec")
    profiles = tmp_path_factory.mktemp("sweep-profiles")
    doc = yaml.safe_load((REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text())
    doc.update(
        port=free_port(), per_host={}, env={"SGLOPS_STANDIN_STARTUP_S": "0.2", "SGLOPS_STANDIN_SPEEDUP": "20"}
    )
    (profiles / "sbx.yaml").write_text(yaml.safe_dump(doc))
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    env = {"SGLOPS_INVENTORY": str(sb.inventory), "SGLOPS_PROFILES": str(profiles), "COLUMNS": "250"}
    yield sb, env, held.getsockname()[1]
    held.close()
    with open_remote(sb, "sw-1") as remote:
        launch.stop(remote)


BENCH = ["--runs", "2", "--input-len", "8", "--output-len", "8", "--warmup", "0"]


def _candidates(port: int) -> str:
    return ";".join(
        [
            "attention_backend=flashinfer",
            "attention_backend=flashinfer+gather-cast",
            f"port={port}",
            "attention_backend=cutlass_mla",
        ]
    )


def _manifest(arts: Path, run: str) -> dict:
    return json.loads((arts / "sw-1" / run / "manifest.json").read_text())


def test_sweep_is_one_run_and_each_candidate_an_ordinary_run(sweep_host, tmp_path):
    sb, base_env, held = sweep_host
    arts = tmp_path / "artifacts"
    env = {**base_env, "SGLOPS_ARTIFACTS": str(arts)}
    args = ["sweep", "--host", "sw-1", "--profile", "sbx", "--candidates", _candidates(held), *BENCH]

    dry = inv_cmd(*args, "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert [r["status"] for r in json.loads(dry.stdout)["rows"]] == ["planned"] * 3 + ["skipped"]
    # a dry run records nothing
    assert not arts.exists()

    proc = inv_cmd(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    run = doc["run_id"]
    c1, c2, crash, skip = doc["rows"]
    assert [c1["status"], c2["status"], crash["status"], skip["status"]] == [
        "started",
        "started",
        "crashed",
        "skipped",
    ]
    assert crash["crash"] == "port_in_use" and f"port {held}" in crash["outcome"]
    assert "cutlass_mla is not a choice of sglang 0.5.23" in skip["reasons"][0] and skip["run_id"] is None
    # the sweep: the runner's record, in the run folder the JSON names
    assert doc["artifact"] == str(arts / "sw-1" / run / "sweep.json") and doc["folder"] == str(
        arts / "sw-1" / run
    )
    kept = json.loads((arts / "sw-1" / run / "sweep.json").read_text())
    assert [r["status"] for r in kept["rows"]] == [r["status"] for r in doc["rows"]]
    man = _manifest(arts, run)
    assert man["task"] == "sweep" and man["status"] == "ok" and "sweep.json" in man["files"]
    assert man["sweep"]["runs"] == [f"{run}-c1", f"{run}-c2", f"{run}-c3"]
    assert man["sweep"]["recommendation"] == doc["recommendation"] and "seconds" in man
    # each candidate: its own run (bench.json + outputs, or the failed start's restart.json)
    for row in (c1, c2):
        m = _manifest(arts, row["run_id"])
        assert m["task"] == "bench" and m["bench"]["status"] == "ok", m
        assert (arts / "sw-1" / row["run_id"] / "outputs.json").is_file()
    m = _manifest(arts, crash["run_id"])
    assert m["task"] == "restart" and m["status"] == "failed" and m["sweep"] == run
    assert (
        json.loads((arts / "sw-1" / crash["run_id"] / "restart.json").read_text())["failure"] == "port_in_use"
    )
    assert sorted(p.name for p in (arts / "sw-1").iterdir()) == [run, f"{run}-c1", f"{run}-c2", f"{run}-c3"]
    # the host as found: no sglops server, no patch
    with open_remote(sb, "sw-1") as remote:
        assert not launch.status(remote).running and patches.applied(remote) == []

    # what the other tasks read back
    cmp = inv_cmd("compare", c1["run_id"], c2["run_id"], "--no-chart", "--json", env=env)
    assert cmp.returncode == 0, cmp.stderr[-2000:]
    assert json.loads(cmp.stdout)["baseline"].endswith(c1["run_id"])
    runs = json.loads(inv_cmd("runs", "--json", env=env).stdout)["runs"]
    assert {r["run_id"]: r["task"] for r in runs} == {
        run: "sweep",
        f"{run}-c1": "bench",
        f"{run}-c2": "bench",
        f"{run}-c3": "restart",
    }
    rep = inv_cmd("report", run, env=env)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert (
        "skipped before start: attention_backend=cutlass_mla: --attention-backend cutlass_mla" in rep.stdout
    )
    # the terminal's
    assert doc["recommendation"] in rep.stdout and rep.stdout.rstrip().endswith("run-report.md")
    page = (arts / "sw-1" / run / "run-report.md").read_text()
    assert (
        page.startswith("# sweep on sw-1: profile sbx, sglang 0.5.23")
        and f"**{doc['recommendation']}**" in page
    )
    assert "## Candidates" in page and f"| 3 | port={held} | crashed: port {held}" in page
    assert (
        "## Skipped before start\n\n- attention_backend=cutlass_mla: --attention-backend cutlass_mla is not"
        in page
    )
    assert (
        "restarts " in page
        and "## Host afterwards\n\nhost restored: stopped (none was running before)" in page
    )
    # a candidate's own run reports on its own
    for row in (c1, crash):
        one = inv_cmd("report", row["run_id"], env=env)
        assert one.returncode == 0, one.stderr[-2000:]
    crash_page = (arts / "sw-1" / crash["run_id"] / "run-report.md").read_text()
    assert f"(a candidate of sweep `{run}`)" in crash_page and "did not come up: port" in crash_page


def test_a_play_step_sweep_is_its_own_run(sweep_host, tmp_path):
    sb, base_env, _held = sweep_host
    arts = tmp_path / "artifacts"
    env = {**base_env, "SGLOPS_ARTIFACTS": str(arts)}
    play = tmp_path / "sw.yaml"
    play.write_text(
        yaml.safe_dump(
            {
                "name": "sw",
                "steps": [
                    {
                        "id": "pick",
                        "do": "sweep",
                        "with": {
                            "profile": "sbx",
                            "candidates": ["attention_backend=flashinfer", "attention_backend=cutlass_mla"],
                            "runs": 1,
                            "input_len": 8,
                            "output_len": 8,
                            "warmup": 0,
                        },
                    }
                ],
            }
        )
    )
    dry = inv_cmd("play", str(play), "--host", "sw-1", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    # the sweep step's dry run records no sweep
    assert not list(arts.glob("*/*-pick"))
    proc = inv_cmd("play", str(play), "--host", "sw-1", "--json", env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    run = doc["run_id"]
    step = doc["steps"][0]
    assert step["status"] == "ok" and step["result"]["run_id"] == f"{run}-pick"
    assert step["run_dir"] == str(arts / "sw-1" / f"{run}-pick")
    assert _manifest(arts, f"{run}-pick")["task"] == "sweep"
    assert _manifest(arts, f"{run}-pick-c1")["task"] == "bench"
    # the play's dry run keeps its play.json only, in a `-dry` run
    assert sorted(p.name for p in (arts / "sw-1").iterdir() if not p.name.endswith("-dry")) == [
        run,
        f"{run}-pick",
        f"{run}-pick-c1",
    ]
    rep = inv_cmd("report", run, env=env)
    assert rep.returncode == 0, rep.stderr[-2000:]
    page = (arts / "sw-1" / run / "run-report.md").read_text()
    assert "## sweep on sw-1" in page and "### Skipped before start" in page and "cutlass_mla" in page


def test_ctrl_c_restores_the_host_records_what_was_measured_and_exits_130(sweep_host, tmp_path, monkeypatch):
    """A real SIGINT to a real `inv sweep` while candidate 2 (gather-cast applied) restarts: the restore puts
    the found server and ledger back, the sweep is on record as interrupted, one line, exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    sb, base_env, _held = sweep_host
    arts = tmp_path / "artifacts"
    env = {**base_env, "SGLOPS_ARTIFACTS": str(arts)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with open_remote(sb, "sw-1") as remote:
        assert launch.restart(remote, "sbx").ok
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "invoke",
            "sweep",
            "--host",
            "sw-1",
            "--profile",
            "sbx",
            "--candidates",
            "attention_backend=flashinfer;attention_backend=flashinfer+gather-cast",
            *BENCH,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    end = time.monotonic() + 180
    while not any("candidate 2 (2/2) attention_backend=flashinfer+gather-cast: restart" in ln for ln in err):
        assert proc.poll() is None and time.monotonic() < end, "".join(err)[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    rc = proc.wait(timeout=240)
    reader.join(timeout=10)
    text = "".join(err)
    assert rc == 130 and "Traceback" not in text, text[-3000:]
    (line,) = [ln for ln in text.splitlines() if "interrupted (SIGINT)" in ln]
    assert "during candidate 2 (2/2)" in line and "host restored: sbx on port" in line, line
    (run,) = [p.parent for p in arts.glob("sw-1/*/sweep.json")]
    man = json.loads((run / "manifest.json").read_text())
    assert (
        man["task"] == "sweep" and man["status"] == "interrupted" and man["sweep"]["runs"][0].endswith("-c1")
    )
    with open_remote(sb, "sw-1") as remote:
        st = launch.status(remote)
        assert st.running and st.profile == "sbx" and patches.applied(remote) == []
        launch.stop(remote)


# -- no host: a recorded sweep read back, and control
# characters from a host -----------------------------------
HOSTILE = "boom\x1b[2J\x1b]0;t\x07\x9b31m\x85end"


def _result() -> SweepResult:
    rows = [
        Row(
            parse_candidate("attention_backend=a", 1),
            status="started",
            run_id="r-c1",
            decode_tok_s=10.0,
            ci95=[9.0, 11.0],
            identity="baseline",
            top_cost=f"k{HOSTILE} 50.0% of GPU time (3 calls)",
        ),
        Row(
            parse_candidate("attention_backend=b+gather-cast", 2),
            status="crashed",
            run_id="r-c2",
            crash="traceback",
            crash_label="Python traceback",
            crash_line=f"ValueError: {HOSTILE}",
        ),
        Row(
            parse_candidate("attention_backend=c", 3),
            status="skipped",
            reasons=[f"c is not a choice {HOSTILE}"],
        ),
    ]
    return SweepResult(
        host="h",
        profile="p",
        sglang_version="0.5.23",
        compute_capability="9.0",
        found=Found(False, None, None, []),
        rows=rows,
        bench={"runs": 2},
        managed=["gather-cast"],
        run_id="r",
        folder="/tmp/r",
        restore={"ok": True, "server": "stopped (none was running before)"},
        wall_s=10.0,
        split={"restarts": 6.0, "benches": 3.0, "profiles": 0.0, "tool": 1.0},
        plan=["candidate 1 attention_backend=a: restart p@attention_backend=a"],
    )


def test_a_recorded_sweep_reads_back_as_the_same_table():
    r = _result()
    back = SweepResult.from_json(json.loads(json.dumps(r.to_json())))
    assert sweep_markdown(back) == sweep_markdown(r)
    assert back.recommendation() == r.recommendation() and back.split_line() == r.split_line()
    assert [x.candidate for x in back.rows] == [x.candidate for x in r.rows] and back.managed == [
        "gather-cast"
    ]
    assert back.run_manifest() == r.run_manifest() and r.run_manifest()["sweep"]["runs"] == ["r-c1", "r-c2"]


def test_control_characters_from_the_host_are_escaped_everywhere():
    r = _result()
    md = "\n".join(sweep_report(r)) + sweep_markdown(r)
    assert _raw_controls(md) == [] and "\\x1b[2J" in md and "\\x9b31m" in md
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=250, markup=False, color_system=None).print(sweep_view(r))
    shown = buf.getvalue()
    assert _raw_controls(shown) == [] and "\\x1b[2J" in shown
    assert "skipped before start: attention_backend=c: c is not a choice" in shown
    # what --json prints: escaped, and the data itself kept exactly
    text = json_text(r.to_json())
    assert _raw_controls(text.replace("\n", "")) == [] and "\\u009b31m" in text
    assert json.loads(text)["rows"][1]["crash_line"] == f"ValueError: {HOSTILE}"


def test_json_output_escapes_c1_controls_from_a_trace(tmp_path):
    """Issue 25 F16's remainder: a kernel name with U+009B (a one-byte CSI) reached `--json` output raw."""
    from test_trace_hostile import _gpu_trace

    trace = _gpu_trace(tmp_path / "c1.trace.json", "kern\x9b2J\x85el", op="aten::\x9bop")
    proc = inv_cmd("analyze-trace", str(trace), "--out", str(tmp_path / "o"), "--json")
    assert proc.returncode == 0, proc.stderr[-1000:]
    assert _raw_controls(proc.stdout.replace("\n", "")) == [] and "\\u009b" in proc.stdout
    assert json.loads(proc.stdout)["by_kernel"][0]["name"] == "kern\x9b2J\x85el"


def test_a_failed_start_is_kept_and_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path))
    res = RestartResult(
        "h",
        "p@attention_backend=x",
        False,
        "died",
        30001,
        failure="bad_argument",
        failure_label="invalid argument",
        failure_detail=f"ValueError: {HOSTILE}",
        log_tail=["loading", f"ValueError: {HOSTILE}"],
        log_path="/s/server.log",
    )
    path = artifacts.keep("h", "r-c2", "restart.json", FailedStart(res, "r"), task="restart")
    man = json.loads((path.parent / "manifest.json").read_text())
    assert man["task"] == "restart" and man["status"] == "failed" and man["sweep"] == "r"
    page = report.render(path.parent)
    assert page.startswith("# Restart on h (a candidate of sweep `r`)")
    assert (
        "**did not come up: invalid argument: ValueError: boom\\x1b[2J" in page and _raw_controls(page) == []
    )
