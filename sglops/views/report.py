"""`inv report RUN`: one markdown page for a recorded run, written from its JSON records.

A play's report walks the investigation: the host, what the probes flagged, what was patched and
launched, each benchmark, the comparison with its chart, and what each profile named as the
bottleneck. A bench, profile, compare, ab or sweep run gets the part of that page it has; a sweep
candidate that did not come up (its restart.json) gets its crash.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sglops.bench.record import STANDIN_MARK, STANDIN_NOTE, standin
from sglops.core import artifacts
from sglops.core.errors import ConfigError
from sglops.trace.names import full_names_markdown, printable, short_kernel, shorten
from sglops.views.bench import markdown_loads


def _rel(path: str | None, base: Path) -> str | None:
    return os.path.relpath(path, base) if path else None


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(cell(v) for v in row) + " |" for row in rows],
        "",
    ]


def _host(facts: dict | None) -> list[str]:
    if not facts:
        return []
    gpus = facts.get("gpus") or []
    sgl = facts.get("sglang") or {}
    fi = facts.get("flashinfer") or {}
    gpu = (
        f"{len(gpus)}x {gpus[0]['name']} (compute capability {gpus[0]['compute_capability']})"
        if gpus
        else "no GPU"
    )
    # the host's nvidia-smi said it is a stand-in
    if gpus and (facts.get("nvidia_smi") or {}).get("standin"):
        gpu += " (as a STAND-IN nvidia-smi reports them: no real GPU)"
    return [
        "## Host",
        "",
        (
            f"- GPUs: {gpu}, driver {gpus[0]['driver'] if gpus else '-'}, CUDA"
            f" {(facts.get('cuda') or {}).get('driver_cuda')}"
        ),
        f"- SGLang {sgl.get('version')} at `{sgl.get('package_dir')}`"
        + (
            f", commit `{(sgl.get('commit') or '')[:12]}`" + (" (dirty)" if sgl.get("dirty") else "")
            if sgl
            else ""
        ),
        (
            f"- FlashInfer {fi.get('version') or 'not installed'}, "
            f"torch {(facts.get('torch') or {}).get('version') or 'not installed'}"
        ),
        "",
    ]


def _probe(doc: dict) -> list[str]:
    rows = []
    for b in doc.get("backends") or []:
        if not b.get("exists"):
            continue
        rows.append(
            [
                b["name"],
                "yes" if b.get("fp8_native") else "no",
                "yes" if b.get("casts_whole_pool") else "no",
                "yes" if b.get("arch_guard") else "none found",
                "yes" if b.get("nsa_dsa") else "no",
                b.get("verdict", ""),
            ]
        )
    out = ["## Probes", ""] + [f"- **FLAG**: {f}" for f in doc.get("flags") or []]
    if rows:
        out += [
            "",
            *_table(["backend", "FP8-native", "casts whole pool", "arch guard", "NSA/DSA", "verdict"], rows),
        ]
    return out + [""]


def _bench(step_id: str, doc: dict) -> list[str]:
    rows = []
    for lv in doc.get("levels") or []:
        d = lv.get("decode_tok_s") or {}
        ci = d.get("ci95") or []

        def med(key: str, _lv=lv) -> str:
            m = (_lv.get(key) or {}).get("median")
            return f"{m:.2f}" if m is not None else "-"

        mark = " (stand-in)" if standin(doc) else ""
        rows.append(
            [
                lv.get("concurrency"),
                f"{d.get('median', float('nan')):.2f}{mark}" if d else "-",
                f"{ci[0]:.2f}-{ci[1]:.2f}" if len(ci) == 2 else "-",
                med("tpot_ms"),
                med("ttft_ms"),
                med("e2e_ms"),
                lv.get("status"),
            ]
        )
    cfg = doc.get("config") or {}
    patches = ", ".join(p.get("patch", "?") for p in doc.get("patches") or []) or "none"
    return [
        f"### {step_id}",
        "",
        (
            f"run `{doc.get('run_id')}`: {cfg.get('runs')} repeats, input {cfg.get('input_len')} / "
            f"output {cfg.get('output_len')} tokens, {cfg.get('api')} API; patches applied: {patches}"
        ),
        "",
        *([f"**{STANDIN_NOTE}**", ""] if standin(doc) else []),
        *_table(["concurrency", "decode tok/s", "95% CI", "TPOT ms", "TTFT ms", "e2e ms", "status"], rows),
        *markdown_loads(doc),
    ]


def _compare(doc: dict, base: Path) -> list[str]:
    mark = lambda r: f" ({STANDIN_MARK})" if r.get("standin") else ""  # noqa: E731
    rows = [
        [
            r["run"] + mark(r),
            r["concurrency"],
            r["metric"],
            f"{r['base']:.2f}",
            f"{r['other']:.2f}",
            f"{r['ratio']:.3f}",
            f"[{r['ratio_ci95'][0]:.3f}, {r['ratio_ci95'][1]:.3f}]" if r.get("ratio_ci95") else "-",
            r["verdict"],
        ]
        for r in doc.get("rows") or []
    ]
    out = [
        "## Comparison",
        "",
        f"baseline: `{doc.get('baseline')}`",
        "",
        *[f"**`{r['run_id']}`: {STANDIN_NOTE}**" for r in doc.get("runs") or [] if r.get("standin")],
        "",
        *_table(["run", "C", "metric", "baseline", "this run", "ratio", "95% CI", "verdict"], rows),
    ]
    # speed, output identity and config in one verdict
    for run, line in (doc.get("headline") or {}).items():
        out.append(f"- `{run}`: **{line}**")
        for d in ((doc.get("config") or {}).get(run) or {}).get("differences") or []:
            kind = "intended" if d.get("intended") else "UNINTENDED"
            out.append(f"  - config `{d['key']}`: {d.get('a')} -> {d.get('b')} ({kind})")
    out += [f"- {n}" for n in doc.get("notes") or []]
    chart = _rel(doc.get("chart"), base)
    return out + ([f"![decode tok/s]({chart})", ""] if chart else [])


def _profile(step_id: str, doc: dict, base: Path) -> list[str]:
    a = doc.get("analysis") or {}
    req = doc.get("request") or {}
    out = [
        f"### {step_id}",
        "",
        f"{len(doc.get('traces') or [])} trace file(s), {doc.get('steps')} steps"
        + (f", activities {', '.join(req.get('activities') or [])}" if req else "")
        + (f", SGLang {doc['sglang_version']}" if doc.get("sglang_version") else "")
        + (" (stand-in server: synthetic traces, not GPU data)" if doc.get("standin") else ""),
        "",
    ]
    if doc.get("error"):
        return out + [f"- **not analysed**: {doc['error']}", ""]
    for f in a.get("findings") or []:
        out.append(
            f"- **{f['message']}**; next: "
            + "; ".join(f"`{t}`" if t.startswith("inv ") else t for t in f.get("try_next") or [])
        )
    cpu = a.get("cpu") or {}
    if a.get("by_kernel"):
        kernels = [
            [f"`{short_kernel(k['name'])}`", k["count"], f"{k['us']:.0f}", f"{k['share'] * 100:.1f}%"]
            for k in a["by_kernel"][:8]
        ]
        out += [
            "",
            *_table(["kernel", "calls", "GPU us", "share"], kernels),
            *full_names_markdown([k["name"] for k in a["by_kernel"][:8]]),
            "",
        ]
    out += [f"- CPU: {line}" for line in cpu.get("verdict") or []]
    if cpu.get("step_types"):
        out += [
            "",
            *_table(
                ["step kind", "count", "median step ms", "median loop pass ms"],
                [
                    [
                        r["kind"],
                        r["count"],
                        f"{r['median_step_us'] / 1000:.3f}" if r.get("median_step_us") else "-",
                        f"{r['median_pass_us'] / 1000:.3f}" if r.get("median_pass_us") else "-",
                    ]
                    for r in cpu["step_types"]
                ],
            ),
        ]
    if not a.get("by_kernel") and cpu.get("top_self"):
        out += _table(
            ["CPU op", "calls", "self us", "share"],
            [
                [shorten(r["name"], 90), r["count"], f"{r['self_us']:.0f}", f"{r['share'] * 100:.1f}%"]
                for r in cpu["top_self"][:8]
            ],
        )
    chart = _rel((doc.get("report") or {}).get("chart"), base)
    return out + ([f"![top kernels]({chart})", ""] if chart else [])


def _play(doc: dict, manifest: dict, base: Path) -> list[str]:
    steps = doc.get("steps") or []
    by_kind: dict[str, list[dict]] = {}
    for s in steps:
        by_kind.setdefault(s["do"], []).append(s)
    out = [
        f"# Play `{doc['play']}` on {doc['host']}",
        "",
        f"run `{doc['run_id']}`, operator {manifest.get('operator')}, started {manifest.get('started')}; "
        + ("**finished**" if doc.get("ok") else f"**stopped at step {manifest.get('failed_step')}**")
        + (" (dry run)" if doc.get("dry_run") else ""),
        "",
        *_table(
            ["step", "does", "status", "seconds", "result"],
            [
                [s["id"], s["do"], s["status"], s["seconds"], s.get("error") or s.get("summary", "")]
                for s in steps
            ],
        ),
    ]
    out += _host(manifest.get("facts"))
    for s in by_kind.get("probe", []):
        if s.get("result"):
            out += _probe(s["result"])
    patches = manifest.get("patches")
    if isinstance(patches, list):
        out += ["## Patches on the host at the end", ""]
        out += [
            f"- `{p['patch']}` variant `{p['variant']}`: "
            + ", ".join(
                f"`{f}` {h['before'][:10]} -> {h['after'][:10]}" for f, h in (p.get("files") or {}).items()
            )
            for p in patches
        ] or ["- none"]
        out.append("")
    seen: dict[str, list[str]] = {}
    for launch in manifest.get("launch") or []:
        if launch.get("argv"):
            seen.setdefault(" ".join(launch["argv"]), []).append(
                f"{launch.get('step')}: profile {launch.get('profile')}"
            )
    for argv, where in seen.items():
        out += [f"## Launch ({'; '.join(where)})", "", "```", argv, "```", ""]
    benches = [s for s in by_kind.get("bench", []) if s.get("result") and not s["result"].get("dry_run")]
    if benches:
        out += ["## Benchmarks", ""]
        for s in benches:
            out += _bench(s["id"], s["result"])
    for s in by_kind.get("compare", []):
        if s.get("result") and s["result"].get("rows"):
            out += _compare(s["result"], base)
    for s in by_kind.get("sweep", []):
        if s.get("result") and not s["result"].get("dry_run"):
            out += [
                line.replace("# ", "## ", 1) if line.startswith("#") else line
                for line in _sweep(s["result"], base)
            ]
    profiles = [
        s
        for s in by_kind.get("profile", [])
        if s.get("result") and (s["result"].get("analysis") or s["result"].get("error"))
    ]
    if profiles:
        out += ["## Profiles", ""]
        for s in profiles:
            out += _profile(s["id"], s["result"], base)
    return out


def _ab(doc: dict, base: Path) -> list[str]:
    """An `inv ab` run: the verdict, every round (each a bench
    run of its own), speed, identity, config, trace diff."""
    a, b = doc.get("a") or {}, doc.get("b") or {}
    side = lambda s: s.get("profile", "?") + "".join(f"+{p}" for p in s.get("patches") or [])  # noqa: E731
    bench = doc.get("bench") or {}
    out = [
        f"# A/B on {doc.get('host')}",
        "",
        f"**{doc.get('verdict')}**",
        "",
        f"- A = `{side(a)}`, B = `{side(b)}`; {doc.get('rounds_asked')} round(s), {doc.get('order')}",
        "- bench per round: " + ", ".join(f"{k} {v}" for k, v in sorted(bench.items())),
        "- patches managed (applied/reverted per round, checked in the host ledger): "
        + (", ".join(f"`{p}`" for p in doc.get("managed_patches") or []) or "none"),
        f"- wall time {doc.get('wall_s')} s",
        "",
    ]
    set_by = _standin_rounds(doc.get("rounds") or [])
    rows = [
        [
            r["round"],
            r["side"],
            f"`{r.get('run_id')}`",
            r.get("status"),
            (
                f"{r['decode_tok_s']:.2f}" + (" (stand-in)" if r.get("run_id") in set_by else "")
                if r.get("decode_tok_s")
                else "-"
            ),
            "+".join(r.get("patches") or []) or "none",
            r.get("restart_s") or "-",
            r.get("error") or "",
        ]
        for r in doc.get("rounds") or []
    ]
    if set_by:
        out += [f"**rounds {', '.join(sorted(set_by))}: {STANDIN_NOTE}**", ""]
    out += [
        "## Rounds",
        "",
        *_table(
            [
                "round",
                "side",
                "bench run",
                "status",
                "decode tok/s",
                "patches (ledger)",
                "restart s",
                "error",
            ],
            rows,
        ),
    ]
    sp = doc.get("speed") or {}
    if sp.get("ratio") is not None:
        ci = sp.get("ratio_ci95")
        out += [
            "## Speed",
            "",
            f"B/A decode tok/s x{sp['ratio']:.3f}"
            + (f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if ci else "")
            + f": **{sp.get('verdict')}**; {sp.get('method')}; "
            f"a verdict needs at least {sp.get('min_rounds')} rounds.",
            "",
        ]
    out += ["## Outputs", "", *[f"- {line}" for line in doc.get("identity_lines") or ["not compared"]], ""]
    cfg = doc.get("config") or {}
    if cfg:
        out += ["## Server config, B vs A", "", f"{cfg.get('line')}", ""]
        diffs = cfg.get("differences") or []
        if diffs:
            out += _table(
                ["key", "A", "B", ""],
                [
                    [d["key"], d.get("a"), d.get("b"), "intended" if d.get("intended") else "**UNINTENDED**"]
                    for d in diffs
                ],
            )
    chart = _rel(doc.get("chart"), base)
    if chart:
        out += [f"![decode tok/s per round]({chart})", ""]
    td = doc.get("trace_diff") or {}
    if td.get("markdown") and Path(td["markdown"]).is_file():
        text = Path(td["markdown"]).read_text()
        out += [
            line.replace("## ", "### ", 1) if line.startswith("## ") else line for line in text.splitlines()
        ]
        out.append("")
    elif td.get("error"):
        out += [f"- trace diff not made: {td['error']}", ""]
    restore = doc.get("restore") or {}
    out += [
        "## Host afterwards",
        "",
        ("restored: " if restore.get("ok") else "**NOT restored**: ")
        + f"server {restore.get('server') or '?'}, ledger patches "
        + (", ".join(restore.get("ledger") or []) or "none")
        + (f"; {restore['error']}" if restore.get("error") else ""),
        "",
        "<details><summary>round plan</summary>",
        "",
        *[f"1. {s}" for s in doc.get("plan") or []],
        "",
        "</details>",
        "",
    ]
    return out


def _standin_rounds(rounds: list[dict]) -> set[str]:
    """The ab rounds whose bench record says the stand-in
    server set its figures (each round is a run of its own)."""
    out = set()
    for r in rounds:
        try:
            path = artifacts.find_run(r["run_id"]) / "bench.json" if r.get("run_id") else None
        except ConfigError:
            continue
        if path is not None and path.is_file() and standin(artifacts.read_json(path)):
            out.add(r["run_id"])
    return out


def _sweep(doc: dict, base: Path) -> list[str]:
    """An `inv sweep` run (or a play's sweep step): the
    table, recommendation, skips with why, split, restore."""
    from sglops.experiment.sweep_result import SweepResult
    from sglops.views.sweep import sweep_report

    return sweep_report(SweepResult.from_json(doc), _rel(doc.get("chart"), base))


def _failed_start(doc: dict, manifest: dict) -> list[str]:
    """A restart record that did not come up (a sweep
    candidate's `<sweep-run>-c<N>`): its class, line and log."""
    sweep = f" (a candidate of sweep `{manifest['sweep']}`)" if manifest.get("sweep") else ""
    head = (
        "came up"
        if doc.get("ok")
        else (
            f"did not come up: {doc.get('failure_label') or doc.get('failure')}"
            + (f": {doc['failure_detail']}" if doc.get("failure_detail") else "")
        )
    )
    tail = [printable(line) for line in (doc.get("log_tail") or [])[-20:]]
    return [
        f"# Restart on {doc.get('host')}{sweep}",
        "",
        printable(
            f"profile `{doc.get('profile')}`, port "
            f"{doc.get('port')}, SGLang {doc.get('sglang_version') or '?'}: **{head}**"
        ),
        "",
        *([printable(f"- hint: {doc['hint']}"), ""] if doc.get("hint") else []),
        *(
            [f"log `{printable(doc.get('log_path') or '?')}`, last lines:", "", "```", *tail, "```", ""]
            if tail
            else []
        ),
    ]


def render(folder: Path, base: Path | None = None) -> str:
    """The report's markdown for the run in folder; chart links are relative to base (default folder)."""
    base = base or folder
    manifest = artifacts.read_json(folder / "manifest.json") if (folder / "manifest.json").exists() else {}
    if (folder / "ab.json").exists():
        lines = _ab(artifacts.read_json(folder / "ab.json"), base)
    # before comparison.json: a sweep keeps its comparison in its folder
    elif (folder / "sweep.json").exists():
        lines = _sweep(artifacts.read_json(folder / "sweep.json"), base)
    elif (folder / "play.json").exists():
        lines = _play(artifacts.read_json(folder / "play.json"), manifest, base)
    elif (folder / "bench.json").exists():
        doc = artifacts.read_json(folder / "bench.json")
        lines = [
            f"# Bench on {doc.get('host')}",
            "",
            *_host(doc.get("facts")),
            *_bench(doc.get("run_id", ""), doc),
        ]
    elif (folder / "comparison.json").exists():
        lines = ["# Comparison", "", *_compare(artifacts.read_json(folder / "comparison.json"), base)]
    elif (folder / "profile.json").exists():
        doc = artifacts.read_json(folder / "profile.json")
        lines = [f"# Profile on {doc.get('host')}", "", *_profile(doc.get("run_id", ""), doc, base)]
    elif (folder / "restart.json").exists():
        lines = _failed_start(artifacts.read_json(folder / "restart.json"), manifest)
    else:
        raise ConfigError(
            f"{folder}: no ab, sweep, play, bench, profile, comparison or restart record to report on"
        )
    return "\n".join(lines).rstrip() + "\n"


def write_report(run: str, output: str | None = None) -> Path:
    """Write RUN's report (default RUN/run-report.md, next to its charts) and return its path."""
    folder = artifacts.find_run(run)
    target = Path(output) if output else folder / "run-report.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(folder, target.parent.resolve()))
    return target


def print_written(path: Path) -> None:
    """`inv report`: where the report went; for a sweep written into its own run folder, its table on the
    terminal too (the same view `inv sweep` printed, read back from sweep.json)."""
    from sglops.core.console import console

    record = path.parent / "sweep.json"
    if path.name == "run-report.md" and record.is_file():
        from sglops.experiment.sweep_result import SweepResult
        from sglops.views.sweep import sweep_view

        console.print(sweep_view(SweepResult.from_json(artifacts.read_json(record))))
    console.print(f"report written: {path}")
