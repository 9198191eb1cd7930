"""PNG charts of recorded runs (matplotlib, Agg: no display needed on a laptop or in CI)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def decode_chart(runs: Sequence[dict], path: str | Path, *, title: str = "decode tok/s per stream") -> Path:
    """One point per run and concurrency: median with its 95% interval, repeats as faint dots.

    runs: [{"label": str, "levels": [{"concurrency", "decode_tok_s": {median, ci95, values}}]}, ...]
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    levels = sorted({lv["concurrency"] for r in runs for lv in r["levels"] if lv.get("decode_tok_s")})
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(runs) + 2), 3.8), dpi=120)
    width = 0.8 / max(1, len(levels))
    for j, c in enumerate(levels):
        xs, ys, lo, hi = [], [], [], []
        for i, run in enumerate(runs):
            fig_c = next((lv["decode_tok_s"] for lv in run["levels"]
                          if lv["concurrency"] == c and lv.get("decode_tok_s")), None)
            if not fig_c:
                continue
            x = i + (j - (len(levels) - 1) / 2) * width
            med = fig_c["median"]
            ci = fig_c.get("ci95") or [med, med]
            xs.append(x)
            ys.append(med)
            lo.append(med - ci[0])
            hi.append(ci[1] - med)
            vals = fig_c.get("values") or []
            ax.scatter([x] * len(vals), vals, s=8, alpha=0.35, color=f"C{j}", zorder=2)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=4, color=f"C{j}", label=f"concurrency {c}", zorder=3)
        for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
            change = f" ({y / ys[0] - 1:+.1%})" if k and ys[0] else ""
            ax.annotate(f"{y:.1f}{change}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xticks(range(len(runs)), [r["label"] for r in runs], fontsize=8)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylim(bottom=0)  # an honest bar: ratios read off the chart are the ratios measured
    ax.set_ylabel("tok/s (median, 95% CI)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if len(levels) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path
