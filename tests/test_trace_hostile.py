"""Issue 25's trace defects, each reproduced as the red team did it: F15 (a 60 MB kernel name, an empty
trace), F16 (terminal control characters in trace names), `diff-trace --top abc` / `--top -3`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import inv_cmd

DATA = Path(__file__).parent / "data" / "traces"
CPU = DATA / "sglang-cpu-nostack-TP-0.trace.json.gz"
ESC = "\x1b"


def _gpu_trace(path: Path, kernel: str, op: str = "aten::copy_") -> Path:
    """A one-kernel trace in Kineto's layout (one event per `{...},` block, as torch writes them)."""
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": op,
            "pid": 1,
            "tid": 1,
            "ts": 0.0,
            "dur": 10.0,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 1.0,
            "args": {"correlation": 5},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": kernel,
            "pid": 0,
            "tid": 7,
            "ts": 2.0,
            "dur": 5.0,
            "args": {"correlation": 5, "device": 0},
        },
    ]
    with open(path, "w") as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "traceEvents": [\n')
        fh.write(",\n".join("  " + json.dumps(e) for e in events))
        fh.write("\n]}\n")
    return path


def test_f15_a_60mb_kernel_name_is_shown_in_seconds(tmp_path):
    """Main took > 120 s (super-linear: whole-name scans and
    a 60 MB table cell); now linear and the cell short."""
    name = "void at::native::" + "x" * 60_000_000 + "<float>(int)"
    trace = _gpu_trace(tmp_path / "big.trace.json", name)
    del name
    t = time.monotonic()
    r = inv_cmd("analyze-trace", str(trace), "--out", str(tmp_path / "o"))
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr[-1000:]
    assert took < 60, took
    # no 60 MB cell
    assert max(len(line) for line in r.stdout.splitlines()) < 400
    doc = json.loads((tmp_path / "o" / "analysis.json").read_text())
    # JSON keeps it
    assert len(doc["by_kernel"][0]["name"]) == 60_000_000 + len("void at::native::<float>(int)")


def test_f15_an_empty_trace_is_one_line_and_non_zero(tmp_path):
    empty = tmp_path / "empty.trace.json"
    empty.write_text('{"traceEvents": []}')
    r = inv_cmd("analyze-trace", str(empty))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "no trace events" in r.stderr, r.stderr
    r = inv_cmd("diff-trace", str(empty), str(CPU))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no trace events" in r.stderr


HOSTILE = ["aten::\x1b[2J\x1b[31mpwned\x07", "k\x1b]0;title\x07\r\x08ernel\x9b31m\nsecond line"]


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_f16_control_characters_never_reach_the_terminal(tmp_path, fmt):
    trace = _gpu_trace(tmp_path / "ctl.trace.json", HOSTILE[1], op=HOSTILE[0])
    args = ["analyze-trace", str(trace), "--out", str(tmp_path / "o")] + (["--json"] if fmt == "json" else [])
    r = inv_cmd(*args)
    assert r.returncode == 0, r.stderr[-1000:]
    # C0 controls (ESC, BEL, BS, CR): escaped by the views, and by JSON itself; C1 (U+009B, CSI) by the views
    banned = (ESC, "\x07", "\x08", "\r") + (("\x9b",) if fmt == "table" else ())
    for stream in (r.stdout, r.stderr):
        assert not any(ch in stream for ch in banned), repr(stream[:400])
    if fmt == "json":
        # the data itself is kept exactly
        assert json.loads(r.stdout)["by_kernel"][0]["name"] == HOSTILE[1]
    if fmt == "table":
        # shown, escaped
        assert "\\x1b[31mpwned\\x07" in r.stdout
        report = (tmp_path / "o" / "report.md").read_text()
        assert ESC not in report and "\x07" not in report and "\\x1b" in report
    r = inv_cmd("diff-trace", str(trace), str(trace))
    assert r.returncode == 0 and ESC not in r.stdout and "\x07" not in r.stdout and "\\x1b" in r.stdout


def test_f16_rich_markup_in_names_is_text(tmp_path):
    trace = _gpu_trace(tmp_path / "m.trace.json", "[bold red]kernel[/]", op="[link=http://x]op[/link]")
    r = inv_cmd("analyze-trace", str(trace), "--out", str(tmp_path / "o"))
    assert r.returncode == 0 and "[bold red]kernel[/]" in r.stdout and "[link=http://x]op[/link]" in r.stdout


@pytest.mark.parametrize("top", ["abc", "-3", "0", "1.5", ""])
def test_diff_trace_top_is_checked(top):
    r = inv_cmd("diff-trace", str(CPU), str(CPU), "--top", top)
    assert r.returncode == 2, (top, r.returncode, r.stderr[-500:])
    assert r.stderr.strip().count("\n") == 0 and "--top" in r.stderr and "Traceback" not in r.stderr


def test_diff_trace_top_still_limits_rows():
    r = inv_cmd("diff-trace", str(CPU), str(CPU), "--top", "2")
    assert r.returncode == 0
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    tables = r.stdout.count("┏")
    assert tables and len(rows) <= 2 * tables
