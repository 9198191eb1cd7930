"""The cost of Python stacks in a trace: parse time and memory of a stack trace vs the same workload without.

    # real SGLang CPU server, 2 traces
    python3 benchmarks/bench_trace_stack.py capture [--out DIR] [--steps 20]
    # parse + analyse each, own process
    python3 benchmarks/bench_trace_stack.py measure [--repeats 5] [--a T --b T]
    # stack vs not, 1 GB
    python3 benchmarks/bench_trace_stack.py big [--size-gb 1.0] [--gzip] [--layout compact|indent]
    # memory per stage of one analysis
    python3 benchmarks/bench_trace_stack.py stages TRACE

capture: starts the real SGLang 0.5.23 CPU server (sglops.sandbox.sglang_cpu, loopback only), then twice the
same workload: `POST /start_profile {"activities": ["CPU"], "num_steps": N, "with_stack": S, "record_shapes":
false}` and one `/generate` of 32 input ids, 32 new tokens, temperature 0, `ignore_eos`; S = true, then false.
The files are written as `sglang-cpu-stack-TP-0.trace.json.gz` and `sglang-cpu-nostack-TP-0.trace.json.gz`
(the test data's names). The server is always stopped.
measure: each trace analysed in a child process (`sglops.trace.analyze`, the whole analysis incl. source
lines), wall time of the analysis, the process's CPU time (user + sys, start-up included) and peak RSS
(getrusage(RUSAGE_CHILDREN) of a fresh child), medians. CPU time is the figure to compare on a loaded machine.
big: the stack cost at scale in one run: the stack trace (--a) replicated (ts, ids shifted) to --size-gb of
plain JSON, the no-stack trace of the same workload (--b) replicated as many times, and --b replicated to
--size-gb; each analysed in a child: time, CPU, peak RSS, against the parser's goals (< 300 MB peak, < 20 s),
and the ratios. --layout compact (orjson, one line per event: more events per GB than torch writes) or indent
(about torch's bytes). stages TRACE: RSS and peak per stage of one analysis (read, breakdown, CPU view), with
the columns' own bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TRACES = REPO / "tests" / "data" / "traces"
STACK = TRACES / "sglang-cpu-stack-TP-0.trace.json.gz"
NOSTACK = TRACES / "sglang-cpu-nostack-TP-0.trace.json.gz"


def _post(url: str, body: dict, timeout: float = 300) -> dict | str:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _wait_file(folder: Path, timeout: float = 300) -> Path:
    """The one trace file the profiler writes, once its gzip stream is complete."""
    import gzip

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in folder.glob("*.trace.json.gz"):
            try:
                with gzip.open(f) as fh:
                    while fh.read(1 << 20):
                        pass
                return f
            except (EOFError, OSError):
                pass
        time.sleep(1)
    raise SystemExit(f"no complete trace in {folder} after {timeout:g} s")


def capture(out: Path, steps: int) -> dict:
    from sglops.sandbox.sglang_cpu import start_server
    from sglops.sandbox.sshd import free_port

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sglops-stack-"))
    # ordinary ids of the tiny model's 1024-token vocabulary
    ids = [(7 * i + 11) % 1000 + 3 for i in range(32)]
    done = {}
    with start_server(free_port(), work / "server.log", timeout=400) as server:
        # warm-up
        _post(f"{server.url}/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 4}})
        for label, stack in (("stack", True), ("nostack", False)):
            folder = work / label
            folder.mkdir()
            _post(
                f"{server.url}/start_profile",
                {
                    "output_dir": str(folder),
                    "activities": ["CPU"],
                    "num_steps": steps,
                    "with_stack": stack,
                    "record_shapes": False,
                    "profile_prefix": label,
                    "profile_id": "real",
                },
            )
            t = time.perf_counter()
            _post(
                f"{server.url}/generate",
                {
                    "input_ids": ids,
                    "sampling_params": {"max_new_tokens": 32, "temperature": 0, "ignore_eos": True},
                },
            )
            src = _wait_file(folder)
            target = out / f"sglang-cpu-{label}-TP-0.trace.json.gz"
            os.replace(src, target)
            done[label] = {
                "file": str(target),
                "bytes": target.stat().st_size,
                "s": round(time.perf_counter() - t, 1),
            }
    return done


CHILD = (
    "import json, sys, time\nt = time.perf_counter()\nfrom sglops.trace.analysis import analyze\na ="
    " analyze([sys.argv[1]])\ns = time.perf_counter() - t\nprint(json.dumps({'s': s, 'events':"
    " a.files[0].events, 'frames': a.frames, 'ops': a.cpu.ops if a.cpu else 0, 'top_line':"
    " (a.sources[0]['label'] if a.sources else None)}))"
)


def _child(path: Path) -> dict:
    """One analysis in a fresh process: its wall time and peak RSS."""
    # a grandchild, so RUSAGE_CHILDREN is this analysis alone
    code = "import resource, subprocess, sys\n"
    code += (
        "p = subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], capture_output=True,"
        " text=True)\nsys.stderr.write(p.stderr)\nprint(p.stdout.strip())\nu ="
        " resource.getrusage(resource.RUSAGE_CHILDREN)\nprint(u.ru_maxrss, u.ru_utime +"
        " u.ru_stime)\nsys.exit(p.returncode)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, CHILD, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    doc_line, usage = proc.stdout.strip().splitlines()[-2:]
    rss, cpu = usage.split()
    return {**json.loads(doc_line), "peak_rss_mb": int(rss) / 1024, "cpu_s": round(float(cpu), 2)}


def measure(a: Path, b: Path, repeats: int) -> dict:
    """Stack vs no-stack trace, interleaved, medians of `repeats` fresh processes each."""
    runs: dict[str, list[dict]] = {"stack": [], "nostack": []}
    for _ in range(repeats):
        runs["stack"].append(_child(a))
        runs["nostack"].append(_child(b))
    out = {}
    for label, path in (("stack", a), ("nostack", b)):
        rows = runs[label]
        out[label] = {
            "file": path.name,
            "gz_bytes": path.stat().st_size,
            "events": rows[0]["events"],
            "frames": rows[0]["frames"],
            "top_line": rows[0]["top_line"],
            "median_s": round(statistics.median(r["s"] for r in rows), 3),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in rows), 3),
            "median_peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in rows), 1),
        }
    out["ratio_s"] = round(out["stack"]["median_s"] / out["nostack"]["median_s"], 2)
    out["ratio_rss"] = round(out["stack"]["median_peak_rss_mb"] / out["nostack"]["median_peak_rss_mb"], 2)
    return out


def _gzipped(path: Path) -> Path:
    """A gzip (level 1) copy of a generated trace, made once."""
    import gzip
    import shutil

    zipped = path.with_name(path.name + ".gz")
    if not zipped.exists():
        with open(path, "rb") as src, gzip.open(str(zipped) + ".tmp", "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        os.replace(str(zipped) + ".tmp", zipped)
    return zipped


def big(
    size_gb: float, gz: bool, stack: Path = STACK, nostack: Path = NOSTACK, layout: str = "compact"
) -> dict:
    """The stack cost at scale, in one run: the stack trace replicated to size_gb; the no-stack trace of the
    same workload replicated as many times (the same steps, without frames); the no-stack trace replicated to
    size_gb (the most CPU ops a GB holds). Each analysed in a fresh process: wall, CPU and peak RSS, against
    the parser's goals (< 300 MB, < 20 s)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_trace import make_big

    s_path, reps = make_big(size_gb, stack, layout)
    same, _ = make_big(0, nostack, layout, reps=reps)
    n_path, n_reps = make_big(size_gb, nostack, layout)
    rows = {}
    for label, path, copies in (
        ("stack", s_path, reps),
        ("nostack_same_workload", same, reps),
        ("nostack_same_bytes", n_path, n_reps),
    ):
        path = _gzipped(path) if gz else path
        got = _child(path)
        # the goal by wall time since the reader runs in parallel processes (cpu_s sums parent and workers, so
        # it no longer bounds the wait); the load beside it, as a shared machine's wall time is partly the
        # neighbours'
        load = os.getloadavg()[0]
        rows[label] = {
            "trace": str(path),
            "bytes": path.stat().st_size,
            "replicas": copies,
            **got,
            "load1": round(load, 2),
            "goal_met": got["peak_rss_mb"] < 300 and got["s"] < 20,
        }
    s, n = rows["stack"], rows["nostack_same_workload"]
    rows["stack_cost"] = {
        "bytes": round(s["bytes"] / n["bytes"], 2),
        "cpu_s": round(s["cpu_s"] / n["cpu_s"], 2),
        "wall_s": round(s["s"] / n["s"], 2),
        "peak_rss_mb": round(s["peak_rss_mb"] / n["peak_rss_mb"], 2),
    }
    rows["layout"] = layout
    return rows


def stages(path: Path) -> dict:
    """Where one analysis' memory goes: RSS after each stage and the peak during it (VmHWM reset per stage
    through /proc/self/clear_refs, Linux), with its CPU time. Run in this process: start it fresh."""
    from sglops.trace.analysis import _launching_thread
    from sglops.trace.breakdown import breakdown, cpu_only_breakdown
    from sglops.trace.cpu import cpu_view
    from sglops.trace.parse import read

    def mem() -> tuple[int, int]:
        with open("/proc/self/status") as fh:
            f = dict(line.split(":", 1) for line in fh)
        return int(f["VmRSS"].split()[0]) // 1024, int(f["VmHWM"].split()[0]) // 1024

    out, state = {}, {}

    # the parallel reader's workers, once it has waited for them
    def kids() -> float:
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        return u.ru_utime + u.ru_stime

    def stage(name, fn):
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        c, k, w = time.process_time(), kids(), time.perf_counter()
        state[name] = fn()
        rss, peak = mem()
        out[name] = {
            "rss_mb": rss,
            "peak_mb": peak,
            "cpu_s": round(time.process_time() - c, 2),
            "workers_cpu_s": round(kids() - k, 2),
            "wall_s": round(time.perf_counter() - w, 2),
            "workers_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
        }

    out["start"] = dict(zip(("rss_mb", "peak_mb"), mem(), strict=True))
    stage("read", lambda: read(path))
    raw = state["read"]
    out["columns"] = {
        "ops": len(raw.o_ts),
        "frames": len(raw.p_ts),
        "kernels": len(raw.k_ts),
        "launches": len(raw.l_ts),
        "names": len(raw.names),
        "bytes": sum(
            getattr(raw, c).itemsize * len(getattr(raw, c))
            for c in raw.__dataclass_fields__
            if c[:2] in ("k_", "l_", "o_", "g_", "p_")
        ),
    }
    stage("breakdown", lambda: breakdown(raw) if len(raw.k_ts) else cpu_only_breakdown(raw))
    stage("cpu_view", lambda: cpu_view(raw, main_thread=_launching_thread(raw)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["capture", "measure", "big", "stages"])
    ap.add_argument("trace", nargs="?", type=Path, help="stages: the trace to follow")
    ap.add_argument("--out", type=Path, default=TRACES)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--a", type=Path, default=STACK)
    ap.add_argument("--b", type=Path, default=NOSTACK)
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument(
        "--layout", default="compact", help="big: compact (orjson, densest) or indent (~torch's bytes)"
    )
    args = ap.parse_args()
    if args.part == "capture":
        doc = capture(args.out, args.steps)
    elif args.part == "measure":
        doc = measure(args.a, args.b, args.repeats)
    elif args.part == "stages":
        if not args.trace or not args.trace.is_file():
            raise SystemExit(f"stages: no trace file {args.trace or ''}".strip())
        doc = stages(args.trace)
    else:
        doc = big(args.size_gb, args.gzip, args.a, args.b, args.layout)
    print(json.dumps(doc, indent=2))
    print(
        "peak RSS of this process's children:"
        f" {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
