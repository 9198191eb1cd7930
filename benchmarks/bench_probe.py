"""Benchmark: `inv probe-backends` on the real sglang 0.5.23 tree over SSH (target: <= 1.5x of one bare
`ssh host true` round trip + the same scan run locally), and the by-hand way (one ssh call per pattern
per file), sampled and extrapolated.

Real sshd sandbox host on loopback. Cold = a fresh SSH connection per measurement, as a task and as
`ssh host true` do; warm = one open connection (one extra exec). Interleaved, medians.
Run: python3 benchmarks/bench_probe.py [--repeats 7] [--sample 40] [--out results.json]
     python3 benchmarks/bench_probe.py --host-cpu [--repeats 5]: the host's CPU for one probe (the script
     and the rg and git it starts) before the linear import scan and the tree cache, now (a miss, a hit), and
     the same greps run alone.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.core.hosts import Host, load_inventory  # noqa: E402
from sglops.core.remote import LocalRemote, connect, shell_command  # noqa: E402
from sglops.probe.scan import scan
from sglops.probe.spec import load_probe_set
from sglops.sandbox import trees  # noqa: E402
from sglops.sandbox.sshd import HOST_PYTHON, Sandbox  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SETS = {"default": REPO / "playbooks" / "probes.yaml", "tree": REPO / "playbooks" / "probes-tree.yaml"}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def by_hand_pairs(probe_set, pkg: Path, fi_pkg: Path) -> list[tuple[str, str]]:
    """(pattern, file) for every probe and every file it reads: what grepping file by file means."""
    pairs = []
    for p in probe_set.probes:
        root = pkg if p.root == "sglang" else fi_pkg
        globs = [probe_set.backend_files] if p.scope == "backend" else list(p.files)
        files = sorted(
            {
                os.path.normpath(f)
                for g in globs
                for f in glob.glob(str(root / g), recursive=True)
                if os.path.isfile(f)
            }
        )
        pattern = p.regex or "|".join(re.escape(o) for o in p.options)
        pairs += [(pattern, f) for f in files]
    return pairs


# -- the host's CPU for one probe: the script before this change, now (a miss, a hit) and the greps alone
# ------------ the commit before probe_scan's linear import scan and tree cache
BEFORE = "8eb4a61"
RUN_MAIN = (
    "import sys, json\nsys.path.insert(0, sys.argv[1])\nfrom sglops_host import probe_scan\n"
    "probe_scan.main(json.load(sys.stdin))\n"
)
RUN_JOBS = (
    "import sys, json\nsys.path.insert(0, sys.argv[1])\nfrom sglops_host import probe_scan as p\n"
    "from sglops_host._common import find_sglang, flashinfer_info\n"
    "a = json.load(sys.stdin); fi = flashinfer_info()\n"
    "roots = {'sglang': find_sglang(a['sglang_root'])['package_dir'], 'flashinfer': fi and fi['location']}\n"
    "jobs, _ = p._plan(a, roots, p._glob_files(roots['sglang'], [a['backends']['files']]), p._Files(), [])\n"
    "print(json.dumps(jobs))\n"
)


def _host_package(dest: Path, commit: str | None) -> Path:
    """sglops/host as a package named sglops_host (as on a host), from the work tree or from a commit."""
    pkg = dest / "sglops_host"
    pkg.mkdir(parents=True)
    for src in sorted((REPO / "sglops" / "host").glob("*.py")):
        text = (
            src.read_text()
            if commit is None
            else subprocess.run(
                ["git", "show", f"{commit}:sglops/host/{src.name}"], cwd=REPO, capture_output=True, text=True
            ).stdout
        )
        (pkg / src.name).write_text(text)
    return dest


def _child_cpu(argv: list[str], stdin: bytes, env: dict) -> float:
    before = os.times()
    subprocess.run(argv, input=stdin, env=env, capture_output=True, check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def host_cpu(repeats: int) -> dict:
    """CPU (the script and everything it starts: rg, git)
    of one probe with the default set on the 0.5.23 tree."""
    ps = load_probe_set(SETS["default"])
    root = trees.sglang_template("0.5.23") / "python"
    args = {
        "sglang_root": str(root),
        "engine": "rg",
        "backends": {"files": ps.backend_files},
        "probes": [p.to_wire() for p in ps.probes],
        "model_path": None,
        "gpus": False,
    }
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(trees.flashinfer_site("0.7.2")),
            "XDG_CACHE_HOME": f"{tmp}/cache",
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        old, new = _host_package(Path(tmp, "old"), BEFORE), _host_package(Path(tmp, "new"), None)
        jobs = json.loads(
            subprocess.run(
                [sys.executable, "-c", RUN_JOBS, str(new)],
                input=json.dumps(args).encode(),
                env=env,
                capture_output=True,
                check=True,
            ).stdout
        )
        greps = [
            ["rg", "--json", "--no-config", "-a", "-e", j["regex"], "--", *j["paths"]]
            for j in jobs
            if j["paths"]
        ]
        cases = {
            "before": ([sys.executable, "-c", RUN_MAIN, str(old)], {**args, "cache": False}),
            "now, cache miss": ([sys.executable, "-c", RUN_MAIN, str(new)], {**args, "cache": False}),
            "now, cache hit": ([sys.executable, "-c", RUN_MAIN, str(new)], {**args, "cache": True}),
        }
        # fill the cache
        _child_cpu(cases["now, cache hit"][0], json.dumps(cases["now, cache hit"][1]).encode(), env)
        rows: dict = {k: [] for k in [*cases, "the greps alone", "python3 -c pass"]}
        for _ in range(repeats):
            for name, (argv, a) in cases.items():
                rows[name].append(_child_cpu(argv, json.dumps(a).encode(), env))
            before = os.times()
            for g in greps:
                subprocess.run(g, env=env, capture_output=True)
            after = os.times()
            rows["the greps alone"].append(
                (after.children_user - before.children_user)
                + (after.children_system - before.children_system)
            )
            rows["python3 -c pass"].append(_child_cpu([sys.executable, "-c", "pass"], b"", env))
    med = {k: statistics.median(v) for k, v in rows.items()}
    for k, v in med.items():
        print(f"host CPU, {k:18}: {v * 1000:5.0f} ms  ({v / med['the greps alone']:.2f}x the greps)")
    return {
        "repeats": repeats,
        "greps": len(greps),
        "cpu_s": med,
        "runs": rows,
        "load": open("/proc/loadavg").read().split()[:3],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sample", type=int, default=40, help="by-hand calls actually made (then extrapolated)")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument(
        "--host-cpu", action="store_true", help="only: the host's CPU for one probe, before and now"
    )
    args = ap.parse_args()
    if args.host_cpu:
        figures = host_cpu(args.repeats)
        if args.out:
            Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
        return
    figures: dict = {"repeats": args.repeats, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox(Path(tmp), [{"name": "b523", "sglang": "0.5.23", "flashinfer": "0.7.2"}]).start()
        try:
            inv = load_inventory(sb.inventory)
            host = inv.get("b523")
            sbh = sb.host("b523")
            env_pp = str(trees.flashinfer_site("0.7.2"))
            # the local run sees the same FlashInfer as the host
            os.environ["PYTHONPATH"] = env_pp
            local = LocalRemote(
                Host(name="local", address="local", python=HOST_PYTHON, sglang_root=str(sbh.sglang_root))
            )

            def cold(step):
                with connect(host, inventory=inv) as r:
                    step(r)

            warm = connect(host, inventory=inv)
            for name, path in SETS.items():
                ps = load_probe_set(path)
                # warm page cache and pyc once
                scan(warm, ps), scan(local, ps), warm.run(["true"])
                rows = {k: [] for k in ("probe_cold", "true_cold", "probe_warm", "true_warm", "local")}
                # interleaved so load drift hits all alike
                for _ in range(args.repeats):
                    rows["probe_cold"].append(timed(lambda ps=ps: cold(lambda r: scan(r, ps))))
                    rows["true_cold"].append(timed(lambda: cold(lambda r: r.run(["true"]))))
                    rows["probe_warm"].append(timed(lambda ps=ps: scan(warm, ps)))
                    rows["true_warm"].append(timed(lambda: warm.run(["true"])))
                    rows["local"].append(timed(lambda ps=ps: scan(local, ps)))
                med = {k: statistics.median(v) for k, v in rows.items()}
                figures["sets"][name] = {
                    "medians_s": med,
                    "runs_s": rows,
                    "ratio_cold": med["probe_cold"] / (med["true_cold"] + med["local"]),
                    "ratio_warm": med["probe_warm"] / (med["true_warm"] + med["local"]),
                }

            # -- by hand: one `ssh host grep -nP PATTERN FILE` per pattern per file ------------------
            ps = load_probe_set(SETS["default"])
            pkg = sbh.sglang_root / "python" / "sglang"
            pairs = by_hand_pairs(ps, pkg, trees.flashinfer_site("0.7.2") / "flashinfer")
            sample = random.Random(0).sample(pairs, min(args.sample, len(pairs)))
            ssh = [
                "ssh",
                "-F",
                "/dev/null",
                "-p",
                str(sbh.port),
                "-i",
                str(sb.client_key),
                "-o",
                "BatchMode=yes",
                "-o",
                f"UserKnownHostsFile={sb.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                f"{host.user}@127.0.0.1",
            ]
            cli = [
                timed(
                    lambda p=p, f=f: subprocess.run(
                        [*ssh, shell_command(["grep", "-nP", p, f])], capture_output=True, check=False
                    )
                )
                for p, f in sample
            ]
            exec_ = [timed(lambda p=p, f=f: warm.run(["grep", "-nP", p, f], check=False)) for p, f in sample]
            warm.close()
            default = figures["sets"]["default"]["medians_s"]
            figures["by_hand"] = {
                "pairs": len(pairs),
                "sampled": len(sample),
                "ssh_cli_mean_s": statistics.mean(cli),
                "open_conn_exec_mean_s": statistics.mean(exec_),
                "ssh_cli_extrapolated_s": statistics.mean(cli) * len(pairs),
                "open_conn_extrapolated_s": statistics.mean(exec_) * len(pairs),
                "ratio_vs_probe_cold": statistics.mean(cli) * len(pairs) / default["probe_cold"],
                "ratio_open_conn_vs_probe_warm": statistics.mean(exec_) * len(pairs) / default["probe_warm"],
            }
        finally:
            sb.stop()
    for name, s in figures["sets"].items():
        m = s["medians_s"]
        print(
            f"[{name}] probe over SSH cold {m['probe_cold'] * 1000:.0f} ms vs ssh true"
            f" {m['true_cold'] * 1000:.0f} ms + local scan {m['local'] * 1000:.0f} ms ->"
            f" {s['ratio_cold']:.2f}x (target <= 1.5x)"
        )
        print(
            f"[{name}] probe over SSH warm {m['probe_warm'] * 1000:.0f} ms vs exec true"
            f" {m['true_warm'] * 1000:.0f} ms + local scan {m['local'] * 1000:.0f} ms ->"
            f" {s['ratio_warm']:.2f}x"
        )
    b = figures["by_hand"]
    print(
        f"[by hand] {b['pairs']} (pattern, file) greps; sampled {b['sampled']}: ssh CLI"
        f" {b['ssh_cli_mean_s'] * 1000:.0f} ms each -> {b['ssh_cli_extrapolated_s']:.1f} s"
        f" ({b['ratio_vs_probe_cold']:.0f}x the probe); on an open connection"
        f" {b['open_conn_exec_mean_s'] * 1000:.1f} ms each -> {b['open_conn_extrapolated_s']:.1f} s"
        f" ({b['ratio_open_conn_vs_probe_warm']:.0f}x the warm probe)"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
