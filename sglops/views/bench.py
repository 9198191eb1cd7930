"""Views of bench runs: the figures table with its caption, the live progress board of `inv bench`, the
comparison of recorded runs (`inv compare`) and the list of them (`inv runs`).

BenchResult (sglops.bench.run), Comparison and RunList (sglops.bench.compare) keep data and JSON; tasks and
plays print it through sglops.views.show.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from sglops.bench.record import STANDIN_MARK, STANDIN_NOTE, standin
from sglops.core import artifacts

if TYPE_CHECKING:
    from sglops.bench.compare import Comparison, RunList
    from sglops.bench.run import BenchResult


def bench_table(r: BenchResult) -> Table:
    """`inv bench`: per concurrency level the figures with their
    spread, failures and suspects; the caption says what ran."""
    cfg = r.config
    title = (
        f"bench: {r.host}  {cfg['api']} :{cfg['port']}  in {cfg['input_len']} / out {cfg['output_len']}"
        f"  x{cfg['runs']} repeats"
        + (f"  run {r.run_id}" if r.run_id else "")
        + (f"  [figures {STANDIN_MARK}]" if r.standin else "")
    )
    table = Table(title=title, title_justify="left", caption=_caption(r), caption_justify="left")
    for col in ("C", "metric", "median", "p90", "p99", "95% CI (repeats)", "CV"):
        table.add_column(col, justify="left" if col in ("metric", "95% CI (repeats)") else "right")
    for lv in r.levels:
        dim = "" if lv.status == "ok" else "dim "
        name_c = lv.load if lv.request_rate or lv.trace_speed else str(lv.concurrency)
        open_loop = bool(lv.request_rate or lv.trace_speed)
        figs = [("decode tok/s", lv.decode_tok_s), ("output tok/s", lv.output_tok_s)]
        if open_loop or r.sweep:
            figs.append(("requests/s", lv.request_throughput))
        if lv.goodput:
            figs.append(("goodput req/s", lv.goodput["req_s"]))
        for name, fig in figs:
            if fig and (
                name.startswith("decode")
                or lv.concurrency > 1
                or open_loop
                or r.sweep
                or name.startswith("goodput")
            ):
                ci = f"[{fig['ci95'][0]:.2f}, {fig['ci95'][1]:.2f}]" if fig["ci95"] else "1 repeat"
                cvs = (
                    Text("-")
                    if fig["cv"] is None
                    else Text.assemble(f"{fig['cv']:.1%}", (" noisy", "red") if fig["noisy"] else "")
                )
                table.add_row(name_c, Text(name, style=f"{dim}bold"), f"{fig['median']:.2f}", "", "", ci, cvs)
        for name, summ in (
            ("TPOT ms", lv.tpot_ms),
            ("ITL ms", lv.itl_ms),
            ("TTFT ms", lv.ttft_ms),
            ("e2e ms", lv.e2e_ms),
            ("send lag ms", lv.send_lag_ms),
        ):
            if summ:
                table.add_row(
                    name_c, name, f"{summ['median']:.2f}", f"{summ['p90']:.2f}", f"{summ['p99']:.2f}", "", ""
                )
        for name, value, note in _server_rows(lv):
            table.add_row(name_c, Text(name, style="cyan"), value, "", "", note, "")
        for name, value, note in _gpu_rows(lv.gpu):
            table.add_row(
                name_c,
                Text(name, style="yellow" if (lv.gpu or {}).get("standin") else "cyan"),
                value,
                "",
                "",
                note,
                "",
            )
        for t in lv.turns or []:
            summ = t["ttft_ms"] or {}
            hit = "cache hit " + (f"{t['cache_hit']:.0%}" if t["cache_hit"] is not None else "not reported")
            table.add_row(
                name_c,
                f"turn {t['turn']} TTFT ms",
                *(f"{summ[k]:.2f}" if summ else "-" for k in ("median", "p90", "p99")),
                hit,
                "",
            )
        if lv.status != "ok":
            bad = ", ".join(f"{k} {v}" for k, v in sorted(lv.outcomes.items()) if k != "ok")
            table.add_row(
                str(lv.concurrency),
                Text(lv.status.upper(), style="bold red"),
                f"{lv.ok}/{lv.requests_total} ok",
                "",
                "",
                Text(bad, style="red"),
                "",
            )
        if lv.suspects:
            table.add_row(
                str(lv.concurrency),
                Text("suspect", style="yellow"),
                f"{lv.suspects}/{lv.requests_total}",
                "",
                "",
                Text("kept out of the figures", style="yellow"),
                "",
            )
    return table


def _server_rows(lv: Any) -> list[tuple[str, str, str]]:
    """The server's own figures beside the client's: prefix-cache tokens, /metrics over the level."""
    rows = []
    p = lv.prompt or {}
    if p.get("cached_tokens") is not None:
        rows.append(
            (
                "cached prompt tokens",
                f"{p['cached_tokens']}/{p['tokens']}",
                (
                    f"{p['cached_share']:.1%} from the prefix cache (server usage)"
                    if p.get("cached_share") is not None
                    else "server usage"
                ),
            )
        )
    srv = lv.server or {}
    if srv.get("request_decode_tok_s") is not None:
        rows.append(
            (
                "server decode tok/s",
                f"{srv['request_decode_tok_s']:.2f}",
                "per request, meta_info.decode_throughput (median)",
            )
        )
    if srv.get("decode_tok_s_per_stream") is not None:
        rows.append(
            (
                "server gen tok/s/stream",
                f"{srv['decode_tok_s_per_stream']:.2f}",
                "/metrics gen_throughput / running (median)",
            )
        )
    if srv.get("gen_tok_s") is not None:
        rows.append(("server gen tok/s", f"{srv['gen_tok_s']:.2f}", "/metrics generation_tokens rise / time"))
    for key in ("running", "queued"):
        if srv.get(key):
            rows.append(
                (
                    f"server {key}",
                    f"{srv[key]['median']:g}",
                    f"max {srv[key]['max']:g} ({srv['samples']} samples)",
                )
            )
    if srv.get("token_usage_max") is not None:
        rows.append(("server KV usage", f"{srv['token_usage_max']:.1%}", "max over the level"))
    if srv.get("cache_hit_rate") is not None:
        rows.append(("server cache hit rate", f"{srv['cache_hit_rate']:.1%}", "/metrics, end of the level"))
    return rows


def _max_rate_lines(search: dict | None) -> list[Any]:
    """A max-rate search: its answer, then every probed level in search order, then its chart."""
    if not search:
        return []
    probes = ", ".join(
        f"{p['order']}) {p['rate']:g} req/s "
        + (f"{p['goodput_share']:.0%}" if p["goodput_share"] is not None else "-")
        + (" met" if p["met"] else " missed")
        for p in search["probes"]
    )
    out: list[Any] = [Text(search["line"], style="bold"), f"probed (goodput share): {probes}"]
    if search.get("chart"):
        out.append(f"max-rate chart: {search['chart']}")
    return out


def _caption(r: BenchResult) -> Text:
    """What ran (status, sglang, patches, client CPU, server python) and what a reader should know."""
    sgl = r.sglang or {}
    parts: list[Any] = [Text.assemble("status: ", (r.status, "green" if r.status == "ok" else "bold red"))]
    if r.standin:
        parts.insert(0, Text(STANDIN_NOTE, style="bold yellow"))
    if sgl:
        commit = (sgl.get("commit") or "")[:12]
        parts.append(
            f"sglang {sgl.get('version') or '?'}"
            + (f" @ {commit}" if commit else "")
            + (" (dirty)" if sgl.get("dirty") else "")
        )
    names = [
        Text.assemble(
            f"{p.get('patch')}", "" if p.get("intact", True) else (" (modified since applied)", "red")
        )
        for p in r.patches
    ]
    parts.append(Text("patches: ") + (Text(", ").join(names) if names else Text("none")))
    cpu = [lv.client_cpu_us_per_token for lv in r.levels if lv.client_cpu_us_per_token]
    if cpu:
        parts.append(f"client CPU {max(cpu):.0f} us/token")
    py = (r.server or {}).get("python") or {}
    if py.get("executable"):
        torch = (py.get("torch") or {}).get("version") or "no torch"
        parts.append(f"server python {py.get('version')} ({py['executable']}), torch {torch}")
    lines: list[Any] = [Text("; ").join(Text(p) if isinstance(p, str) else p for p in parts)]
    lines.append(_load_line(r))
    if r.sweep and (r.sweep.get("knee") or {}).get("line"):
        lines.append(Text(r.sweep["knee"]["line"], style="bold"))
    if r.sweep and r.sweep.get("chart"):
        lines.append(f"sweep chart: {r.sweep['chart']}")
    lines += _max_rate_lines(r.max_rate)
    tel = r.telemetry or {}
    if tel.get("sampler") and tel.get("source"):
        cost = tel["sampler"]
        lines.append(
            f"GPU telemetry: {tel['source']} every {tel.get('interval_ms')} ms,"
            f" {len(tel.get('samples') or [])} samples, sampler {cost.get('cpu_s_per_s') or 0:.4f} CPU-s/s"
            + (f"; chart {tel['chart']}" if tel.get("chart") else "")
        )
    if r.server_down:
        lines.append(Text(str(r.server_down.get("line")), style="bold red"))
    if r.server_changed:
        lines.append(
            Text("the server changed during the run: " + "; ".join(r.server_changed[:5]), style="bold red")
        )
    lines += [Text(n, style="yellow") for n in r.notes()]
    if r.outputs:
        got = sum(1 for e in r.outputs if e.get("ids") is not None)
        lines.append(
            f"outputs: token ids of {got}/{len(r.outputs)} requests"
            + (" with logprobs" if r.logprobs_kept else "")
            + " kept (outputs.json)"
        )
    for lv in r.levels:
        if lv.status != "ok":
            lines.append(
                Text(
                    f"{lv.load}: {lv.requests_total - lv.ok} of {lv.requests_total} requests "
                    "failed; figures cover only the successful ones and are not a clean result",
                    style="red",
                )
            )
            lines += [Text(f"  {e}", style="red") for e in lv.errors[:3]]
        if lv.suspects:
            lines.append(
                Text(
                    f"{lv.load}: {lv.suspects} suspect request(s) kept out of the figures: "
                    + "; ".join(lv.suspect_examples),
                    style="yellow",
                )
            )
        if any(b != "per_token" for b in lv.itl_basis):
            lines.append(f"C={lv.concurrency}: the server sent no per-chunk token counts; ITL spread evenly")
    if r.artifact:
        lines.append(f"saved {r.artifact}")
    return Text("\n").join(Text(x) if isinstance(x, str) else x for x in lines)


def _load_line(r: BenchResult) -> str:
    """What was sent: the dataset, closed or open loop, the bound of a level, SLOs, server metrics."""
    cfg = r.config
    if cfg.get("loop") == "open":
        how = f"open loop, {cfg.get('arrival')} arrivals" + (
            f" (burstiness {cfg['burstiness']:g})" if cfg.get("arrival") == "poisson" else ""
        )
    else:
        how = "closed loop"
    bound = f"{cfg['duration_s']:g} s per level" if cfg.get("duration_s") else "requests per level as planned"
    slo = cfg.get("slo_ms")
    slo_s = (
        ("; goodput SLO " + ", ".join(f"{k.removesuffix('_ms')} <= {v:g} ms" for k, v in slo.items()))
        if slo
        else ""
    )
    metrics = cfg.get("server_metrics")
    met = (
        ""
        if metrics is None
        else ("; server /metrics scraped" if metrics == "scraped" else f"; server metrics: {metrics}")
    )
    return f"{cfg.get('input')}; {how}, {bound}{slo_s}{met}"


def _compare_caption(c: Comparison) -> Text:
    """Per run: headline verdict, first output divergence,
    config differences; then the notes and the chart."""
    lines: list[Text] = []
    for run in c.runs[1:]:
        ident, cfg = c.identities.get(run.run_id), c.configs.get(run.run_id)
        good = ident is not None and ident.within_tolerance
        lines.append(
            Text.assemble(
                (f"{run.run_id}: ", "bold"), (c.headline(run.run_id), "green" if good else "bold red")
            )
        )
        if ident and ident.first_divergence:
            lines.append(Text(f"  first divergence: {ident.first_divergence.describe()}", style="red"))
        if cfg is not None and not cfg.differences and not cfg.missing:
            lines.append(Text("  config: same server config", style="green"))
        if cfg is not None:
            for key, a, b, kind in cfg.rows():
                lines.append(
                    Text(
                        f"  config {key}: {a} -> {b} ({kind})",
                        style="yellow" if kind == "intended" else "bold red",
                    )
                )
            if cfg.missing:
                lines.append(Text(f"  {cfg.line()}", style="yellow"))
    lines += [Text(n) for n in c.notes]
    if c.chart:
        lines.append(Text(f"chart: {c.chart}"))
    return Text("\n").join(lines)


def compare_table(c: Comparison) -> Table:
    """`inv compare`: every run against the baseline, metric by metric, ratio, interval and verdict."""
    base = c.runs[0]
    caption = _compare_caption(c)
    mark = f"; figures {STANDIN_MARK}" if base.standin else ""
    table = Table(
        title=f"compare: baseline {base.run_id} ({base.label.splitlines()[1]}{mark})",
        title_justify="left",
        caption=caption if caption.plain else None,
        caption_justify="left",
    )
    for col in ("run", "C", "metric", "baseline", "this run", "ratio", "95% CI", "verdict"):
        table.add_column(col, justify="left" if col in ("run", "metric", "verdict", "95% CI") else "right")
    colour = {"faster": "green", "slower": "red", "within noise": "yellow"}
    for row in c.rows:
        ci = f"[{row.ratio_ci[0]:.3f}, {row.ratio_ci[1]:.3f}]" if row.ratio_ci else "-"
        v = Text(row.verdict, style=colour.get(row.verdict, "dim"))
        table.add_row(
            Text.assemble(row.run, (" (stand-in)", "bold yellow") if row.standin else ""),
            str(row.concurrency),
            row.metric,
            f"{row.base:.2f}",
            f"{row.other:.2f}",
            f"{row.ratio:.3f}" if row.ratio else "-",
            ci,
            v,
        )
    return table


def runs_table(r: RunList) -> Table:
    """`inv runs`: the recorded runs, oldest first, with the bench headline where there is one."""
    marked = any(standin(m) for m in r.runs)
    table = Table(
        title=f"runs under {artifacts.artifacts_root()}",
        title_justify="left",
        caption=Text(f"stand-in: {STANDIN_NOTE}", style="yellow") if marked else None,
        caption_justify="left",
    )
    for col in ("run", "host", "task", "status", "decode tok/s", "95% CI", "setup", "sglang", "patches"):
        table.add_column(col, justify="right" if col == "decode tok/s" else "left")
    for m in r.runs:
        b = m.get("bench") or {}
        head = b.get("decode_tok_s") or {}
        ci = head.get("ci95")
        # a profile records its own status
        status = b.get("status") or m.get("status", "-")
        style = {"ok": "green", "partial": "yellow", "failed": "red"}.get(status, "dim")
        sgl = m.get("sglang") or {}
        setup = (
            f"{b.get('api')} {b.get('input_len')}/{b.get('output_len')} C{head.get('concurrency')}"
            f" x{b.get('runs')}"
            if b
            else ""
        )
        table.add_row(
            m.get("run_id", "?"),
            m.get("host", "?"),
            m.get("task", "?"),
            Text(status, style=style),
            (
                Text.assemble(f"{head['median']:.2f}", (" stand-in", "bold yellow") if standin(m) else "")
                if head.get("median")
                else "-"
            ),
            f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "-",
            setup,
            ((sgl.get("version") or "") + " " + (sgl.get("commit") or "")[:10]).strip() or "-",
            ", ".join(p.get("patch", "?") for p in m.get("patches") or []) or "-",
        )
    return table


def progress_note(event: dict) -> str:
    """Where a long run is (level x repeat) and the time left, from the host's progress event."""
    if not event.get("steps"):
        return ""
    rate = event.get("request_rate")
    where = f"{rate:g} req/s" if rate else f"C={event.get('concurrency')}"
    out = (
        f" {where}, repeat {event.get('repeat')}/{event.get('runs')} (step"
        f" {event.get('step')}/{event['steps']})"
    )
    eta = event.get("eta_s")
    if eta is not None:
        out += f", ~{int(eta) // 60}:{int(eta) % 60:02d} left"
    return out


class BenchBoard:
    """One rich progress display shared by the hosts benched in parallel (rich allows one live display)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress = None
        self.users = 0

    def open(self, host: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from sglops.core.console import err_console

        with self.lock:
            if self.progress is None:
                self.progress = Progress(
                    TextColumn("{task.description}", markup=False),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("{task.fields[note]}", markup=False),
                    TimeElapsedColumn(),
                    console=err_console,
                    transient=True,
                )
                self.progress.start()
            self.users += 1
            return self.progress.add_task(f"bench {host}", total=None, note="connecting")

    def update(self, task: int, event: dict) -> None:
        with self.lock:
            if self.progress is None:
                return
            phase = event.get("phase", "")
            failed = event.get("failed") or 0
            note = phase + progress_note(event) + (f", {failed} failed" if failed else "")
            if phase == "measuring":
                self.progress.update(
                    task, total=event.get("total"), completed=event.get("done", 0), note=note
                )
            else:
                self.progress.update(task, note=note)

    def close(self, task: int) -> None:
        with self.lock:
            if self.progress is None:
                return
            self.progress.remove_task(task)
            self.users -= 1
            if self.users == 0:
                self.progress.stop()
                self.progress = None


# the terminal's one board (tasks.py hands it to sglops.bench.run.step)
board = BenchBoard()


def markdown_loads(doc: dict) -> list[str]:
    """`inv report`'s lines for what a bench.json holds beyond the closed-loop figures: the load sent, per
    level requests/s, goodput, prefix-cache tokens and the server's own figures, and a sweep's knee and
    chart."""
    cfg = doc.get("config") or {}
    levels = doc.get("levels") or []
    extra = [
        lv
        for lv in levels
        if lv.get("request_rate")
        or lv.get("goodput")
        or lv.get("server")
        or lv.get("turns")
        or lv.get("gpu")
        or (lv.get("prompt") or {}).get("cached_tokens") is not None
    ]
    data = cfg.get("dataset") or {}
    plain = data.get("kind", "random") == "random" and not data.get("input") and not data.get("output")
    if not extra and not doc.get("sweep") and cfg.get("loop", "closed") == "closed" and plain:
        return []

    def fig(v: Any, key: str = "median", fmt: str = "{:.2f}") -> str:
        x = (v or {}).get(key) if isinstance(v, dict) else v
        return fmt.format(x) if isinstance(x, int | float) else "-"

    out = [
        "",
        f"Load: {cfg.get('input')}; {cfg.get('loop', 'closed')} loop"
        + (f", {cfg.get('arrival')} arrivals" if cfg.get("arrival") else "")
        + (f", {cfg['duration_s']:g} s per level" if cfg.get("duration_s") else "")
        + (f"; SLO (ms) {cfg['slo_ms']}" if cfg.get("slo_ms") else "")
        + f"; server metrics: {cfg.get('server_metrics') or '-'}",
        "",
        (
            "| level | output tok/s | requests/s | goodput req/s | cached prompt tokens | server gen tok/s | "
            "server decode tok/s | running (max) | queued (max) |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lv in levels:
        srv, p = lv.get("server") or {}, lv.get("prompt") or {}
        name = (
            f"trace x{lv['trace_speed']:g}"
            if lv.get("trace_speed")
            else f"{lv['request_rate']:g} req/s"
            if lv.get("request_rate")
            else f"C={lv.get('concurrency')}"
        )
        cached = f"{p['cached_tokens']}/{p['tokens']}" if p.get("cached_tokens") is not None else "-"
        out.append(
            f"| {name} | {fig(lv.get('output_tok_s'))} | {fig(lv.get('request_throughput'))} | "
            f"{fig((lv.get('goodput') or {}).get('req_s'))} | {cached} | {fig(srv.get('gen_tok_s'))} | "
            f"{fig(srv.get('request_decode_tok_s'))} | {fig(srv.get('running'), 'max', '{:g}')} | "
            f"{fig(srv.get('queued'), 'max', '{:g}')} |"
        )
    out += _markdown_turns(levels)
    gpu = [(lv, gpu_line(lv.get("gpu"))) for lv in levels if lv.get("gpu")]
    if gpu:
        out += ["", "GPU telemetry per level (host sampler):", ""] + [
            f"- {_level_name(lv)}: {line}" for lv, line in gpu
        ]
    chart = (doc.get("telemetry") or {}).get("chart")
    if chart:
        out += ["", f"![GPU telemetry]({chart})"]
    search = doc.get("max_rate") or {}
    if search:
        out += [
            "",
            f"Max rate: {search['line']}",
            "",
            "| probe | req/s | phase | goodput share | met | run |",
            "| ---: | ---: | --- | ---: | --- | --- |",
        ]
        out += [
            f"| {p['order']} | {p['rate']:g} | {p['phase']} | "
            + (f"{p['goodput_share']:.1%}" if p["goodput_share"] is not None else "-")
            + f" | {'yes' if p['met'] else 'no'} | {p.get('run_id') or '-'} |"
            for p in search["probes"]
        ]
        if search.get("chart"):
            out += ["", f"![max rate]({search['chart']})"]
    sweep = doc.get("sweep") or {}
    if (sweep.get("knee") or {}).get("line"):
        out += ["", f"Sweep: {sweep['knee']['line']}"]
    if sweep.get("chart"):
        out += ["", f"![sweep]({sweep['chart']})"]
    return out


def _level_name(lv: dict) -> str:
    """A level as the telemetry list names it: a trace, its request rate or its concurrency."""
    return lv.get("trace_speed") and "trace" or lv.get("request_rate") or "C=" + str(lv.get("concurrency"))


def _markdown_turns(levels: list[dict]) -> list[str]:
    """Multi-turn sessions: per level and turn, TTFT, TPOT and the
    share of the prompt the server's prefix cache served."""
    rows = [(lv, t) for lv in levels for t in lv.get("turns") or []]
    if not rows:
        return []
    out = [
        "",
        "| level | turn | requests | TTFT median ms | TTFT p99 ms | TPOT median ms | prompt tokens "
        "| cache hit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lv, t in rows:
        ttft = t.get("ttft_ms") or {}
        tpot = (t.get("tpot_ms") or {}).get("median")
        hit = f"{t['cache_hit']:.1%}" if t.get("cache_hit") is not None else "not reported"
        out.append(
            f"| C={lv.get('concurrency')} | {t['turn']} | {t['requests']} | {ttft.get('median', 0):.2f} | "
            f"{ttft.get('p99', 0):.2f} | {'-' if tpot is None else f'{tpot:.3f}'} | "
            f"{t.get('prompt_tokens') or '-'} | {hit} |"
        )
    return out


def pareto_markdown(par: dict | None) -> list[str]:
    """A Pareto frontier (sglops.bench.pareto) as markdown:
    every point, on the frontier or not, and its chart."""
    if not par or not par.get("points"):
        return []
    out = [
        "",
        "## Pareto frontier",
        "",
        par["line"],
        "",
        "| configuration | load | tokens/s per user | tokens/s per GPU | GPUs (from) | frontier |",
        "| --- | --- | ---: | ---: | --- | --- |",
    ]
    for p in sorted(par["points"], key=lambda p: (not p["on_frontier"], p["per_user_tok_s"])):
        config = p["config"].replace("|", "/") + (" (STAND-IN)" if p.get("standin") else "")
        out.append(
            f"| {config} | {p['load']} | {p['per_user_tok_s']:.2f} | {p['per_gpu_tok_s']:.2f} | {p['gpus']}"
            f" ({p['gpus_from']}) | {'yes' if p['on_frontier'] else ''} |"
        )
    if par.get("chart"):
        out += ["", f"![Pareto frontier]({par['chart']})"]
    return out


GPU_ROWS = (
    ("GPU SM clock MHz", "sm_clock_mhz"),
    ("GPU mem clock MHz", "mem_clock_mhz"),
    ("GPU util %", "util_pct"),
    ("GPU power W", "power_w"),
    ("GPU memory MiB", "memory_used_mib"),
)


def _gpu_rows(gpu: dict | None) -> list[tuple[str, str, str]]:
    """A level's GPU telemetry as table rows (median over its GPUs' samples; the range beside), or one row
    saying why there is none; a stand-in's rows say so."""
    if not gpu:
        return []
    if gpu.get("absent") or not gpu.get("samples"):
        said = gpu.get("absent") or "no sample inside the level" + (
            "; STAND-IN nvidia-smi" if gpu.get("standin") else ""
        )
        return [("GPU", "-", said[:60])]
    tag = "STAND-IN: no GPU" if gpu.get("standin") else f"{gpu['gpus']} GPU(s)"
    return [
        (name, f"{f['median']:g}", f"{f['min']:g}-{f['max']:g}; {tag}")
        for name, key in GPU_ROWS
        if (f := gpu.get(key))
    ]


def gpu_line(gpu: dict | None) -> str | None:
    """One phrase for a level's table row."""
    if not gpu:
        return None
    if gpu.get("absent"):
        return f"GPU: {gpu['absent']}"
    tag = " (STAND-IN nvidia-smi: no GPU)" if gpu.get("standin") else ""
    if not gpu.get("samples"):
        return f"GPU: no sample inside the level{tag}"

    def med(key: str, unit: str) -> str:
        f = gpu.get(key)
        return f"{f['median']:g}{unit}" if f else "n/a"

    return (
        f"GPU x{gpu['gpus']}: SM {med('sm_clock_mhz', ' MHz')}, mem {med('mem_clock_mhz', ' MHz')}, util "
        f"{med('util_pct', '%')}, power {med('power_w', ' W')}, used {med('memory_used_mib', ' MiB')}{tag}"
    )
