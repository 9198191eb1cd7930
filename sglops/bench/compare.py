"""`inv compare RUN_A RUN_B [...]` and `inv runs`: recorded bench runs side by side, with a verdict.

The first run is the baseline. Each figure's ratio gets a bootstrap interval (each run's samples
resampled on its own); the verdict is "faster"/"slower" only when that whole interval clears 1
and the change is at least MIN_EFFECT (the client's own measured accuracy), else "within noise".
Next to the speed verdict: whether the outputs stayed the same (sglops.bench.identity) and every difference
in what served (sglops.bench.runconfig), so "faster" never hides "wrong" or "measured something else".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sglops.bench import stats
from sglops.bench.identity import OutputsVerdict, Tolerance, compare_outputs
from sglops.bench.record import STANDIN_NOTE, Run, load_run, standin
from sglops.bench.runconfig import ConfigDiff, config_diff
from sglops.core import artifacts
from sglops.core.errors import ConfigError, OutputsDiffer
from sglops.core.op import Curves, Draw, Frontier, handed_down
from sglops.core.result import Observation

MIN_EFFECT = 0.01
# fewer repeats than this: intervals come from the per-request values instead
MIN_REPEATS = 3
# a percentile bootstrap on fewer values is too narrow to call a difference
MIN_SAMPLES = 5

# (label, key in the level, higher is better)
METRICS = [
    ("decode tok/s", "decode_tok_s", True),
    ("output tok/s", "output_tok_s", True),
    ("TPOT ms", "tpot_ms", False),
    ("TTFT ms", "ttft_ms", False),
    ("e2e ms", "e2e_ms", False),
]


def _samples(level: dict, key: str, repeats_ok: bool) -> list[float]:
    """Repeat figures for the rates when there are enough
    repeats; otherwise (and for latencies) per request."""
    fig = level.get(key)
    if key == "output_tok_s":
        return list(fig["values"]) if fig else []
    if key == "decode_tok_s" and fig and repeats_ok:
        return list(fig["values"])
    return list(level["per_request"].get(key, []))


def verdict(
    ratio: float | None, ci: tuple[float, float] | None, higher_is_better: bool, comparable: bool
) -> str:
    """faster / slower / within noise (or why there is no verdict)."""
    if not comparable:
        return "not comparable"
    if ratio is None or ci is None:
        return "too few samples"
    up = ci[0] > 1 and ratio >= 1 + MIN_EFFECT
    down = ci[1] < 1 and ratio <= 1 - MIN_EFFECT
    if up:
        return "faster" if higher_is_better else "slower"
    if down:
        return "slower" if higher_is_better else "faster"
    return "within noise"


@dataclass
class Row:
    """One figure of one run against the baseline at one concurrency."""

    run: str
    concurrency: int
    metric: str
    base: float
    other: float
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    verdict: str
    samples: str
    # a figure of this row (the run's or the baseline's) was set by the stand-in server
    standin: bool = False

    def to_json(self) -> dict:
        return {
            "run": self.run,
            "concurrency": self.concurrency,
            "metric": self.metric,
            "base": self.base,
            "other": self.other,
            "ratio": self.ratio,
            "ratio_ci95": list(self.ratio_ci) if self.ratio_ci else None,
            "verdict": self.verdict,
            "samples": self.samples,
            "standin": self.standin,
        }


@dataclass
class Comparison(Observation):
    """Every run against the first, figure by figure, with output identity and config differences per run.

    `identity` / `config` are those of the first run against the baseline (the usual A/B case);
    `identities` / `configs` hold every run's, by run id.
    """

    runs: list[Run]
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    chart: str | None = None
    saved: str | None = None
    identities: dict[str, OutputsVerdict | None] = field(default_factory=dict)
    configs: dict[str, ConfigDiff] = field(default_factory=dict)
    tolerance: Tolerance | None = None
    # every run x level: tokens/s per user vs per GPU, the frontier (sglops.bench.pareto)
    pareto: dict | None = None

    @property
    def identity(self) -> OutputsVerdict | None:
        return self.identities.get(self.runs[1].run_id) if len(self.runs) > 1 else None

    @property
    def config(self) -> ConfigDiff | None:
        return self.configs.get(self.runs[1].run_id) if len(self.runs) > 1 else None

    def speed(self, run_id: str | None = None) -> Row | None:
        """The decode tok/s row at the lowest concurrency: the figure the headline speaks for."""
        run_id = run_id or (self.runs[1].run_id if len(self.runs) > 1 else None)
        rows = [r for r in self.rows if r.run == run_id and r.metric == "decode tok/s"]
        return min(rows, key=lambda r: r.concurrency) if rows else None

    def headline(self, run_id: str | None = None) -> str:
        """'faster (x1.290 [1.270, 1.310]), outputs identical'
        or 'faster, OUTPUTS DIFFER at token 17 of prompt 3'."""
        run_id = run_id or (self.runs[1].run_id if len(self.runs) > 1 else "")
        row = self.speed(run_id)
        if row is None:
            speed = "no decode figure"
        elif row.ratio is not None and row.verdict in ("faster", "slower", "within noise"):
            ci = f" [{row.ratio_ci[0]:.3f}, {row.ratio_ci[1]:.3f}]" if row.ratio_ci else ""
            speed = f"{row.verdict} (x{row.ratio:.3f}{ci})"
        else:
            speed = row.verdict
        ident = self.identities.get(run_id)
        parts = [speed, ident.line() if ident else "outputs not recorded"]
        cfg = self.configs.get(run_id)
        if cfg is not None and (cfg.unintended or cfg.missing):
            parts.append(cfg.line())
        return ", ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:])

    def failures(self, require_identical: bool = False, require_same_config: bool = False) -> list[str]:
        """What --require-identical / --require-same-config refuse, one line per run."""
        out = []
        for run in self.runs[1:]:
            ident = self.identities.get(run.run_id)
            if require_identical and (ident is None or not ident.within_tolerance):
                why = ident.line() if ident else "outputs not recorded (a run from before outputs were kept?)"
                out.append(f"{run.run_id}: {why}")
            cfg = self.configs.get(run.run_id)
            if require_same_config and cfg is not None and (cfg.unintended or cfg.missing):
                out.append(f"{run.run_id}: {cfg.line()}")
        return out

    def check(self, require_identical: bool = False, require_same_config: bool = False) -> None:
        """Raise OutputsDiffer (exit 8) when a required identity or config sameness does not hold."""
        bad = self.failures(require_identical, require_same_config)
        if bad:
            raise OutputsDiffer("; ".join(bad))

    def payload(self) -> dict:
        return {
            "kind": "sglops-compare",
            "baseline": self.runs[0].run_id,
            "runs": [
                {
                    "run_id": r.run_id,
                    "host": r.host,
                    "path": str(r.path),
                    "status": r.doc.get("status"),
                    "patches": [p.get("patch") for p in r.doc.get("patches") or []],
                    "standin": r.standin,
                    "sglang_commit": (r.doc.get("sglang") or {}).get("commit"),
                }
                for r in self.runs
            ],
            "rows": [row.to_json() for row in self.rows],
            "notes": self.notes,
            "chart": self.chart,
            "headline": {r.run_id: self.headline(r.run_id) for r in self.runs[1:]},
            "identity": {k: v.to_json() if v else None for k, v in self.identities.items()},
            "config": {k: v.to_json() for k, v in self.configs.items()},
            "tolerance": self.tolerance.to_json() if self.tolerance else None,
            "pareto": self.pareto,
        }


def _differences(base: Run, other: Run) -> list[str]:
    notes = []
    for key in ("api", "input_len", "output_len"):
        a, b = base.doc["config"].get(key), other.doc["config"].get(key)
        if a != b:
            notes.append(f"{other.run_id}: {key} {b} vs baseline {a}: the runs measured different work")
    if base.host != other.host:
        notes.append(f"{other.run_id}: host {other.host} vs baseline {base.host}")
    if not other.ok:
        notes.append(f"{other.run_id} is {other.doc.get('status')}: not a clean figure, no verdict")
    for run in (base, other):
        suspect = sum(sum((lv.get("suspect") or {}).values()) for lv in run.doc["levels"])
        if suspect:
            notes.append(
                f"{run.run_id}: {suspect} suspect request(s) kept out of its figures (see its bench.json)"
            )
    cached = {r.run_id: _cached_share(r) for r in (base, other)}
    if (
        cached[base.run_id] is not None
        and cached[other.run_id] is not None
        and (cached[base.run_id] > 0) != (cached[other.run_id] > 0)
    ):
        notes.append(
            f"{other.run_id}: {cached[other.run_id]:.0%} of its prompts were served from the prefix cache "
            f"vs {cached[base.run_id]:.0%} in the baseline (a repeated run on a server that was not "
            "restarted): TTFT and e2e are not comparable"
        )
    versions = {r.run_id: (r.doc.get("sglang") or {}).get("version") for r in (base, other)}
    if len({v for v in versions.values() if v}) > 1:
        notes.append(
            f"{other.run_id}: the server ran sglang {versions[other.run_id]} vs baseline "
            f"{versions[base.run_id]}"
        )
    return notes


def _cached_share(run: Run) -> float | None:
    """Share of measured ok requests whose prompt the server partly served from its prefix cache."""
    recs = [
        rec
        for rep in run.doc.get("raw") or []
        for rec in rep.get("requests") or []
        if rec.get("outcome") == "ok"
    ]
    known = [rec for rec in recs if rec.get("cached_tokens") is not None]
    return sum(1 for rec in known if rec["cached_tokens"] > 0) / len(known) if known else None


def _settings(run: Run) -> str:
    cfg = run.doc.get("config") or {}
    return f"{cfg.get('api')} in {cfg.get('input_len')} / out {cfg.get('output_len')}"


def chart_title(runs: list[Run]) -> str:
    """The chart's title names every run's settings: one
    phrase when they agree, each run's when they differ."""
    settings = [_settings(r) for r in runs]
    if len(set(settings)) == 1:
        return f"decode tok/s per stream, {settings[0]} (all runs)"
    return "decode tok/s per stream, " + "; ".join(
        f"{r.run_id}: {s}" for r, s in zip(runs, settings, strict=True)
    )


def compare(
    run_dirs: list[str | Path],
    *,
    chart: bool = True,
    out_dir: str | Path | None = None,
    tolerance: Tolerance | None = None,
    variable: Iterable[str] | str | None = (),
    draw: Draw | None = None,
    run_id: str | None = None,
    labels: dict[str, str] | None = None,
) -> Comparison:
    """Compare recorded bench runs (ids, id prefixes or folders); the first is the baseline.

    `labels` names each run's configuration on the Pareto frontier (a sweep's candidates); by default the
    server settings that differ between the runs.

    Besides speed: output identity of each run against the baseline (within `tolerance` when given) and
    every server-config difference, intended when it is the patch set or a key named in `variable`.
    """
    if len(run_dirs) < 2:
        raise ConfigError("compare needs at least two runs (see `inv runs`)")
    runs = [load_run(r) for r in run_dirs]
    base = runs[0]
    notes = (
        []
        if base.ok
        else [f"baseline {base.run_id} is {base.doc.get('status')}: not a clean figure, no verdict"]
    )
    notes += [f"{r.run_id}: {STANDIN_NOTE}" for r in runs if r.standin]
    rows: list[Row] = []
    for other in runs[1:]:
        notes += _differences(base, other)
        comparable = base.ok and other.ok
        for lv_b in base.doc["levels"]:
            c = lv_b["concurrency"]
            lv_o = other.level(c, lv_b.get("request_rate"))
            if lv_o is None:
                notes.append(
                    f"{other.run_id}: no "
                    + (
                        f"request rate {lv_b['request_rate']:g}"
                        if lv_b.get("request_rate")
                        else f"concurrency {c}"
                    )
                )
                continue
            many = all(
                len((lv.get("decode_tok_s") or {}).get("values") or []) >= MIN_REPEATS for lv in (lv_b, lv_o)
            )
            for label, key, higher in METRICS:
                if key == "output_tok_s" and c == 1:
                    continue
                sb, so = _samples(lv_b, key, many), _samples(lv_o, key, many)
                if not sb or not so:
                    continue
                mb, mo = stats.median(sb), stats.median(so)
                ratio = mo / mb if mb else None
                ci = (
                    stats.bootstrap_ratio_ci(sb, so)
                    if min(len(sb), len(so)) >= MIN_SAMPLES or (many and key.endswith("tok_s"))
                    else None
                )
                kind = "repeats" if many and key.endswith("tok_s") else "requests"
                rows.append(
                    Row(
                        other.run_id,
                        c,
                        label,
                        mb,
                        mo,
                        ratio,
                        ci,
                        verdict(ratio, ci, higher, comparable),
                        f"{kind} {len(sb)} vs {len(so)}",
                        base.standin or other.standin,
                    )
                )
    result = Comparison(runs, rows, list(dict.fromkeys(notes)), tolerance=tolerance)
    for other in runs[1:]:
        result.identities[other.run_id] = compare_outputs(base, other, tolerance)
        result.configs[other.run_id] = config_diff(base, other, variable)
    out = Path(out_dir) if out_dir else artifacts.artifacts_root() / "compare" / f"cmp-{handed_down(run_id)}"
    if chart and draw is not None:
        result.chart = str(
            draw(
                Curves([{"label": r.label, "levels": r.doc["levels"]} for r in runs], chart_title(runs)),
                out / "decode_tok_s.png",
            )
        )
    _pareto(result, labels, draw if chart else None, out)
    sweeps = [r for r in runs if r.sweep]
    # two sweeps: their curves overlaid
    if chart and draw is not None and len(sweeps) >= 2:
        overlay = str(
            draw(
                Curves(
                    [{"label": r.run_id, **r.sweep} for r in sweeps],
                    "sweeps overlaid: " + chart_title(sweeps),
                    sweep=True,
                ),
                out / "sweep.png",
            )
        )
        result.notes.append(f"sweep chart: {overlay}")
        for r in sweeps:
            if (r.sweep.get("knee") or {}).get("line"):
                result.notes.append(f"{r.run_id}: {r.sweep['knee']['line']}")
    result.saved = str(artifacts.write_json(out / "comparison.json", result.to_json()))
    return result


def _pareto(result: Comparison, labels: dict[str, str] | None, draw: Draw | None, out: Path) -> None:
    """Every run x level on tokens/s per user vs per GPU,
    the frontier marked, its chart (pareto.png) and line."""
    from sglops.bench import pareto

    names = {**pareto.labels({r.run_id: r.doc for r in result.runs}), **(labels or {})}
    result.pareto = pareto.frontier(
        p for r in result.runs for p in pareto.points(names[r.run_id], r.run_id, r.doc)
    )
    if not result.pareto["points"]:
        return
    if draw is not None:
        result.pareto["chart"] = str(
            draw(Frontier({"pareto": result.pareto, "title": chart_title(result.runs)}), out / "pareto.png")
        )
    result.notes.append(
        result.pareto["line"] + (f"; chart {result.pareto['chart']}" if result.pareto.get("chart") else "")
    )


def compare_with(
    run_dirs: list[str | Path],
    options: dict,
    *,
    chart: bool = True,
    out_dir: str | Path | None = None,
    draw: Draw | None = None,
    run_id: str | None = None,
) -> Comparison:
    """compare() with the checked options of values.COMPARE (the task's flags, the play step's keys)."""
    tol = Tolerance.from_options(options.get("tolerance_logprob"), options.get("min_identical_share"))
    return compare(
        run_dirs,
        chart=chart,
        out_dir=out_dir,
        tolerance=tol,
        variable=options.get("variable") or (),
        draw=draw,
        run_id=run_id,
    )


# -- inv runs ------------------------------------------------------------------------------------------
@dataclass
class RunList(Observation):
    """Recorded runs, oldest first, with the bench headline where there is one (read-only: an observation)."""

    runs: list[dict]

    def payload(self) -> dict:
        return {"runs": self.runs}


def list_runs(host: str | None = None, task: str | None = None) -> RunList:
    runs = [
        {**r, "standin": standin(r)} for r in artifacts.list_runs(host) if not task or r.get("task") == task
    ]
    return RunList(runs)
