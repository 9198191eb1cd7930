"""Views of what is on a host: the facts table, and a probe-backends report: backend table, server arguments and FlashInfer, other probes, hits.

ProbeReport (sglops.probe.report) keeps the facts, the verdicts and JSON; the task prints it through
sglops.views.show (`show(report, show_hits=True)` adds every hit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sglops.probe.report import _by_func, _lines

if TYPE_CHECKING:
    from sglops.probe.facts import Facts
    from sglops.probe.report import ProbeReport


def probe_view(rep: ProbeReport, show_hits: bool = False) -> Group:
    """`inv probe-backends`: the backend table, server arguments and FlashInfer, other probes, flags; hits on demand."""
    f = rep.facts
    ver = f"sglang {f['sglang_version'] or '?'}"
    if f.get("sglang_commit"):
        ver += f" @ {f['sglang_commit'][:12]}"
    title = f"probe-backends: {rep.host} ({ver}, {f['sglang_kind']}; {rep.engine}, {rep.seconds:.2f} s)"
    parts: list[Any] = [Text(title, style="bold")]
    if any(b.hits for b in rep.backends):
        parts.append(_backend_table(rep))
    parts += [_summary(rep), _global_table(rep)]
    for flag in rep.flags:
        parts.append(Text(f"FLAG: {flag}", style="bold yellow"))
    for u in rep.unreadable:
        parts.append(Text(f"unreadable: {u['file']}: {u['error']}", style="red"))
    if rep.fallbacks:
        parts.append(Text(f"ripgrep could not take the regex of {', '.join(rep.fallbacks)}; "
                          "the stdlib scanner ran those", style="dim"))
    if rep.launch is not None:
        from sglops.probe.launch_path import launch_lines

        for i, line in enumerate(launch_lines(rep.launch)):
            style = "bold" if i == 0 else "bold red" if "REFUSED" in line else "yellow" if "undetermined" in line else ""
            parts.append(Text(line, style=style))
    if show_hits:
        parts.append(_hits_table(rep))
    return Group(*[p for p in parts if p is not None])


def _backend_table(rep: ProbeReport) -> Table:
    """Per attention backend: FP8-native, casts the whole pool, arch guards, NSA/DSA and the verdict."""
    f = rep.facts
    t = Table(title="attention backends (srt/layers/attention/*_backend.py)", title_justify="left")
    for col in ("backend", "FP8-native", "casts whole pool", "arch guards", "NSA/DSA", "verdict"):
        t.add_column(col, overflow="fold")
    for b in rep.backends:
        if not b.exists:
            t.add_row(b.name, "-", "-", "-", "-", Text("absent in this release", style="dim"))
            continue
        if b.unreadable:
            t.add_row(b.name, "?", "?", "?", "?", Text(b.verdict(f), style="red"))
            continue
        native = "yes " + _lines(b.hits["fp8_native"]) if b.has("fp8_native") else "no"
        casts = rep.cell(b, "casts_whole_pool", _by_func(b.hits.get("casts_whole_pool", [])))
        arch = rep.arch_cell(b)
        dsa = rep.cell(b, "nsa_dsa", "yes " + _lines(b.hits.get("nsa_dsa", []), 2))
        style = "bold red" if b.has("casts_whole_pool") and not b.has("fp8_native") else ""
        t.add_row(b.name, native if "fp8_native" in b.hits else "not probed", Text(casts, style=style), arch, dsa,
                  b.verdict(f))
    return t


def _global_table(rep: ProbeReport) -> Table | None:
    """The probes that grep the whole tree rather than one backend."""
    rows = [r for r in rep.results if r["id"] in rep.global_greps]
    if not rows:
        return None
    t = Table(title="other probes", title_justify="left")
    for col in ("probe", "hits", "meaning"):
        t.add_column(col, overflow="fold")
    for r in rows:
        hit, miss = rep.meanings.get(r["id"], ("found", "not found"))
        if r.get("missing_root"):
            t.add_row(r["id"], "-", f"{r['root']} not found on the host")
        elif not r.get("files"):
            t.add_row(r["id"], "-", f"no file matched the probe's globs under {r['root']}")
        else:
            n, files = len(r["hits"]), len({h["file"] for h in r["hits"]})
            t.add_row(r["id"], f"{n} in {files} of {r['files']} files" if n else f"0 in {r['files']} files",
                      hit if n else miss)
    return t


def _summary(rep: ProbeReport) -> Table | None:
    """Server-argument choices and FlashInfer's MLA FP8 capability, from the facts."""
    f = rep.facts
    s = Table(show_header=False, title="server arguments and FlashInfer", title_justify="left")
    s.add_column(style="bold")
    s.add_column(overflow="fold")
    if "attention_backends.flag" in f:
        ab = f.get("attention_backends")
        s.add_row("--attention-backend", ", ".join(ab) if ab else "no --attention-backend option found")
    for key, label in (("dsa_prefill_backends", "prefill"), ("dsa_decode_backends", "decode")):
        if f"{key}.flag" not in f:
            continue
        flag, vals, dep = f.get(f"{key}.flag"), f.get(key), f.get(f"{key}.deprecated_flags") or []
        text = f"{flag}: {', '.join(vals or [])}" if flag else f"no NSA/DSA {label} backend option in this release"
        if dep:
            text += f" (deprecated alias {', '.join(dep)})"
        s.add_row(f"NSA/DSA {label}", text)
    if "flashinfer_mla_fp8_repack" in f:
        if f.get("flashinfer_version") or f.get("flashinfer_location"):
            fp8 = {True: "MLA kernel can take FP8 KV", False: "MLA kernel cannot take FP8 KV",
                   None: "MLA FP8 capability unknown"}[f.get("flashinfer_mla_fp8")]
            s.add_row("flashinfer", f"{f.get('flashinfer_version') or '?'}: {fp8} ({f.get('flashinfer_mla_fp8_reason')})")
        else:
            s.add_row("flashinfer", "not installed for the host python (no FlashInfer facts)")
    return s if s.row_count else None


def _hits_table(rep: ProbeReport) -> Table:
    """Every hit and definition as file:line, and why a probe found nothing."""
    h = Table(title="hits", title_justify="left")
    for col in ("probe", "file:line", "in", "text"):
        h.add_column(col, overflow="fold")
    for r in rep.results:
        for hit in r.get("hits", []):
            h.add_row(r["id"], f"{hit['file']}:{hit['line']}", hit.get("func") or "", hit["text"])
        for d in r.get("definitions", []):
            h.add_row(r["id"], f"{d['file']}:{d['line']}", d["flag"] + (" (deprecated)" if d["deprecated"] else ""),
                      d["text"])
        if not r.get("hits") and not r.get("definitions"):
            miss = rep.meanings.get(r["id"], ("", "not found"))[1]
            why = "root not found" if r.get("missing_root") else f"{r.get('files', 0)} files scanned"
            h.add_row(r["id"], "-", "", f"{miss} ({why})")
    return h


def facts_table(fx: Facts) -> Table:
    """`inv facts`: one row per fact (Facts.rows), GPUs to ripgrep."""
    table = Table(title=f"facts: {fx.host}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in fx.rows():
        table.add_row(key, value)
    return table
