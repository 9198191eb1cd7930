"""Reading Nsight Compute's per-instruction stall samples (benchmarks/ncu_source_top.py) on an excerpt of a
real export: the H200 profile of the FP8 MLA decode kernel before round 7's slot fix (22 of its 2,040 SASS
rows)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "ncu_source_top.py"
EXCERPT = ROOT / "tests" / "data" / "ncu" / "fp8_mla_round7a_source_excerpt.csv"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_hot_instruction_and_its_stall_reason_come_first():
    out = run(str(EXCERPT), "--top", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("over 22 instructions")
    first = lines[lines.index(next(x for x in lines if x.startswith("top 3"))) + 1]
    # the i64 sign extension of the slot just loaded: every issuing warp waited out the index load there
    assert "SHF.R.S32.HI" in first and "long_sb 32767" in first
    reasons = [x.split()[0] for x in lines[1:4]]
    assert reasons[0] == "long_sb"


def test_a_file_that_is_not_a_source_export_gets_one_line_and_exit_2(tmp_path):
    missing = run(str(tmp_path / "none.csv"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    other = tmp_path / "details.csv"
    other.write_text('"ID","Kernel Name"\n"0","k"\n')
    wrong = run(str(other))
    assert wrong.returncode != 0 and "no 'Warp Stall Sampling" in wrong.stderr
