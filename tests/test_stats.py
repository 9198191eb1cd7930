"""The statistics behind every bench figure: numpy-compatible percentiles, honest intervals, noise flags."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sglops.bench import stats
from sglops.bench.compare import verdict
from sglops.bench.run import analyze, request_metrics


def test_percentiles_match_numpy_as_bench_serving_computes_them():
    rng = random.Random(7)
    for n in (1, 2, 5, 37, 1000):
        xs = [rng.lognormvariate(0, 1) for _ in range(n)]
        for q in (0, 50, 90, 95, 99, 100):
            assert stats.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)
    s = stats.summary([4.0, 1.0, 3.0, 2.0])
    assert (s["n"], s["median"], s["mean"], s["min"], s["max"]) == (4, 2.5, 2.5, 1.0, 4.0)
    assert stats.summary([]) is None


def test_bootstrap_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(1)
    covered, trials = 0, 200
    for t in range(trials):
        xs = [rng.gauss(100, 5) for _ in range(15)]
        lo, hi = stats.bootstrap_ci(xs, resamples=400, seed=t)
        covered += lo <= 100 <= hi
    assert 0.85 <= covered / trials <= 1.0
    assert stats.bootstrap_ci([3.0]) is None
    # seeded: re-analysing a recorded run gives the same interval
    assert stats.bootstrap_ci([1.0, 2.0, 3.0, 9.0]) == stats.bootstrap_ci([1.0, 2.0, 3.0, 9.0])


def test_cv_above_five_percent_is_flagged_noisy():
    steady = stats.figure([10.0, 10.1, 9.9, 10.05, 9.95])
    noisy = stats.figure([10.0, 11.5, 9.0, 10.8, 9.3])
    assert steady["cv"] < 0.05 and not steady["noisy"]
    assert noisy["cv"] > 0.05 and noisy["noisy"]
    assert stats.figure([10.0])["ci95"] is None and not stats.figure([10.0])["noisy"]


def test_ratio_interval_and_verdicts():
    rng = random.Random(3)
    a = [rng.gauss(10.5, 0.1) for _ in range(5)]
    b = [rng.gauss(13.5, 0.1) for _ in range(5)]
    lo, hi = stats.bootstrap_ratio_ci(a, b)
    assert lo <= stats.median(b) / stats.median(a) <= hi and lo > 1.2
    assert verdict(1.29, (lo, hi), True, True) == "faster"
    assert verdict(1 / 1.29, (1 / hi, 1 / lo), True, True) == "slower"
    # a latency that dropped
    assert verdict(0.78, (0.7, 0.8), False, True) == "faster"
    # below the client's 1% accuracy
    assert verdict(1.004, (1.001, 1.008), True, True) == "within noise"
    assert verdict(1.05, (0.97, 1.12), True, True) == "within noise"
    assert verdict(1.3, (1.2, 1.4), True, False) == "not comparable"
    assert verdict(1.3, None, True, True) == "too few samples"


def _rec(ttft, gaps, *, outcome="ok", first=1):
    """A raw request record as the host script returns it: a first chunk of `first` tokens at ttft, then one
    token per chunk after each gap (seconds)."""
    times, counts = [ttft], [first]
    for gap in gaps:
        times.append(times[-1] + gap)
        counts.append(counts[-1] + 1)
    return {
        "outcome": outcome,
        "error": None if outcome == "ok" else outcome,
        "e2e_s": times[-1],
        "tokens": counts[-1],
        "chunk_t": times,
        "chunk_n": counts,
        "server_e2e_s": None,
        "cpu_s": 0.001,
    }


def test_request_metrics_follow_sglang_definitions():
    m = request_metrics(_rec(0.05, [0.1] * 9))
    # (e2e - ttft) / (n - 1)
    assert m["tpot_ms"] == pytest.approx(100.0)
    assert m["decode_tok_s"] == pytest.approx(10.0)
    assert m["ttft_ms"] == pytest.approx(50.0) and m["e2e_ms"] == pytest.approx(950.0)
    # a first chunk of 4 tokens: decode rate counts only what came after it
    chunky = request_metrics(_rec(0.05, [0.1] * 8, first=4))
    assert chunky["decode_tok_s"] == pytest.approx(10.0)
    assert request_metrics(_rec(0.05, [0.1] * 9, outcome="dropped")) is None


def test_failed_requests_are_counted_and_their_repeats_give_no_figure():
    repeats = [
        {"concurrency": 1, "wall_s": 1.0, "requests": [_rec(0.05, [0.1] * 9)]},
        {"concurrency": 1, "wall_s": 1.0, "requests": [_rec(0.05, [0.1] * 3, outcome="dropped")]},
        {"concurrency": 1, "wall_s": 1.0, "requests": [_rec(0.05, [0.125] * 9)]},
    ]
    lv = analyze(repeats, 1)
    assert lv.status == "partial" and lv.outcomes == {"ok": 2, "dropped": 1}
    assert lv.decode_tok_s["values"] == pytest.approx([10.0, 8.0])
    assert analyze([repeats[1]], 1).status == "failed"


def test_compare_chart_starts_at_zero_and_names_every_run(tmp_path, monkeypatch):
    """A ratio read off the chart is the ratio measured: the y
    axis starts at 0; the title names each run's settings."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    from sglops.bench.compare import Run, chart_title
    from sglops.views import charts

    figs = []
    monkeypatch.setattr(charts.plt, "close", lambda fig: figs.append(fig))
    level = {"concurrency": 1, "decode_tok_s": {"median": 270.0, "ci95": [268.0, 272.0], "values": [270.0]}}
    base = {**level, "decode_tok_s": {"median": 210.0, "ci95": [209.0, 211.0], "values": [210.0]}}
    charts.decode_chart(
        [{"label": "a", "levels": [base]}, {"label": "b", "levels": [level]}], tmp_path / "c.png"
    )
    assert figs and figs[0].axes[0].get_ylim()[0] == 0
    plt.close(figs[0])

    def run(rid: str, api: str, out: int) -> Run:
        return Run(rid, "h", Path("."), {"config": {"api": api, "input_len": 32, "output_len": out}})

    assert (
        chart_title([run("r1", "sglang", 64), run("r2", "sglang", 64)])
        == "decode tok/s per stream, sglang in 32 / out 64 (all runs)"
    )
    mixed = chart_title([run("r1", "sglang", 64), run("r2", "openai", 128)])
    assert "r1: sglang in 32 / out 64" in mixed and "r2: openai in 32 / out 128" in mixed


def test_paired_ratio_interval_cancels_drift_that_the_unpaired_interval_counts_as_noise():
    # an ABAB run on a host that slows down round by round: B is exactly 20% faster in every round
    a = [100.0, 80.0, 60.0, 40.0, 30.0]
    b = [x * 1.2 for x in a]
    ratio, (lo, hi) = stats.paired_ratio_ci(a, b)
    assert ratio == pytest.approx(1.2) and lo == pytest.approx(1.2) and hi == pytest.approx(1.2)
    # each side resampled on its own: the drift swamps the change
    ulo, uhi = stats.bootstrap_ratio_ci(a, b)
    assert ulo < 1 < uhi
    assert verdict(ratio, (lo, hi), True, True) == "faster"


def test_paired_ratio_interval_on_a_case_worked_by_hand():
    # two pairs with ratios 1.0 and 2.0: a resample's median is 1.0 (p 1/4), 1.5 (p 1/2) or 2.0 (p 1/4),
    # so the 2.5th and 97.5th percentiles of the bootstrap distribution are 1.0 and 2.0
    ratio, ci = stats.paired_ratio_ci([10.0, 10.0], [10.0, 20.0])
    assert ratio == 1.5 and ci == (1.0, 2.0)
    # the same draws, enumerated: about a quarter of the 2000 resamples are each end
    rng = random.Random(0)
    meds = [stats.median([[1.0, 2.0][rng.randrange(2)] for _ in range(2)]) for _ in range(2000)]
    assert 0.2 < meds.count(1.0) / 2000 < 0.3 and 0.2 < meds.count(2.0) / 2000 < 0.3
    # one round: a ratio, no interval
    assert stats.paired_ratio_ci([5.0], [6.0]) == (1.2, None)
    assert stats.paired_ratio_ci([], []) is None
    with pytest.raises(ValueError, match="differ in length"):
        stats.paired_ratio_ci([1.0, 2.0], [1.0])
    # seeded: re-analysing the recorded rounds gives the same interval
    xs, ys = [9.0, 10.0, 11.0, 10.5], [10.0, 10.4, 12.1, 11.0]
    assert stats.paired_ratio_ci(xs, ys) == stats.paired_ratio_ci(xs, ys)
