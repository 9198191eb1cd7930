"""`inv report RUN --html`: the run's report as one self-contained HTML page a browser opens with no network.

The page is the markdown report (sglops/views/report.py: the same sections for a bench, compare, ab, sweep,
play, profile or failed start) rendered to HTML, with:
- the run's identity on top (host, SGLang release, GPUs, patches, profile, operator, when);
- every chart inline as SVG (the one sglops/views/charts.py
  saves beside each PNG; an older run's PNG as a data URI);
- every table row a stand-in figure touches marked (class `standin` and a STAND-IN badge): rows that say so,
  rows naming a stand-in run or play step, and every row under a stand-in run's own heading;
- links to the run's traces (gzipped Chrome JSON, which ui.perfetto.dev and chrome://tracing open);
- a Content-Security-Policy that lets the page load nothing but itself (no script, no remote file).
Host text in it (log lines, probe hits) is escaped: markdown's raw HTML is off.
"""

from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from sglops.bench.record import STANDIN_NOTE, standin
from sglops.core import artifacts, redact
from sglops.core.errors import ConfigError
from sglops.views.report import render

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1180px;
padding:16px 24px;color:#1b1f24;background:#fff}
h1{font-size:22px;border-bottom:2px solid #d0d7de;padding-bottom:6px}h2{font-size:18px;margin-top:28px}
h3{font-size:15px}code{background:#f2f4f6;padding:1px 4px;border-radius:3px;font-size:12.5px}
pre{background:#f6f8fa;padding:10px;overflow-x:auto;font-size:12px}pre code{background:none}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
tr.standin td{background:#fff4d6}
.badge{display:inline-block;background:#b35900;color:#fff;font-size:10.5px;font-weight:600;padding:0 5px;
border-radius:3px;margin-right:6px;letter-spacing:.02em}
.identity td:first-child{font-weight:600;white-space:nowrap}
.note{background:#fff4d6;border-left:4px solid #b35900;padding:6px 10px}figure{margin:12px 0}
figure svg{max-width:100%;height:auto}figcaption{font-size:12px;color:#57606a}
.missing{color:#a40e26}
"""


def _standin_runs(folder: Path, record: dict) -> tuple[set[str], set[str]]:
    """(run ids, play step ids) whose figures a stand-in set: the run, its own sub-runs (a play's steps, ab's
    rounds, a sweep's candidates) and the runs a comparison names."""
    runs: set[str] = set()
    for sub in [folder, *sorted(folder.parent.glob(f"{folder.name}-*"))]:
        for name in ("manifest.json", "bench.json", "profile.json"):
            path = sub / name
            if path.is_file() and standin(artifacts.read_json(path)):
                runs.add(sub.name)
                break
    for r in (record.get("runs") or []) if isinstance(record.get("runs"), list) else []:
        if isinstance(r, dict) and r.get("standin") and r.get("run_id"):
            runs.add(str(r["run_id"]))
    steps = set()
    for step in record.get("steps") if isinstance(record.get("steps"), list) else []:
        sid = str(step.get("id")) if isinstance(step, dict) else ""
        # the step's own run, and its rounds or candidates (own-RUN-...)
        own = f"{folder.name}-{sid}"
        res = step.get("result") if isinstance(step, dict) else None
        if (
            any(r == own or r.startswith(own + "-") for r in runs)
            or isinstance(res, dict)
            and (standin(res) or any(isinstance(r, dict) and r.get("standin") for r in res.get("runs") or []))
        ):
            # a step whose figures came from the stand-in (its runs, or a comparison of them)
            steps.add(sid)
    return runs, steps


def _record(folder: Path) -> tuple[str, dict]:
    for name in (
        "ab.json",
        "sweep.json",
        "play.json",
        "bench.json",
        "comparison.json",
        "profile.json",
        "restart.json",
    ):
        if (folder / name).is_file():
            return name[:-5], artifacts.read_json(folder / name)
    return "run", {}


def _first(folder: Path, key: str) -> Any:
    """key from the run's manifest, else from the first of
    its sub-runs' that has it (a play's, ab's rounds')."""
    for sub in [folder, *sorted(folder.parent.glob(f"{folder.name}-*"))]:
        path = sub / "manifest.json"
        value = artifacts.read_json(path).get(key) if path.is_file() else None
        if value:
            return value
    return None


def _identity(
    folder: Path, kind: str, doc: dict, manifest: dict, standin_runs: set[str]
) -> list[tuple[str, str]]:
    """The rows of the identity table: what ran where, on which release, with which patches and profile."""
    # the compared runs' identity (the comparison has none of its own)
    if kind == "comparison":
        return _compared(doc, standin_runs)
    facts = doc.get("facts") or _first(folder, "facts") or {}
    sgl = facts.get("sglang") or _first(folder, "sglang") or {}
    version = (sgl.get("version") if isinstance(sgl, dict) else None) or doc.get("sglang_version") or "-"
    commit = (sgl.get("commit") or "")[:12] if isinstance(sgl, dict) else ""
    gpus = facts.get("gpus") or []
    gpu = f"{len(gpus)}x {gpus[0].get('name')}" if gpus else "-"
    if gpus and (facts.get("nvidia_smi") or {}).get("standin"):
        gpu += " (as a STAND-IN nvidia-smi reports them: no real GPU)"
    # ab: each side's own
    if isinstance(doc.get("a"), dict) and isinstance(doc.get("b"), dict):
        patch_names = [f"{s}: {'+'.join(doc[s.lower()].get('patches') or []) or 'none'}" for s in ("A", "B")]
    elif kind == "sweep":
        patch_names = [f"{p} (per candidate)" for p in doc.get("managed") or doc.get("managed_patches") or []]
    else:
        patches = manifest.get("patches") if isinstance(manifest.get("patches"), list) else doc.get("patches")
        patch_names = [p.get("patch", "?") if isinstance(p, dict) else str(p) for p in patches or []]
    profiles = [str((manifest.get("vars") or {}).get("profile") or "")]
    profiles += [str(x.get("profile")) for x in manifest.get("launch") or [] if isinstance(x, dict)]
    profiles += [str((doc.get(s) or {}).get("profile")) for s in ("a", "b") if isinstance(doc.get(s), dict)]
    profiles += [str(doc["profile"])] if isinstance(doc.get("profile"), str) else []
    if kind == "sweep" and isinstance(doc.get("base"), dict):
        profiles.append(str(doc["base"].get("profile")))
    profiles = [p for p in dict.fromkeys(profiles) if p and p != "None"]
    rows = [
        ("run", f"{folder.name} ({manifest.get('task') or kind})"),
        ("host", str(manifest.get("host") or doc.get("host") or "-")),
        ("SGLang", version + (f" (commit {commit})" if commit else "")),
        ("GPUs", gpu),
        ("patches", ", ".join(patch_names) or "none"),
        ("profile", ", ".join(profiles) or "-"),
        ("operator, started", f"{manifest.get('operator') or '-'}, {manifest.get('started') or '-'}"),
    ]
    if standin_runs:
        rows.append(("stand-in", f"{len(standin_runs)} run(s) here: {STANDIN_NOTE}"))
    return rows


def _compared(doc: dict, standin_runs: set[str]) -> list[tuple[str, str]]:
    """The identity rows of a comparison: each compared run's host, release, patches and profile."""
    rows: list[tuple[str, str]] = []
    for r in doc.get("runs") or []:
        try:
            folder = artifacts.find_run(str(r.get("run_id")))
        except ConfigError:
            rows.append((str(r.get("run_id")), "record not found"))
            continue
        kind, sub = _record(folder)
        manifest = (
            artifacts.read_json(folder / "manifest.json") if (folder / "manifest.json").is_file() else {}
        )
        own = dict(_identity(folder, kind, sub, manifest, set()))
        rows.append(
            (
                folder.name,
                f"{own['host']}, SGLang {own['SGLang']}, patches {own['patches']}, profile {own['profile']}"
                + (" (STAND-IN)" if folder.name in standin_runs else ""),
            )
        )
    return [("run", "a comparison"), *rows] + (
        [("stand-in", f"{len(standin_runs)} run(s) here: {STANDIN_NOTE}")] if standin_runs else []
    )


def _inline_svg(svg: str, n: int) -> str:
    """An SVG file's markup for inlining: no XML prolog,
    its ids prefixed so that two charts never share one."""
    svg = re.sub(r"^\s*<\?xml[^>]*>\s*(<!DOCTYPE[^>]*>)?\s*", "", svg)
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if ids:
        svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="c{n}-{m.group(1)}"', svg)
        svg = re.sub(
            r'(href="#|url\(#)([^")]+)',
            lambda m: f"{m.group(1)}c{n}-{m.group(2)}" if m.group(2) in ids else m.group(0),
            svg,
        )
    return svg


def _figures(body: str, folder: Path, note: str) -> str:
    """Every <img> of the markdown as an inline SVG figure
    (else the PNG as a data URI, else a visible gap)."""
    count = iter(range(1, 10_000))

    def figure(m: re.Match) -> str:
        src, alt = html.unescape(m.group(1)), html.unescape(m.group(2))
        path = (folder / src).resolve()
        svg = path.with_suffix(".svg")
        if svg.is_file():
            inner = _inline_svg(svg.read_text(), next(count))
        elif path.is_file() and path.suffix == ".png":
            inner = (
                f'<img alt="{html.escape(alt)}" src="data:image/png;base64,'
                f'{base64.b64encode(path.read_bytes()).decode()}">'
            )
        else:
            return f'<p class="missing">chart {html.escape(src)} not found</p>'
        caption = html.escape(alt) + (f" ({html.escape(note)})" if note else "")
        return f"<figure>{inner}<figcaption>{caption}</figcaption></figure>"

    return re.sub(r'<img src="([^"]*)" alt="([^"]*)"\s*/?>', figure, body)


def _details(body: str) -> str:
    """The report's <details> blocks (written as raw HTML lines in the markdown) back as elements."""
    body = re.sub(
        r"<p>&lt;details&gt;&lt;summary&gt;(.*?)&lt;/summary&gt;</p>", r"<details><summary>\1</summary>", body
    )
    return body.replace("<p>&lt;/details&gt;</p>", "</details>")


def _mark_rows(body: str, runs: set[str], steps: set[str], whole: bool) -> str:
    """Mark each table row a stand-in figure touches (see the module's docstring)."""
    section = ""
    in_body = False

    def text_of(fragment: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()

    def visit(m: re.Match) -> str:
        nonlocal section, in_body
        tok = m.group(0)
        if tok.startswith("<h"):
            section = text_of(tok)
            return tok
        if tok in ("<tbody>", "</tbody>"):
            in_body = tok == "<tbody>"
            return tok
        if not in_body:
            return tok
        cells = [text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tok, re.S)]
        row = " ".join(cells)
        touched = (
            whole
            or "stand-in" in row.lower()
            or section in steps
            or section in runs
            or any(r in row for r in runs)
            or bool(cells and cells[0] in steps)
        )
        if not touched:
            return tok
        return re.sub(
            r"^<tr>\s*<td([^>]*)>",
            r'<tr class="standin"><td\1><span class="badge">STAND-IN</span>',
            tok,
            count=1,
        )

    return re.sub(r"<h[1-4][^>]*>.*?</h[1-4]>|</?tbody>|<tr>.*?</tr>", visit, body, flags=re.S)


def _traces(folder: Path, out_dir: Path) -> list[str]:
    """Links to the run's trace files (its own and its sub-runs'), relative to the page."""
    found = [
        p
        for sub in [folder, *sorted(folder.parent.glob(f"{folder.name}-*"))]
        for p in sorted(sub.rglob("*.trace.json*"))
        if p.is_file()
    ]
    if not found:
        return []
    items = "".join(
        f'<li><a href="{html.escape(os.path.relpath(p, out_dir))}">{html.escape(p.name)}</a> '
        f"({p.stat().st_size / 1024:.0f} KiB, {html.escape(p.parent.parent.name)})</li>"
        for p in found
    )
    return [
        "<h2>Traces</h2>",
        (
            "<p>Chrome JSON traces (gzipped): open one in Perfetto (ui.perfetto.dev, &ldquo;Open trace"
            " file&rdquo;) or chrome://tracing; <code>inv analyze-trace FILE</code> reads them"
            f" too.</p><ul>{items}</ul>"
        ),
    ]


def render_html(folder: Path, out_dir: Path | None = None) -> str:
    """The page for the run in folder; trace links relative to out_dir (default folder)."""
    out_dir = (out_dir or folder).resolve()
    kind, doc = _record(folder)
    manifest = artifacts.read_json(folder / "manifest.json") if (folder / "manifest.json").is_file() else {}
    runs, steps = _standin_runs(folder, doc)
    whole = folder.name in runs and kind in ("bench", "profile")
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = _details(md.render(render(folder, folder.resolve())))
    body = _mark_rows(body, runs, steps, whole)
    body = _figures(body, folder, "figures SET BY THE STAND-IN" if runs else "")
    ident = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
        for k, v in _identity(folder, kind, doc, manifest, runs)
    )
    note = (
        f'<p class="note"><span class="badge">STAND-IN</span>{html.escape(STANDIN_NOTE)}: every row such a '
        "figure touches is marked like this one.</p>"
        if runs
        else ""
    )
    title = f"sglops report {folder.name}"
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f'<table class="identity"><tbody>{ident}</tbody></table>',
        note,
        body,
        *_traces(folder, out_dir),
        f'<p style="color:#57606a;font-size:12px">written by sglops from {html.escape(str(folder))}</p>',
        "</body></html>",
    ]
    return redact.text("\n".join(page))


def write_html(run: str, output: str | None = None) -> Path:
    """Write RUN's page (default RUN/run-report.html) whole or not at all; returns its path."""
    folder = artifacts.find_run(run)
    target = Path(output) if output else folder / "run-report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(render_html(folder, target.parent))
    os.replace(tmp, target)
    return target
