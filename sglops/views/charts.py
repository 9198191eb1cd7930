"""PNG (and SVG) charts of recorded runs (matplotlib, Agg: no display needed on a laptop or in CI)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def save_figure(fig, path: Path, **savefig) -> Path:
    """Write the PNG whole or not at all (a temp file renamed over it), and the same chart as SVG beside it
    (`inv report --html` inlines it: sglops/views/html_report.py), then free the figure."""
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, **savefig)
    svg = path.with_suffix(".svg")
    tmp_svg = svg.with_name(svg.name + ".tmp")
    fig.savefig(
        tmp_svg, format="svg", metadata={"Date": None}, **{k: v for k, v in savefig.items() if k != "dpi"}
    )
    plt.close(fig)
    tmp.replace(path)
    tmp_svg.replace(svg)
    return path


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
            fig_c = next(
                (
                    lv["decode_tok_s"]
                    for lv in run["levels"]
                    if lv["concurrency"] == c and lv.get("decode_tok_s")
                ),
                None,
            )
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
        ax.errorbar(
            xs, ys, yerr=[lo, hi], fmt="o", capsize=4, color=f"C{j}", label=f"concurrency {c}", zorder=3
        )
        for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
            change = f" ({y / ys[0] - 1:+.1%})" if k and ys[0] else ""
            ax.annotate(f"{y:.1f}{change}", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xticks(range(len(runs)), [r["label"] for r in runs], fontsize=8)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    # an honest bar: ratios read off the chart are the ratios measured
    ax.set_ylim(bottom=0)
    ax.set_ylabel("tok/s (median, 95% CI)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if len(levels) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def sweep_chart(runs: Sequence[dict], path: str | Path, *, title: str = "sweep") -> Path:
    """A sweep's curve, one line per run (overlaid for `inv compare`): per-stream decode tok/s against total
    output tok/s (each point labelled with its load, the knee ringed), and TPOT p50 / p99 against the load.

    runs: [{"label": str, "points": [{"load", "kind", "total_tok_s", "per_stream_tok_s", "tpot_p50_ms",
    "tpot_p99_ms"}], "knee": {"load"} or None}, ...] (sglops.bench.load_curve.summary plus a label)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    kind = "concurrency"
    for i, run in enumerate(runs):
        pts = [p for p in run.get("points") or [] if p.get("total_tok_s") and p.get("per_stream_tok_s")]
        if not pts:
            continue
        kind = pts[0]["kind"]
        colour, label = f"C{i}", run["label"]
        left.plot(
            [p["total_tok_s"] for p in pts],
            [p["per_stream_tok_s"] for p in pts],
            "o-",
            color=colour,
            label=label,
        )
        for p in pts:
            left.annotate(
                f"{p['load']:g}",
                (p["total_tok_s"], p["per_stream_tok_s"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color=colour,
            )
        knee = run.get("knee")
        if knee:
            at = next((p for p in pts if p["load"] == knee["load"]), None)
            if at:
                left.scatter(
                    [at["total_tok_s"]],
                    [at["per_stream_tok_s"]],
                    s=160,
                    facecolors="none",
                    edgecolors=colour,
                    linewidths=1.5,
                    zorder=4,
                )
        lat = [p for p in pts if p.get("tpot_p50_ms")]
        right.plot(
            [p["load"] for p in lat],
            [p["tpot_p50_ms"] for p in lat],
            "o-",
            color=colour,
            label=f"{label} p50",
        )
        right.plot(
            [p["load"] for p in lat],
            [p["tpot_p99_ms"] for p in lat],
            "s--",
            color=colour,
            alpha=0.6,
            label=f"{label} p99",
        )
    left.set_xlabel("total output tok/s")
    left.set_ylabel("per-stream decode tok/s (median)")
    left.set_xlim(left=0)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.set_title("throughput vs per-stream speed (knee ringed)", fontsize=9)
    right.set_xlabel("request rate (req/s)" if kind == "rate" else "concurrency (streams)")
    right.set_ylabel("TPOT ms")
    right.set_ylim(bottom=0)
    right.grid(alpha=0.3)
    right.set_title("TPOT p50 / p99 vs load", fontsize=9)
    for ax in (left, right):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def max_rate_chart(data: dict, path: str | Path) -> Path:
    """A max-rate search: goodput share per probed rate (target line, each probe numbered in search order, met
    in green, missed in red, the answer ringed) and TTFT / TPOT p99 per rate against their SLOs.

    data: {"title", "search": sglops.bench.max_rate.Search.to_json(), "levels": [bench.json levels]}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    search, levels = data["search"], {lv.get("request_rate"): lv for lv in data["levels"]}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    for p in search["probes"]:
        share = p["goodput_share"] if p["goodput_share"] is not None else 0.0
        left.scatter([p["rate"]], [share], color="tab:green" if p["met"] else "tab:red", zorder=3)
        left.annotate(
            str(p["order"]), (p["rate"], share), textcoords="offset points", xytext=(4, 4), fontsize=8
        )
    if search.get("answer_req_s"):
        ans = next(p for p in search["probes"] if p["rate"] == search["answer_req_s"])
        left.scatter(
            [ans["rate"]], [ans["goodput_share"]], s=200, facecolors="none", edgecolors="black", zorder=4
        )
    left.axhline(search["target"], color="grey", linestyle="--", label=f"target {search['target']:.0%}")
    left.set_xscale("log")
    left.set_ylim(-0.05, 1.05)
    left.set_xlabel("request rate (req/s, log)")
    left.set_ylabel("share of requests within every SLO")
    left.set_title(search["line"], fontsize=8)
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    rates = sorted(r for r in levels if r)
    for key, style in (("ttft_ms", "o-"), ("tpot_ms", "s-")):
        ys = [(levels[r].get(key) or {}).get("p99") for r in rates]
        pts = [(r, y) for r, y in zip(rates, ys, strict=True) if y is not None]
        if pts:
            (line,) = right.plot(*zip(*pts, strict=True), style, label=f"{key[:4].upper()} p99")
            limit = (search.get("slo_ms") or {}).get(key)
            if limit:
                right.axhline(
                    limit, color=line.get_color(), linestyle="--", alpha=0.6, label=f"SLO {limit:g} ms"
                )
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("request rate (req/s, log)")
    right.set_ylabel("ms (log)")
    right.set_title("latency p99 per probed rate vs the SLO", fontsize=9)
    right.grid(alpha=0.3)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    fig.suptitle(data.get("title") or "max rate under an SLO", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def pareto_chart(data: dict, path: str | Path) -> Path:
    """Every configuration x load level: tokens/s per user (x) against tokens/s per GPU (y), one colour per
    configuration, each point labelled with its load, the frontier drawn through its points and its
    configurations named in the legend (sglops.bench.pareto).

    data: {"title", "pareto": {"points": [{config, load, per_user_tok_s, per_gpu_tok_s, on_frontier,
    gpus_from}], "frontier": [...], "configs": [...]}}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    par = data["pareto"]
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=120)
    configs = list(dict.fromkeys(p["config"] for p in par["points"]))
    for i, config in enumerate(configs):
        mine = [p for p in par["points"] if p["config"] == config]
        on = " (on the frontier)" if config in par["configs"] else ""
        ax.scatter(
            [p["per_user_tok_s"] for p in mine],
            [p["per_gpu_tok_s"] for p in mine],
            color=f"C{i % 10}",
            label=f"{config}{on}"[:70],
            zorder=3,
        )
        for p in mine:
            ax.annotate(
                p["load"],
                (p["per_user_tok_s"], p["per_gpu_tok_s"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color=f"C{i % 10}",
            )
    front = par["frontier"]
    if front:
        ax.step(
            [p["per_user_tok_s"] for p in front],
            [p["per_gpu_tok_s"] for p in front],
            where="post",
            color="black",
            linewidth=1.2,
            alpha=0.7,
            label="Pareto frontier",
            zorder=2,
        )
    per = sorted({p["gpus_from"] for p in par["points"]})
    ax.set_xlabel("tokens/s per user (median request's decode rate)")
    ax.set_ylabel("tokens/s per GPU (output tok/s / GPUs)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{data.get('title') or 'Pareto frontier'}\nGPUs: {'; '.join(per)}", fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def telemetry_chart(data: dict, path: str | Path) -> Path:
    """GPU telemetry over a run: SM clock, utilisation and power per GPU against time, each level's measuring
    window shaded and named; a stand-in's figures say so in the title.

    data: {"title", "standin", "series": {"t0", "gpus": {index: {"t", "sm", "util", "power"}}},
    "windows": [(level name, start unix s, end unix s)]}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    series = data["series"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 6.5), dpi=110, sharex=True)
    for ax, key, label in zip(
        axes, ("sm", "util", "power"), ("SM clock MHz", "utilisation %", "power W"), strict=True
    ):
        for idx, s in sorted(series["gpus"].items(), key=lambda kv: int(kv[0])):
            pts = [(t, y) for t, y in zip(s["t"], s[key], strict=True) if y is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), linewidth=1, label=f"GPU {idx}")
        for k, (name, a, b) in enumerate(data.get("windows") or []):
            ax.axvspan(a - series["t0"], b - series["t0"], color=f"C{k % 10}", alpha=0.08)
            if key == "sm":
                ax.annotate(
                    name, (a - series["t0"], 1.0), xycoords=("data", "axes fraction"), fontsize=7, va="top"
                )
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("seconds from the first sample")
    if len(series["gpus"]) <= 8:
        axes[0].legend(fontsize=6, ncol=4)
    title = data.get("title") or "GPU telemetry"
    if data.get("standin"):
        title += "\nSTAND-IN nvidia-smi: no GPU, these are not a GPU's figures"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)
