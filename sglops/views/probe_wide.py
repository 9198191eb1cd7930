"""probe-backends with every piece of evidence (`--wide`, `--show-hits`): lines that wrap between words.

A table cell folds a long word wherever the column ends, which split `overrides.py:1210` across two lines;
here each backend is a block of labelled lines and each hit one line, so a file:line reference is one word and
wraps whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from sglops.probe.report import by_func, line_refs

if TYPE_CHECKING:
    from sglops.probe.report import ProbeReport


def backend_blocks(rep: ProbeReport) -> list[Text]:
    """Per attention backend: its verdict, then FP8-native /
    whole-pool cast / arch guards / NSA-DSA with file:line."""
    f = rep.facts
    out = [Text("attention backends (srt/layers/attention/*_backend.py)")]
    for b in rep.backends:
        head = Text(b.name, style="bold")
        if not b.exists or b.unreadable:
            out.append(head + Text(f": {b.verdict(f)}", style="dim" if not b.exists else "red"))
            continue
        casts = b.has("casts_whole_pool")
        style = "bold red" if casts and not b.has("fp8_native") else ""
        out.append(head + Text(": ") + Text(b.verdict(f), style=style))
        native = (
            "yes " + line_refs(b.hits["fp8_native"])
            if b.has("fp8_native")
            else ("no" if "fp8_native" in b.hits else "not probed")
        )
        rows = (
            ("FP8-native", native),
            (
                "casts whole pool",
                rep.cell(b, "casts_whole_pool", by_func(b.hits.get("casts_whole_pool", []))),
            ),
            ("arch guards", rep.arch_cell(b)),
            ("NSA/DSA", rep.cell(b, "nsa_dsa", "yes " + line_refs(b.hits.get("nsa_dsa", []), 2))),
        )
        for label, value in rows:
            out.append(Text("  ") + Text(label, style="dim") + Text(f": {value}"))
    return out


def hit_lines(rep: ProbeReport) -> list[Text]:
    """Every hit and definition as `file:line  probe  [in]  text`, and why a probe found nothing."""
    out = [Text("hits", style="bold")]
    for r in rep.results:
        for hit in r.get("hits", []):
            out.append(_hit(f"{hit['file']}:{hit['line']}", r["id"], hit.get("func") or "", hit["text"]))
        for d in r.get("definitions", []):
            out.append(
                _hit(
                    f"{d['file']}:{d['line']}",
                    r["id"],
                    d["flag"] + (" (deprecated)" if d["deprecated"] else ""),
                    d["text"],
                )
            )
        if not r.get("hits") and not r.get("definitions"):
            miss = rep.meanings.get(r["id"], ("", "not found"))[1]
            why = "root not found" if r.get("missing_root") else f"{r.get('files', 0)} files scanned"
            out.append(Text(f"{r['id']}: ") + Text(f"{miss} ({why})", style="dim"))
    return out


def _hit(where: str, probe: str, inside: str, text: str) -> Text:
    line = Text(where, style="cyan") + Text(f"  {probe}")
    if inside:
        line += Text(f"  [{inside}]", style="dim")
    return line + Text(f"  {text.strip()}")
