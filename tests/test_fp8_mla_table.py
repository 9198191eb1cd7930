"""The FP8 MLA decode table of record is derived from an H200 run's JSON by a rule
(benchmarks/fp8_mla_table.py): the kernel the package would launch per cell, % of the copy ceiling of the same
run, and the issue's goals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "fp8_mla_table.py"
RUN = (
    ROOT
    / "benchmarks"
    / "results"
    / "fp8-mla-decode-h200"
    / "cuda-2026-12-03"
    / "round7c-fp8_mla_variants.json"
)
RUN9 = ROOT / "benchmarks" / "results" / "fp8-mla-round9-2026-12-04" / "round9-fp8_mla_variants.json"
# the package's pick when round 7c ran
ROUND7_PICK = "16=n64_s2_b2_1b_lz,128=n64_s2_b2_1b_lz"


def table(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def cells(out: str) -> dict[tuple[str, str, str], list[str]]:
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ") and "**" in line]
    return {(r[0].strip(), r[1].strip(), r[2].strip()): [c.strip() for c in r] for r in rows}


def test_each_cell_names_the_kernel_the_package_would_launch_and_derives_its_figures():
    out = table(str(RUN), "--pick", ROUND7_PICK)
    assert out.returncode == 0, out.stderr
    got = cells(out.stdout)
    assert len(got) == 18
    big = got[("16", "128K", "64")]
    # 8,388,608 rows x 576 B in 1,558.6 us = 3.10 TB/s; the
    # run's copy ceiling 4.21 TB/s -> 73.6%, a missed goal
    assert big[4] == "n64_s2_b2_1b_lz" and big[5] == "**1558.6**" and big[8] == "3.10" and big[9] == "73.6% *"
    # a cell under 1M rows is never marked on the bandwidth goals, only on (f)/(c)
    assert "*" not in got[("16", "4K", "64")][9]
    assert got[("128", "4K", "16")][11] == "1.31 *"


def test_the_round9_table_of_record_meets_the_16_head_goals_with_the_package_pick():
    # no --pick: the package's own DEFAULT
    out = table(str(RUN9))
    assert out.returncode == 0, out.stderr
    got = cells(out.stdout)
    # 8,388,608 rows x 576 B in 1,376.3 us = 3.51 TB/s; that
    # run's copy ceiling 4.14 TB/s -> 84.7%; (e) 2,505.6 us
    big = got[("16", "128K", "64")]
    assert (
        big[4] == "n64_s2_b2_1b_lz_x2" and big[5] == "**1376.3**" and big[8] == "3.51" and big[9] == "84.7%"
    )
    assert big[10] == "0.55"
    million = [c for k, c in got.items() if k[0] == "16" and float(c[3].rstrip("M")) >= 1.0]
    assert len(million) == 3 and not any("*" in c[9] or "*" in c[10] for c in million)


def test_128_heads_take_the_16_head_pick_up_to_16_requests_and_the_128_head_pick_above():
    out = table(str(RUN), "--pick", "16=n32_s3_b3_tma4,128=n16_s3_b4_tma4_qs_lz")
    assert out.returncode == 0, out.stderr
    got = cells(out.stdout)
    assert got[("128", "32K", "16")][4] == "n32_s3_b3_tma4"
    assert got[("128", "32K", "64")][4] == "n16_s3_b4_tma4_qs_lz"
    assert got[("16", "128K", "64")][5] == "**1564.2**"


def test_a_pick_that_was_not_timed_or_a_bad_pick_gets_one_line_and_exit_2(tmp_path):
    untimed = table(str(RUN), "--pick", "16=n32_s4_b2_ws")
    assert untimed.returncode != 0 and "was not timed in this run" in untimed.stderr
    bad = table(str(RUN), "--pick", "64=x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    junk = tmp_path / "r.json"
    junk.write_text("{}")
    assert table(str(junk)).returncode == 2
