"""The CUDA C++ FP8 MLA decode kernel without a GPU: its catalogue matches its source, the kernels the package
picks fit their targets (the H200 machine's own ptxas reports, kept with the results), and the pick follows
heads and batch. Where this machine has nvcc, the source is compiled for sm_90a and sm_120 and checked the
same way. The numbers (H200) are in kernels/fp8_mla_decode/BENCH.md; the GPU self-test is
kernels/fp8_mla_decode/selftest.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# the kernel package imports it (the subprocesses below use this interpreter)
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "kernels" / "fp8_mla_decode"
SOURCE = KERNEL / "sglops_kernels" / "fp8_mla_decode" / "fp8_mla_decode.cu"
# the research source (every variant of rounds 1-9, PIPE 2-4 among them), out of the package since v0.6
LAB_SOURCE = ROOT / "lab" / "fp8_mla_decode" / "fp8_mla_decode_rounds.cu"
REPORTS = ROOT / "benchmarks" / "results" / "fp8-mla-decode-h200" / "cuda-2026-12-03"


def run(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{KERNEL}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_kernel_the_source_defines_is_catalogued_and_every_catalogued_one_is_defined():
    # DEFINE_DECODE: name, rows per tile, ring depth, CTAs per SM; the package's source holds the picks and
    # nothing else (no variant, no #ifdef: the research kernels are in lab/fp8_mla_decode/)
    text = SOURCE.read_text()
    found = list(re.finditer(r"^DEFINE_DECODE\(fp8_mla_(\w+), (\d+), (\d+), (\d+),", text, re.M))
    defined = {m[1]: (int(m[2]), int(m[3]), int(m[4])) for m in found}
    got = run(
        "import json; from sglops_kernels.fp8_mla_decode import _cuda; "
        "print(json.dumps([_cuda.KERNELS, sorted(_cuda.SHIPPED)]))"
    )
    shapes, shipped = got
    assert set(defined) == set(shapes) == set(shipped)
    for name, shape in shapes.items():
        assert defined[name] == tuple(shape), name
    assert "#ifdef" not in text and "#if " not in text


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
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_PICKS, json.dumps(reports)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for arch, picks in json.loads(proc.stdout).items():
        for heads, r in picks.items():
            assert r["spill_stores"] == 0 and r["stack"] == 0, (arch, heads, r)
            assert r["ctas_per_sm"] >= r["wanted_ctas"], (arch, heads, r)


def test_the_picked_kernels_fit_each_target_by_recorded_ptxas_reports():
    # sm_90a: the H200 machine's own nvcc 13.0 (round 9, the run that picked it); sm_120: the same release on
    # the CPU machine, of the round-7 source (the sm120 pick has not changed since)
    round9 = ROOT / "benchmarks" / "results" / "fp8-mla-round9-2026-12-04" / "round9-ptxas_sm_90a.txt"
    check_picks(
        [
            ("sm90", "sm_90a", str(round9)),
            ("sm120", "sm_120", str(REPORTS / "round7-ptxas-cpu-machine-nvcc13.0-sm_120.txt")),
        ]
    )


def test_an_sm120_gpu_loads_its_own_picks_and_leaves_out_kernels_too_big_for_its_blocks():
    """Every cubin holds both families' picks; the sm90 pick's shared memory (112,768 B) is more than an
    sm_120 block may have (101,376), and raising its limit there would fail the whole module on the seeds'
    GPUs (RTX PRO 6000)."""
    got = run("""import json
from sglops_kernels.fp8_mla_decode import _cuda
print(json.dumps({
    a: {"required": _cuda.required_kernels(a), "fits": {n: _cuda.fits_block(n, a) for n in _cuda.SHIPPED},
        "family": _cuda.family_of(a)}
    for a in ("sm_90a", "sm_120")}))""")
    assert got["sm_120"]["required"] == ["n32_s2_b2_tma4"] and got["sm_90a"]["required"] == [
        "n64_s2_b2_1b_lz_x2"
    ]
    assert got["sm_120"]["fits"] == {"n32_s2_b2_tma4": True, "n64_s2_b2_1b_lz_x2": False}
    assert all(got["sm_90a"]["fits"].values()) and [got[a]["family"] for a in got] == ["sm90", "sm120"]


def test_a_kernel_that_would_spill_or_not_fit_is_caught():
    res = run("""import json
from sglops_kernels.fp8_mla_decode import _cuda
text = "\\n".join(f"ptxas info    : Compiling entry function 'fp8_mla_{n}' for 'sm_120'\\n"
                  f"ptxas info    : Function properties for fp8_mla_{n}\\n"
                  f"    {st} bytes stack frame, {st} bytes spill stores, {st} bytes spill loads\\n"
                  f"ptxas info    : Used {r} registers, used 1 barriers" for n, r, st in
                  (("n32_s2_b2_tma4", 255, 8), ("n64_s2_b2_1b_lz_x2", 194, 0)))
print(json.dumps(_cuda.resources(text, "sm_120")))""")
    # a spilling build of the sm120 pick does not fit; the sm90 pick's 112,768 B exceed an sm_120 block
    assert res["n32_s2_b2_tma4"]["spill_stores"] > 0 and not res["n32_s2_b2_tma4"]["fits"]
    assert res["n64_s2_b2_1b_lz_x2"]["ctas_by_smem"] == 0 and not res["n64_s2_b2_1b_lz_x2"]["fits"]


NEEDS_NVCC = pytest.mark.skipif(
    shutil.which("nvcc") is None,
    reason="no nvcc on this machine (CI): the recorded reports are checked above",
)


def nvcc_entries(tmp_path: Path, arch: str, *flags: str) -> tuple[str, set[str]]:
    """ptxas's -v report of the .cu compiled for arch, and the kernels the cubin holds."""
    num = arch.removeprefix("sm_")
    proc = subprocess.run(
        [
            "nvcc",
            "-cubin",
            f"-gencode=arch=compute_{num},code=sm_{num}",
            "-O3",
            *flags,
            "-Xptxas",
            "-v",
            "-o",
            str(tmp_path / f"{arch}.cubin"),
            str(SOURCE),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr, set(re.findall(r"Compiling entry function 'fp8_mla_(\w+)'", proc.stderr))


@NEEDS_NVCC
def test_the_source_compiles_for_both_targets_and_the_picks_fit(tmp_path):
    shipped = set(
        run(
            "import json; from sglops_kernels.fp8_mla_decode import _cuda; "
            "print(json.dumps(sorted(_cuda.SHIPPED)))"
        )
    )
    reports = []
    for family, arch in (("sm90", "sm_90a"), ("sm120", "sm_120")):
        text, built = nvcc_entries(tmp_path, arch)
        # a host's build-kernel compiles the picks and the merge alone
        assert built == shipped | {"merge"}
        (tmp_path / f"{arch}.txt").write_text(text)
        reports.append((family, arch, str(tmp_path / f"{arch}.txt")))
    check_picks(reports)


@NEEDS_NVCC
def test_the_lab_source_still_compiles_with_its_variants(tmp_path):
    # the research record (lab/fp8_mla_decode/fp8_mla_decode_rounds.cu)
    # builds as it did at v0.5, variants and all
    proc = subprocess.run(
        [
            "nvcc",
            "-cubin",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-O3",
            "-DFP8_MLA_VARIANTS",
            "-o",
            str(tmp_path / "lab.cubin"),
            str(LAB_SOURCE),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_pick_follows_heads_and_batch_and_short_contexts_get_shorter_splits():
    got = run("""import json
from sglops_kernels.fp8_mla_decode import _cuda
print(json.dumps({
  "16": _cuda.config_for(16, "sm90")["kernel"],
  "128_bs8": _cuda.config_for(128, "sm90", batch=8)["kernel"],
  "128_bs64": _cuda.config_for(128, "sm90", batch=64)["kernel"],
  "120": _cuda.config_for(16, "sm120")["kernel"],
  "min_rows": [_cuda.min_rows_for(n) for n in (100, 4096, 8192, 32768, 131072)]}))""")
    assert got["16"] == got["128_bs8"] == got["128_bs64"] == "n64_s2_b2_1b_lz_x2"
    assert got["120"] == "n32_s2_b2_tma4"
    assert got["min_rows"] == [64, 64, 128, 256, 256]


def _waits() -> tuple[str, str]:
    """The parity expressions of the warp-specialised pipeline's two waits, as the lab's .cu writes them (PIPE
    2 was never shipped; the model keeps checking the record)."""
    text = LAB_SOURCE.read_text()
    producer = re.search(r"if \(tl >= STAGES\) mbar_wait\(&empty\[st\], (.+?)\);", text)
    consumer = re.search(r"mbar_wait\(&bars\[i % STAGES\], (.+?)\);", text)
    assert producer and consumer, "the PIPE 2 waits moved: update this test"
    return producer[1], consumer[1]


def _run_pipeline(producer_parity: str, consumer_parity: str, stages: int, ntiles: int, seed: int) -> str:
    """Runs the .cu's PIPE 2 protocol (one producer, four consumer warps, a full and an empty mbarrier per
    stage, bulk copies that land at random later times) under a random interleaving; returns "ok", "deadlock"
    or what went wrong. An mbarrier here: a phase completes when its pending arrivals and bytes reach zero;
    try_wait.parity(P) succeeds once the phase of parity P
    has completed (the current phase's parity is not P)."""
    import random

    rnd = random.Random(seed)
    # the .cu's own expressions; every operand is non-negative, so C's integer division is Python's //
    par_p = eval("lambda tl, STAGES: " + producer_parity.replace("/", "//"))  # noqa: S307
    par_c = eval("lambda i, STAGES: " + consumer_parity.replace("/", "//"))  # noqa: S307
    full = [{"phase": 0, "pending": 1, "tx": 0} for _ in range(stages)]
    empty = [{"phase": 0, "pending": 4} for _ in range(stages)]
    # which tile's rows a stage holds (None: being written)
    stage_tile = [None] * stages
    readers = [set() for _ in range(stages)]
    # (stage, tile) copies issued, not landed
    in_flight = []
    prod = {"tl": 0, "step": "wait"}
    cons = [{"i": 0, "step": "wait"} for _ in range(4)]

    def complete(bar, count):
        bar["pending"] -= 1
        if bar["pending"] == 0 and bar.get("tx", 0) == 0:
            bar["phase"] += 1
            bar["pending"] = count

    def passed(bar, parity):
        return (bar["phase"] & 1) != parity

    for _ in range(200000):
        actors = []
        if prod["tl"] < ntiles:
            actors.append("p")
        actors += [w for w in range(4) if cons[w]["i"] < ntiles]
        if in_flight:
            actors.append("land")
        if not actors:
            return "ok"
        progress = False
        for a in rnd.sample(actors, len(actors)):
            if a == "land":
                st, tile = in_flight.pop(rnd.randrange(len(in_flight)))
                if readers[st]:
                    return f"tile {tile} landed in stage {st} while warps {sorted(readers[st])} read it"
                stage_tile[st] = tile
                full[st]["tx"] -= 1
                if full[st]["tx"] == 0 and full[st]["pending"] == 0:
                    full[st]["phase"] += 1
                    full[st]["pending"] = 1
                progress = True
                break
            if a == "p":
                tl = prod["tl"]
                st = tl % stages
                if tl >= stages and not passed(empty[st], par_p(tl, stages)):
                    continue
                if readers[st] or any(s2 == st for s2, _ in in_flight):
                    return f"tile {tl} issued into stage {st} while it is read or still being written"
                # expect_tx then the copy: one unit per tile
                full[st]["tx"] += 1
                complete(full[st], 1)
                stage_tile[st] = None
                in_flight.append((st, tl))
                prod["tl"] += 1
                progress = True
                break
            c = cons[a]
            st = c["i"] % stages
            if c["step"] == "wait":
                if not passed(full[st], par_c(c["i"], stages)):
                    continue
                if stage_tile[st] != c["i"]:
                    return f"warp {a} passed the wait for tile {c['i']} but stage {st} holds {stage_tile[st]}"
                readers[st].add(a)
                c["step"] = "read"
            else:
                readers[st].discard(a)
                complete(empty[st], 4)
                c["i"] += 1
                c["step"] = "wait"
            progress = True
            break
        if not progress:
            return "deadlock"
    return "too long"


def test_the_warp_specialised_pipeline_never_refills_a_stage_in_use_nor_stalls():
    producer, consumer = _waits()
    for stages in (2, 3, 4):
        for ntiles in (0, 1, stages, 2 * stages + 1, 13):
            for seed in range(20):
                assert _run_pipeline(producer, consumer, stages, ntiles, seed) == "ok", (stages, ntiles, seed)


def test_the_pipeline_model_catches_a_wrong_parity():
    # the producer waiting on the phase one round late (no wait at all in effect) or the consumers on the
    # wrong phase must show up as an overwrite, a stale read or a deadlock
    _, consumer = _waits()
    results = {_run_pipeline("(tl / STAGES) & 1", consumer, 3, 13, seed) for seed in range(20)}
    assert results != {"ok"}
    producer, _ = _waits()
    results = {_run_pipeline(producer, "((i / STAGES) + 1) & 1", 3, 13, seed) for seed in range(20)}
    assert results != {"ok"}
