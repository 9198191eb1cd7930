"""Views of what is on a host: the facts table, and a probe-backends
report: backend table, server arguments and FlashInfer, other probes, hits.

ProbeReport (sglops.probe.report) keeps the facts, the verdicts and JSON; the task prints it through
sglops.views.show (`show(report, show_hits=True)` adds every hit). By default the backend table is compact
(one short row per backend, readable at 80 columns); `wide=True` gives each backend a block with every
file:line (sglops.views.probe_wide). A file:line reference is always one word of a wrapped line, never a table
cell's fold, so it is never split.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sglops.probe.report import CAST_FLAG, fp8_read_mode
from sglops.views.alike import Alike
from sglops.views.probe_wide import backend_blocks, hit_lines

if TYPE_CHECKING:
    from sglops.probe.facts import Facts
    from sglops.probe.report import ProbeReport


def probe_view(rep: ProbeReport, show_hits: bool = False, wide: bool = False) -> Group:
    """`inv probe-backends`: the backend table, server arguments
    and FlashInfer, other probes, flags; hits on demand.

    wide (and show_hits, which lists everything): every backend's file:line evidence, a block each, instead of
    the compact table."""
    return Group(probe_title([rep]), *(_drawn(p) for p in _parts(rep, show_hits, wide)))


def probe_alike(rep: ProbeReport, show_hits: bool = False, wide: bool = False) -> Alike:
    """The report split for a fan-out: hosts whose title facts and drawn parts are equal print one body.

    The key is what the body is drawn from (each table's rows, each line's text and styles), so two hosts
    share a body only when theirs would be the same text."""
    parts = _parts(rep, show_hits, wide)
    f = rep.facts
    key = (
        f["sglang_version"],
        f.get("sglang_commit"),
        f["sglang_kind"],
        rep.engine,
        tuple(_part_key(p) for p in parts),
    )
    return Alike(key, probe_title, lambda: Group(*(_drawn(p) for p in parts)))


def probe_title(reps: list[ProbeReport]) -> Text:
    """The heading of the reports of one answer: their hosts, the release, the engine, the seconds taken."""
    rep = reps[0]
    f = rep.facts
    ver = f"sglang {f['sglang_version'] or '?'}"
    if f.get("sglang_commit"):
        ver += f" @ {f['sglang_commit'][:12]}"
    low, high = min(r.seconds for r in reps), max(r.seconds for r in reps)
    took = f"{low:.2f} s" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f} s"
    hosts = ", ".join(r.host for r in reps)
    return Text(f"probe-backends: {hosts} ({ver}, {f['sglang_kind']}; {rep.engine}, {took})", style="bold")


@dataclass(frozen=True)
class _Rows:
    """A table's rows; `table` makes the empty table they are drawn into."""

    table: Callable[[], Table]
    rows: tuple[tuple[str | Text, ...], ...]


def _parts(rep: ProbeReport, show_hits: bool, wide: bool) -> list[Text | _Rows]:
    """What the report's body draws, in order: lines of text and tables' rows."""
    parts: list[Text | _Rows | None] = []
    if any(b.hits for b in rep.backends):
        parts += backend_blocks(rep) if wide or show_hits else [_backend_rows(rep), _LEGEND]
    parts += [_summary_rows(rep), _global_rows(rep)]
    for flag in rep.flags:
        parts.append(Text(f"FLAG: {flag}", style="bold yellow"))
    for u in rep.unreadable:
        parts.append(Text(f"unreadable: {u['file']}: {u['error']}", style="red"))
    if rep.fallbacks:
        parts.append(
            Text(
                f"ripgrep could not take the regex of {', '.join(rep.fallbacks)}; "
                "the stdlib scanner ran those",
                style="dim",
            )
        )
    if rep.launch is not None:
        from sglops.probe.launch_text import launch_lines

        for i, line in enumerate(launch_lines(rep.launch)):
            style = (
                "bold"
                if i == 0
                else "bold red"
                if "REFUSED" in line
                else "yellow"
                if "undetermined" in line
                else ""
            )
            parts.append(Text(line, style=style))
    if show_hits:
        parts += hit_lines(rep)
    return [p for p in parts if p is not None]


def _drawn(part: Text | _Rows) -> Text | Table:
    if isinstance(part, Text):
        return part
    t = part.table()
    for row in part.rows:
        t.add_row(*row)
    return t


def _part_key(part: Text | _Rows) -> Hashable:
    if isinstance(part, Text):
        return _text_key(part)
    return part.table.__name__, tuple(tuple(_text_key(c) for c in row) for row in part.rows)


def _text_key(text: str | Text) -> Hashable:
    if isinstance(text, str):
        return text
    return text.plain, str(text.style), tuple((s.start, s.end, str(s.style)) for s in text.spans)


_LEGEND = Text(
    "FP8: takes FP8 KV natively; cast: casts the whole KV pool; arch: an architecture guard; "
    "DSA: NSA/DSA code. --wide: the file:line of each; --show-hits: every hit",
    style="dim",
)


def _backend_table() -> Table:
    t = Table(
        title="attention backends (srt/layers/attention/*_backend.py)",
        title_justify="left",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    t.add_column("backend", no_wrap=True)
    for col in ("FP8", "cast", "arch", "DSA"):
        t.add_column(col, no_wrap=True)
    t.add_column("verdict")
    return t


def _backend_rows(rep: ProbeReport) -> _Rows:
    """Per attention backend, one short row: FP8-native,
    whole-pool cast, arch guard, NSA/DSA, a short verdict."""
    f = rep.facts
    rows: list[tuple[str | Text, ...]] = []
    for b in rep.backends:
        if not b.exists or b.unreadable:
            mark = "-" if not b.exists else "?"
            rows.append(
                (
                    b.name,
                    mark,
                    mark,
                    mark,
                    mark,
                    Text("absent" if not b.exists else "unreadable", style="dim" if not b.exists else "red"),
                )
            )
            continue
        casts = b.has("casts_whole_pool")
        style = "bold red" if casts and not b.has("fp8_native") else ""
        rows.append(
            (
                b.name,
                _yes(b, "fp8_native"),
                Text(_yes(b, "casts_whole_pool"), style=style),
                _yes(b, "arch_guard", "arch_guard_args"),
                _yes(b, "nsa_dsa"),
                Text(short_verdict(b, f), style=style),
            )
        )
    return _Rows(_backend_table, tuple(rows))


def _yes(b: Any, *facts: str) -> str:
    """yes / no, or `?` when none of facts was probed."""
    if not any(fact in b.hits for fact in facts):
        return "?"
    return "yes" if any(b.has(fact) for fact in facts) else "no"


def short_verdict(b: Any, facts: dict[str, Any]) -> str:
    """The verdict of BackendRow.verdict in a few words (the long one, with its evidence, is --wide's)."""
    casts, native = b.has("casts_whole_pool"), b.has("fp8_native")
    mode, _evidence = fp8_read_mode(b)
    text = (
        "FP8 plan, still casts pool"
        if native and casts
        else "casts whole pool"
        if casts
        else {
            "q_quantised": "FP8 KV, q quantised",
            "dequant_in_smem": "FP8 KV, tiles converted",
            "rows_cast": "casts read rows only",
        }.get(mode)
        or (
            "FP8 KV natively"
            if native
            else "FP8 paths, mode unknown"
            if b.has("fp8_paths")
            else "no FP8 KV handling"
        )
    )
    if b.name == "flashinfer_mla" and facts.get(CAST_FLAG):
        text += f"; FlashInfer {facts.get('flashinfer_version')} takes FP8"
    return text


def _global_table() -> Table:
    t = Table(title="other probes", title_justify="left", box=None, pad_edge=False, header_style="bold")
    for col in ("probe", "hits", "meaning"):
        t.add_column(col, overflow="fold")
    return t


def _global_rows(rep: ProbeReport) -> _Rows | None:
    """The probes that grep the whole tree rather than one backend."""
    rows: list[tuple[str | Text, ...]] = []
    for r in rep.results:
        if r["id"] not in rep.global_greps:
            continue
        hit, miss = rep.meanings.get(r["id"], ("found", "not found"))
        if r.get("missing_root"):
            rows.append((r["id"], "-", f"{r['root']} not found on the host"))
        elif not r.get("files"):
            rows.append((r["id"], "-", f"no file matched the probe's globs under {r['root']}"))
        else:
            n, files = len(r["hits"]), len({h["file"] for h in r["hits"]})
            rows.append(
                (
                    r["id"],
                    f"{n} in {files} of {r['files']} files" if n else f"0 in {r['files']} files",
                    hit if n else miss,
                )
            )
    return _Rows(_global_table, tuple(rows)) if rows else None


def _summary_table() -> Table:
    s = Table(
        show_header=False,
        title="server arguments and FlashInfer",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    s.add_column(style="bold")
    s.add_column(overflow="fold")
    return s


def _summary_rows(rep: ProbeReport) -> _Rows | None:
    """Server-argument choices and FlashInfer's MLA FP8 capability, from the facts."""
    f = rep.facts
    rows: list[tuple[str | Text, ...]] = []
    if "attention_backends.flag" in f:
        ab = f.get("attention_backends")
        rows.append(("--attention-backend", ", ".join(ab) if ab else "no --attention-backend option found"))
    for key, label in (("dsa_prefill_backends", "prefill"), ("dsa_decode_backends", "decode")):
        if f"{key}.flag" not in f:
            continue
        flag, vals, dep = f.get(f"{key}.flag"), f.get(key), f.get(f"{key}.deprecated_flags") or []
        text = (
            f"{flag}: {', '.join(vals or [])}"
            if flag
            else f"no NSA/DSA {label} backend option in this release"
        )
        if dep:
            text += f" (deprecated alias {', '.join(dep)})"
        rows.append((f"NSA/DSA {label}", text))
    if "flashinfer_mla_fp8_repack" in f:
        if f.get("flashinfer_version") or f.get("flashinfer_location"):
            fp8 = {
                True: "MLA kernel can take FP8 KV",
                False: "MLA kernel cannot take FP8 KV",
                None: "MLA FP8 capability unknown",
            }[f.get("flashinfer_mla_fp8")]
            rows.append(
                (
                    "flashinfer",
                    f"{f.get('flashinfer_version') or '?'}: {fp8} ({f.get('flashinfer_mla_fp8_reason')})",
                )
            )
        else:
            rows.append(("flashinfer", "not installed for the host python (no FlashInfer facts)"))
    return _Rows(_summary_table, tuple(rows)) if rows else None


def facts_table(fx: Facts) -> Table:
    """`inv facts`: one row per fact (Facts.rows), GPUs to ripgrep."""
    table = Table(title=f"facts: {fx.host}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in fx.rows():
        table.add_row(key, value)
    return table
