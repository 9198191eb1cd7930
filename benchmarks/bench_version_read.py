"""Benchmark: the host side of `inv facts` (its remote script, as a GPU host runs it) on a release checkout
and on a pip-installed tree, this repo's scripts vs another checkout's (e.g. the commit before a change).

Reading the release from real installs (version file, dist-info METADATA, `git describe`) must not make
the facts round trip slower. Each sample is one host python process running the facts script's main()
N times (stdlib python, as on a host); A and B alternate (A B, B A, ...) so drift and order hit both alike.

Run: git worktree add /tmp/before <commit>; python3 benchmarks/bench_version_read.py --vs /tmp/before
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.sandbox import trees  # noqa: E402
from sglops.sandbox.sshd import HOST_PYTHON  # noqa: E402

RUNNER = """import binascii, importlib, importlib.machinery as m, json, sys, zlib
d = json.load(open(sys.argv[1]))
if "script" in d:  # a checkout from before the host bundle: the script with its helpers prepended
    g = {"__name__": "sglops_remote"}
    exec(compile(d["script"], "facts.py", "exec"), g)
    main = g["main"]
else:  # the bundle, imported as BOOTSTRAP imports it on a host
    P, W = d["package"], d["where"]
    S = json.loads(zlib.decompress(binascii.a2b_base64(d["bundle"])))
    exec(d["finder"])
    main = importlib.import_module(P + ".facts").main
for _ in range(int(sys.argv[2])):
    main(d["args"])
"""
SENDER = """import json, sys
try:
    from sglops.core import host_bundle as h
except ImportError:
    from sglops.host import load_script
    json.dump({"script": load_script("facts")}, sys.stdout)
else:
    json.dump({"bundle": h.bundle("facts"), "finder": h.FINDER, "package": h.PACKAGE, "where": h.WHERE}, sys.stdout)
"""


def children_cpu_s() -> float:
    """User + system seconds of every finished child (the host python and the git/nvcc/rg it ran)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def payload(repo: Path, root: Path, out: Path) -> Path:
    """The facts script as `repo` would send it (its bundle, or before that its includes prepended), with args."""
    sent = subprocess.run([sys.executable, "-c", SENDER], cwd=repo, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}).stdout
    out.write_text(json.dumps({**json.loads(sent), "args": {"sglang_root": str(root)}}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vs", type=Path, required=True, help="another sglops checkout (the baseline)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--calls", type=int, default=20, help="facts calls per host process")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        runner = t / "run.py"
        runner.write_text(RUNNER)
        layouts = {"checkout 0.5.15": trees.make_sglang_checkout("0.5.15", t / "checkout"),
                   "pip-installed 0.5.15": trees.make_installed_sglang("0.5.15", t / "site").parent}
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(trees.flashinfer_site("0.7.2"))}
        for name, root in layouts.items():
            files = {"A (this repo)": payload(REPO, root, t / "a.json"), "B (--vs)": payload(args.vs, root, t / "b.json")}
            per_call: dict[str, list[float]] = {k: [] for k in files}
            cpu_per_call: dict[str, list[float]] = {k: [] for k in files}
            for i in range(args.repeats + 1):  # the first pair warms the page cache and is not counted
                for label, path in sorted(files.items(), reverse=bool(i % 2)):  # A B, B A, ...: no order bias
                    cpu0, start = children_cpu_s(), time.perf_counter()
                    subprocess.run([HOST_PYTHON, str(runner), str(path), str(args.calls)], env=env, check=True)
                    if i:
                        per_call[label].append((time.perf_counter() - start) / args.calls * 1000)
                        cpu_per_call[label].append((children_cpu_s() - cpu0) / args.calls * 1000)
            for what, table in (("wall", per_call), ("cpu", cpu_per_call)):
                a, b = (statistics.median(v) for v in table.values())
                ratios = [x / y for x, y in zip(*table.values(), strict=True)]
                print(f"{name}, {what}: A {a:.1f} ms/call, B {b:.1f} ms/call, A/B median {statistics.median(ratios):.2f} "
                      f"(min {min(ratios):.2f}, max {max(ratios):.2f}; {args.repeats} x {args.calls} calls each)")


if __name__ == "__main__":
    main()
