"""The CUDA C++ FP8 MLA decode kernel without a GPU: its catalogue matches its source, the kernels the package picks
fit their targets (the H200 machine's own ptxas reports, kept with the results), and the pick follows heads and
batch. Where this machine has nvcc, the source is compiled for sm_90a and sm_120 and checked the same way.
The numbers (H200) are in kernels/fp8_mla_decode/BENCH.md; the GPU self-test is kernels/fp8_mla_decode/selftest.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the kernel package imports it (the subprocesses below use this interpreter)

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "kernels" / "fp8_mla_decode"
SOURCE = KERNEL / "sglops_kernels" / "fp8_mla_decode" / "fp8_mla_decode.cu"
REPORTS = ROOT / "benchmarks" / "results" / "fp8-mla-decode-h200" / "cuda-2026-12-03"


def run(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_kernel_the_source_defines_is_catalogued_and_every_catalogued_one_is_defined():
    defined = set(re.findall(r"^DEFINE_KERNEL\(fp8_mla_(\w+),", SOURCE.read_text(), re.M))
    catalogued = set(run("import json; from sglops_kernels.fp8_mla_decode import _cuda; print(json.dumps(list(_cuda.KERNELS)))"))
    assert defined == catalogued
    shapes = run("import json; from sglops_kernels.fp8_mla_decode import _cuda; print(json.dumps(_cuda.KERNELS))")
    for name, (block_n, stages, per_sm) in shapes.items():
        line = re.search(rf"^DEFINE_KERNEL\(fp8_mla_{name}, (\d+), (\d+), (\d+),", SOURCE.read_text(), re.M)
        assert (int(line[1]), int(line[2]), int(line[3])) == (block_n, stages, per_sm), name


CHECK_PICKS = """
import json, sys
from pathlib import Path
from sglops_kernels.fp8_mla_decode import _cuda
out = {}
for family, arch, report in json.loads(sys.argv[1]):
    res = _cuda.resources(Path(report).read_text(), arch)
    out[arch] = {str(h): res[name] for h, name in _cuda.DEFAULT[family].items()}
print(json.dumps(out))
"""


def check_picks(reports: list[tuple[str, str, str]]) -> None:
    env = {**os.environ, "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", CHECK_PICKS, json.dumps(reports)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for arch, picks in json.loads(proc.stdout).items():
        for heads, r in picks.items():
            assert r["spill_stores"] == 0 and r["stack"] == 0, (arch, heads, r)
            assert r["ctas_per_sm"] >= r["wanted_ctas"], (arch, heads, r)


def test_the_picked_kernels_fit_each_target_by_recorded_ptxas_reports():
    # sm_90a: the H200 machine's own nvcc 13.0 (round 5); sm_120: the same release on the CPU machine, of the
    # current source (its pick was added after round 5)
    check_picks([("sm90", "sm_90a", str(REPORTS / "round5-ptxas_sm_90a.txt")),
                 ("sm120", "sm_120", str(REPORTS / "ptxas-cpu-machine-nvcc13.0-sm_120.txt"))])


def test_a_kernel_that_would_spill_or_not_fit_is_caught():
    res = run(f"""import json
from pathlib import Path
from sglops_kernels.fp8_mla_decode import _cuda
r = _cuda.resources(Path({str(REPORTS / 'round5-ptxas_sm_120.txt')!r}).read_text(), "sm_120")
print(json.dumps(r))""")
    # sm_90a's 16-head pick on sm_120: three CTAs wanted, ~100 KB of shared memory holds one
    assert res["n32_s3_b3_tma4"]["ctas_per_sm"] < res["n32_s3_b3_tma4"]["wanted_ctas"]
    # the three-CTA register cap spills on sm_120 (ptxas: 8-byte stack)
    assert res["n32_s2_b3_tma"]["spill_stores"] > 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine (CI): the recorded reports are checked above")
def test_the_source_compiles_for_both_targets_and_the_picks_fit(tmp_path):
    reports = []
    for family, arch in (("sm90", "sm_90a"), ("sm120", "sm_120")):
        num = arch.removeprefix("sm_")
        proc = subprocess.run(["nvcc", "-cubin", f"-gencode=arch=compute_{num},code=sm_{num}", "-O3", "-Xptxas", "-v",
                               "-o", str(tmp_path / f"{arch}.cubin"), str(SOURCE)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (tmp_path / f"{arch}.txt").write_text(proc.stderr)
        reports.append((family, arch, str(tmp_path / f"{arch}.txt")))
    check_picks(reports)


def test_the_pick_follows_heads_and_batch_and_short_contexts_get_shorter_splits():
    got = run("""import json
from sglops_kernels.fp8_mla_decode import _cuda
print(json.dumps({
  "16": _cuda.config_for(16, "sm90")["kernel"], "128_bs8": _cuda.config_for(128, "sm90", batch=8)["kernel"],
  "128_bs64": _cuda.config_for(128, "sm90", batch=64)["kernel"], "120": _cuda.config_for(16, "sm120")["kernel"],
  "min_rows": [_cuda.min_rows_for(n) for n in (100, 4096, 8192, 32768, 131072)]}))""")
    assert got["16"] == got["128_bs8"] == "n32_s3_b3_tma4"
    assert got["128_bs64"] == "n16_s3_b4_tma4_qs_lz"
    assert got["120"] == "n32_s2_b2_tma4"
    assert got["min_rows"] == [64, 64, 128, 256, 256]
