"""Trace analysis speed against Holistic Trace Analysis (library call and command); peak memory on 1 GB.

    python3 benchmarks/bench_trace.py command --hta-python PY [--trace T ...] [--repeats 7]
    # the real SGLang CPU trace, analysis only, in-process
    python3 benchmarks/bench_trace.py cpu [--repeats 9]
    # needs `pip install .[bench]` (HTA) in this python
    python3 benchmarks/bench_trace.py speed  [--repeats 5]
    # makes /tmp/sglops-bench-<size>g.trace.json
    python3 benchmarks/bench_trace.py memory [--size-gb 1.0] [--gzip]

command: what a user waits for. `python -m invoke analyze-trace TRACE --json --out DIR` against
`PY benchmarks/hta_breakdown.py TRACE --json` (a plain HTA script: kernel breakdown, idle time, CPU ops and
ranges), each a whole process, started in turn (A B A B ...) after one warm-up each; wall clock and the
child's own CPU time (user + sys, from wait4); medians, and the median of the pairwise ratios. Default
traces: the real SGLang CPU trace and the largest real H200 trace in tests/data/traces. PY is a python with
`holistictraceanalysis` (the `bench` extra; a venv of its own if it would fight the pinned packages). Start
both the same way: a venv made with --system-site-packages pays the same site start-up as this python.
cpu: the analysis alone (parse + GPU + CPU views) of the real SGLang CPU trace, in-process, median.
speed: the real H200 trace, sglops' full analysis (kernels + ops + steps + idle + rules) and
HTA's TraceAnalysis + get_gpu_kernel_breakdown, interleaved in one process, medians; the
per-kernel totals of both are compared (HTA with HTA_DISABLE_NS_ROUNDING=1, else it trims
sub-us kernels to whole us; both figures are printed).
memory: the real trace's events replicated with shifted timestamps and ids into one plain
JSON file, analysed in a child process; peak RSS from getrusage(RUSAGE_CHILDREN).
Loopback/local only: nothing here touches the network.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
REAL = REPO / "tests" / "data" / "traces" / "h200_decode_gathercast.trace.json.gz"
TRACES = REPO / "tests" / "data" / "traces"
CPU_TRACE = TRACES / "sglang-cpu-decode20-TP-0.trace.json.gz"


def _largest_gpu_trace() -> Path:
    return max((p for p in TRACES.glob("h200_*.trace.json.gz")), key=lambda p: p.stat().st_size)


def _timed(argv: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, the child's CPU s, exit code) of one whole process, its output thrown away."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def kernel_shares_gap(ours: dict, hta: dict) -> float | None:
    """The largest difference, in percentage points of GPU time, between the kernel shares of `inv
    analyze-trace --json` and of hta_breakdown.py --json (the kernels HTA names; its rows sum to its GPU
    time). None: no kernels."""
    rows = hta.get("kernels") or []
    total = sum(r["us"] for r in rows)
    if not total or not ours.get("by_kernel"):
        return None
    mine = {r["name"]: r["us"] / (ours.get("gpu_us") or 1.0) for r in ours["by_kernel"]}
    named = [r for r in rows if r["name"] in mine]
    return max(abs(100 * r["us"] / total - 100 * mine[r["name"]]) for r in named) if named else None


def command(hta_python: str, traces: list[str], repeats: int) -> dict:
    """inv analyze-trace vs a plain HTA script, as whole
    processes, interleaved; and their kernel shares' agreement."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # both as installed: with their .pyc files (HTA's venv has its own)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out_dir = tempfile.mkdtemp(prefix="sglops-bench-cmd-")
    results = []
    try:
        for trace in traces:
            ours = [sys.executable, "-m", "invoke", "analyze-trace", str(trace), "--json", "--out", out_dir]
            hta = [hta_python, str(REPO / "benchmarks" / "hta_breakdown.py"), str(trace), "--json"]
            answers = []
            # warm-up: page cache, .pyc files; the answers compared
            for argv in (ours, hta):
                proc = subprocess.run(
                    argv, cwd=REPO, env={**env, "HTA_DISABLE_NS_ROUNDING": "1"}, capture_output=True
                )
                if proc.returncode:
                    raise SystemExit(
                        f"exit {proc.returncode}: {' '.join(argv)}: {proc.stderr.decode()[-300:]}"
                    )
                answers.append(
                    json.loads(proc.stdout.decode().strip().splitlines()[-1] if argv is hta else proc.stdout)
                )
            a, b = [], []
            for _ in range(repeats):
                a.append(_timed(ours, env))
                b.append(_timed(hta, env))
            med = statistics.median
            results.append(
                {
                    "trace": str(trace),
                    "bytes": Path(trace).stat().st_size,
                    "repeats": repeats,
                    "sglops_wall_s": med(x[0] for x in a),
                    "hta_wall_s": med(x[0] for x in b),
                    "sglops_cpu_s": med(x[1] for x in a),
                    "hta_cpu_s": med(x[1] for x in b),
                    "speedup_wall": med(y[0] / x[0] for x, y in zip(a, b, strict=True)),
                    "speedup_cpu": med(y[1] / x[1] for x, y in zip(a, b, strict=True)),
                    "kernel_share_gap_points": kernel_shares_gap(*answers),
                    "exit_codes": sorted({x[2] for x in a} | {y[2] for y in b}),
                    "load": open("/proc/loadavg").read().split()[0],
                }
            )
            r = results[-1]
            gap = r["kernel_share_gap_points"]
            print(
                f"{Path(trace).name:45} sglops {r['sglops_wall_s']:.2f} s  HTA {r['hta_wall_s']:.2f} s  "
                f"-> {r['speedup_wall']:.1f}x wall, {r['speedup_cpu']:.1f}x CPU; kernel shares within "
                f"{'-' if gap is None else f'{gap:.3f}'} points (load {r['load']})",
                flush=True,
            )
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return {"python": sys.executable, "hta_python": hta_python, "results": results}


def cpu_analysis(repeats: int) -> dict:
    """The analysis of the real SGLang CPU trace alone (no process start-up), median of repeats."""
    from sglops.trace.analysis import analyze

    analyze([CPU_TRACE])
    cpu, wall = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        a = analyze([CPU_TRACE])
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {
        "trace": str(CPU_TRACE),
        "bytes": CPU_TRACE.stat().st_size,
        "events": a.files[0].events,
        "cpu_ops": a.cpu.ops,
        "repeats": repeats,
        "analysis_wall_s": statistics.median(wall),
        "analysis_cpu_s": statistics.median(cpu),
    }


def _hta_breakdown(path: str, work: str) -> dict[str, float]:
    from hta.trace_analysis import TraceAnalysis

    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink):
        ta = TraceAnalysis(trace_files={0: path}, trace_dir=work, include_last_profiler_step=True)
        _, kernels = ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=10**9, duration_ratio=1.0)
    return {row["name"]: float(row["sum (us)"]) for _, row in kernels.iterrows()}


def speed(repeats: int) -> dict:
    from sglops.trace.analysis import analyze

    logging.disable(logging.WARNING)
    work = tempfile.mkdtemp(prefix="sglops-bench-hta-")
    path = os.path.join(work, "rank0.trace.json.gz")
    shutil.copy(REAL, path)
    ours_s, hta_s = [], []
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    # warm imports and caches for both
    _hta_breakdown(path, work), analyze([path])
    for _ in range(repeats):
        t = time.perf_counter()
        ours = analyze([path])
        ours_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        hta = _hta_breakdown(path, work)
        hta_s.append(time.perf_counter() - t)
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "0"
    hta_rounded = _hta_breakdown(path, work)
    shutil.rmtree(work, ignore_errors=True)
    mine = {k: us for k, (us, _) in ours.by_kernel.items()}
    worst = max(abs(mine[k] - v) / v for k, v in hta.items() if v)
    return {
        "trace": str(REAL),
        "repeats": repeats,
        "sglops_s": statistics.median(ours_s),
        "hta_s": statistics.median(hta_s),
        "speedup": statistics.median(hta_s) / statistics.median(ours_s),
        "same_kernels": sorted(mine) == sorted(hta),
        "max_kernel_rel_diff": worst,
        "sglops_total_us": sum(mine.values()),
        "hta_total_us": sum(hta.values()),
        "hta_rounded_total_us": sum(hta_rounded.values()),
    }


# compact: orjson's one line per event; indent: 2-space indented, as torch spaces
LAYOUTS = ("compact", "indent")


def make_big(
    size_gb: float, source: Path = REAL, layout: str = "compact", reps: int | None = None
) -> tuple[Path, int]:
    """Replicate a real trace's events (ts shifted, correlation/External/flow ids offset) to size_gb, or to
    exactly `reps` copies. compact packs more events per GB than torch writes (torch's own files are 1.2-1.4x
    larger for the same events); indent is within 10% of torch's bytes per event on the CPU traces here
    (1.06-1.09x)."""
    import orjson

    if layout not in LAYOUTS:
        raise SystemExit(f"--layout {layout}: one of {', '.join(LAYOUTS)}")
    stem = "" if source == REAL else source.name.split(".")[0] + "-"
    size = f"x{reps}" if reps else f"{size_gb:g}g"
    out = (
        Path(tempfile.gettempdir())
        / f"sglops-bench-{stem}{size}{'' if layout == 'compact' else '-' + layout}.trace.json"
    )
    doc = orjson.loads(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    top = 0
    for e in events:
        a = e.get("args") or {}
        top = max(
            top,
            int(a.get("correlation", 0) or 0),
            int(a.get("External id", 0) or 0),
            int(e.get("id", 0) or 0) if isinstance(e.get("id"), int) else 0,
        )
    offset = top + 1
    target = int(size_gb * 2**30)
    option = orjson.OPT_INDENT_2 if layout == "indent" else 0
    header = orjson.dumps(doc)[:-1] + b', "traceEvents": [\n'
    marker = out.with_suffix(".reps")
    if out.exists() and marker.exists() and (reps or out.stat().st_size >= target):
        return out, json.loads(marker.read_text())
    tmp = out.with_name(out.name + ".tmp")
    done = 0
    with open(tmp, "wb") as fh:
        fh.write(header)
        written, first = len(header), True
        while (done < reps) if reps else (written < target):
            chunk = []
            for e in events:
                if e.get("ph") == "M" and done:
                    continue
                e2 = dict(e)
                if "ts" in e2 and isinstance(e2["ts"], int | float):
                    e2["ts"] = e2["ts"] + done * span
                if isinstance(e2.get("id"), int):
                    e2["id"] += done * offset
                if e2.get("args"):
                    a = dict(e2["args"])
                    for key in ("correlation", "External id"):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] += done * offset
                    e2["args"] = a
                chunk.append(orjson.dumps(e2, option=option))
            data = (b"" if first else b",\n") + b",\n".join(chunk)
            fh.write(data)
            written += len(data)
            first = False
            done += 1
        fh.write(b"\n]}\n")
    os.replace(tmp, out)
    marker.write_text(str(done))
    return out, done


def memory(size_gb: float, gz: bool = False) -> dict:
    from sglops.trace.analysis import analyze

    t = time.perf_counter()
    path, reps = make_big(size_gb)
    # the same events, gzipped as SGLang writes them (level 1: the bench's own time)
    if gz:
        zipped = path.with_name(path.name + ".gz")
        if not zipped.exists():
            with open(path, "rb") as src, gzip.open(str(zipped) + ".tmp", "wb", compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
            os.replace(str(zipped) + ".tmp", zipped)
        path = zipped
    made_s = time.perf_counter() - t
    one = analyze([REAL])
    code = (
        "import json, sys, time\nfrom sglops.trace.analysis import analyze\nt = time.perf_counter()\n"
        "a = analyze([sys.argv[1]])\n"
        "print(json.dumps({'s': time.perf_counter() - t, 'gpu_us': a.gpu_us, 'events': a.files[0].events,"
        " 'kernels': a.files[0].kernels, 'linked': a.files[0].linked, 'steps': len(a.steps),"
        " 'mm_us': a.by_op['aten::mm'][0]}))"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:])
    got = json.loads(proc.stdout)
    return {
        "trace": str(path),
        "bytes": path.stat().st_size,
        "replicas": reps,
        "made_s": made_s,
        **got,
        "peak_rss_mb": peak_kb / 1024,
        "earlier_children_peak_mb": before / 1024,
        "gpu_us_expected": one.gpu_us * reps,
        "mm_us_expected": one.by_op["aten::mm"][0] * reps,
    }


def diff(size_gb: float) -> dict:
    """`inv diff-trace A B` on two big traces (the whole-pool cast and the gather-cast H200 decode traces,
    each replicated to size_gb), as the operator runs it: wall time and peak RSS of the command."""
    a, reps_a = make_big(size_gb, TRACES / "h200_decode_fullcast.trace.json.gz")
    b, reps_b = make_big(size_gb, REAL)
    argv = [sys.executable, "-m", "invoke", "diff-trace", str(a), str(b), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-2000:] or proc.stdout[-2000:])
    doc = json.loads(proc.stdout)
    return {
        "a": str(a),
        "a_bytes": a.stat().st_size,
        "a_replicas": reps_a,
        "b": str(b),
        "b_bytes": b.stat().st_size,
        "b_replicas": reps_b,
        "wall_s": round(wall, 2),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "earlier_children_peak_mb": before / 1024,
        "headline": doc.get("headline") or doc.get("line"),
    }


def _tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc (Linux)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return out


def _sample_tree(proc: subprocess.Popen, every: float = 0.05) -> dict:
    """The largest sum, over one analysis' processes (parent + workers) alive at once, of RSS and of PSS
    (shared pages counted once across them), sampled every 50 ms until it exits."""
    top_rss = top_pss = top_private = 0
    while proc.poll() is None:
        rss = pss = 0
        for p in _tree(proc.pid):
            try:
                fields = dict(
                    line.split(":", 1)
                    for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines()[1:]
                )
            except (OSError, ValueError):
                continue
            kb = {k: int(v.split()[0]) for k, v in fields.items()}
            rss += kb.get("Rss", 0)
            pss += kb.get("Pss", 0)
            # a worker: the memory only it holds (what each more worker adds)
            if p != proc.pid:
                top_private = max(top_private, kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0))
        top_rss, top_pss = max(top_rss, rss), max(top_pss, pss)
        time.sleep(every)
    return {
        "together_rss_mb": round(top_rss / 1024, 1),
        "together_pss_mb": round(top_pss / 1024, 1),
        "worker_private_mb": round(top_private / 1024, 1),
    }


def parallel(size_gb: float, trace: str | None = None, force: bool = False) -> dict:
    """The reader sequential (SGLOPS_TRACE_WORKERS=1) then parallel (default workers), one fresh process each,
    on the 1 GB H200 replica (or `trace`): wall, CPU of parent + workers, parent and worker peak RSS, and
    whether the two analyses are byte-identical (sha256 of analysis JSON, the path left out). Notes the load
    average."""
    path = Path(trace) if trace else make_big(size_gb)[0]
    code = (
        "import hashlib, json, resource, sys, time\nfrom sglops.trace.analysis import analyze\nt ="
        " time.perf_counter()\na = analyze([sys.argv[1]])\ns = time.perf_counter() - t\ndoc ="
        " a.to_json()\n[f.pop('path', None) for f in doc['files']]\nme, kids ="
        " resource.getrusage(resource.RUSAGE_SELF),"
        " resource.getrusage(resource.RUSAGE_CHILDREN)\nprint(json.dumps({'s': round(s, 2), 'cpu_s':"
        " round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 2), 'parent_peak_mb':"
        " round(me.ru_maxrss / 1024, 1), 'workers_peak_mb': round(kids.ru_maxrss / 1024, 1), 'events':"
        " a.files[0].events, 'sha256': hashlib.sha256(json.dumps(doc,"
        " sort_keys=True).encode()).hexdigest()}))"
    )
    # files under the size threshold read in parallel too (identity checks on small replicas)
    if force:
        code = "import sglops.trace.parse as P\nP.PARALLEL_MIN_BYTES = 0\n" + code
    out: dict = {"trace": str(path), "bytes": path.stat().st_size, "load_before": os.getloadavg()}
    for label, workers in (("sequential", "1"), ("parallel", "")):
        env = {**os.environ, "PYTHONPATH": str(REPO), "SGLOPS_TRACE_WORKERS": workers}
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        together = _sample_tree(proc)
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(stderr[-2000:])
        out[label] = {**json.loads(stdout), **together}
    out["identical"] = out["sequential"]["sha256"] == out["parallel"]["sha256"]
    out["load_after"] = os.getloadavg()
    return out


def small(before: str, repeats: int) -> dict:
    """What a small trace pays for the parallel reader's checks: `analyze` of a test-data CPU trace (gzipped
    as kept, and gunzipped) in fresh processes, this checkout vs `before` (another checkout), interleaved;
    medians (ms, imports included)."""
    src = TRACES / "sglang-cpu-nostack-TP-0.trace.json.gz"
    plain = Path(tempfile.gettempdir()) / "sglops-bench-small.trace.json"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    code = (
        "import sys, time\nt, c = time.perf_counter(), time.process_time()\nfrom sglops.trace.analysis import"
        " analyze\nanalyze([sys.argv[1]])\nprint(time.perf_counter() - t, time.process_time() - c)"
    )
    runs: dict[str, list[list[float]]] = {}
    out: dict = {"load_before": os.getloadavg()}
    for _ in range(repeats):
        for label, tree in (("before", before), ("after", str(REPO))):
            for kind, path in (("gz", src), ("plain", plain)):
                proc = subprocess.run(
                    [sys.executable, "-c", code, str(path)],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": tree},
                    check=True,
                )
                runs.setdefault(f"{label}_{kind}", []).append([float(x) * 1000 for x in proc.stdout.split()])
    for key, rows in runs.items():
        out[key] = {
            "wall_ms": round(statistics.median(r[0] for r in rows), 1),
            "cpu_ms": round(statistics.median(r[1] for r in rows), 1),
            "wall_ms_range": [round(min(r[0] for r in rows), 1), round(max(r[0] for r in rows), 1)],
        }
    out["load_after"] = os.getloadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["command", "cpu", "speed", "memory", "diff", "parallel", "small"])
    ap.add_argument("--force", action="store_true", help="parallel: below the size threshold too")
    ap.add_argument("--before", help="small: the checkout to compare with (e.g. a worktree of main)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--gzip", action="store_true", help="memory: analyse a gzipped copy of the big trace")
    ap.add_argument(
        "--hta-python", default=sys.executable, help="command: a python with holistictraceanalysis"
    )
    ap.add_argument("--trace", action="append", help="command: a trace to time (repeatable)")
    ap.add_argument(
        "--all-traces", action="store_true", help="command: every real trace in tests/data/traces"
    )
    args = ap.parse_args()
    if args.part == "command":
        every = sorted(str(p) for p in TRACES.glob("*.trace.json.gz")) if args.all_traces else None
        res = command(
            args.hta_python,
            every or args.trace or [str(CPU_TRACE), str(_largest_gpu_trace())],
            args.repeats or 7,
        )
    elif args.part == "cpu":
        res = cpu_analysis(args.repeats or 9)
    elif args.part == "speed":
        res = speed(args.repeats or 5)
    elif args.part == "diff":
        res = diff(args.size_gb)
    elif args.part == "small":
        if not args.before:
            raise SystemExit("small: --before CHECKOUT is required (the tree to compare this one with)")
        res = small(args.before, args.repeats or 15)
    elif args.part == "parallel":
        res = parallel(args.size_gb, args.trace[0] if args.trace else None, args.force)
    else:
        res = memory(args.size_gb, args.gzip)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
