"""Benchmark: host code sent as a bundle (sglops/core/host_bundle.py) vs the text-concatenated scripts before it.

Bytes: what run_py writes to the host's stdin per script, before (`# sglops: include` helpers prepended, plain
JSON; the scripts as they are at --before) and now (the script and the modules it imports, zlib'd JSON, base64).
Time: one run_py round trip to a real sandbox sshd host, plain loopback and through the hostile-network proxy
(50 ms +- 10 ms each way, 100 Mbit/s, random pieces), old and new alternated (A B, B A, ...) on one connection;
the old way runs the --before sources with the old bootstrap, kept here only to measure it (not an option of
sglops). Both must give the same answer. Steps: `server_inspect` on a missing tree (transport, start-up and import
of the script, then a UserError: the floor of every step) and `facts` (a whole real step).

Run: python3 benchmarks/bench_bundle.py [--before REV] [--calls 15] [--network both|hostile|none]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.core import host_bundle, remote  # noqa: E402
from sglops.core.errors import RemoteError  # noqa: E402
from sglops.core.hosts import load_inventory  # noqa: E402
from sglops.sandbox.sshd import Sandbox  # noqa: E402

NETWORK = {"delay_ms": 50, "jitter_ms": 10, "max_chunk": 1448, "rate_mbit": 100, "buffer": 131072, "seed": 13}
SCRIPTS = ["bench_client", "facts", "kernel_build", "patch_capture", "patch_state", "patch_txn", "probe_scan",
           "profile_capture", "server_inspect", "server_restart", "server_status"]

# The bootstrap run_py used before the bundle (sglops/core/remote.py at --before), for the old way only.
OLD_BOOTSTRAP = (
    "import sys,json,traceback\n"
    "e=json.loads(sys.stdin.buffer.read())\n"
    "g={'__name__':'__sglops_remote__','__file__':e['name']}\n"
    "try:\n"
    " exec(compile(e['script'],e['name'],'exec'),g)\n"
    " r={'ok':True,'result':g['main'](e['args'])}\n"
    "except BaseException as x:\n"
    " r={'ok':False,'user':type(x).__name__=='UserError','error':str(x) or type(x).__name__,\n"
    "    'type':type(x).__name__,'traceback':traceback.format_exc()}\n"
    "sys.stdout.write('\\n" + host_bundle.RESULT_MARKER + "'+json.dumps(r)+'\\n')\n"
    "sys.stdout.flush()\n"
)


def old_source(rev: str, name: str, cache: dict) -> str:
    """The script as run_py sent it at `rev`: its `# sglops: include` helpers prepended."""
    if name not in cache:
        text = subprocess.run(["git", "show", f"{rev}:sglops/host/{name}.py"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout
        first = text.splitlines()[0] if text else ""
        parts = []
        if first.startswith("# sglops: include "):
            parts = [old_source(rev, inc.strip(), cache) for inc in first.removeprefix("# sglops: include ").split(",")]
        cache[name] = "\n\n".join([*parts, text])
    return cache[name]


def old_payload(rev: str, name: str, args: dict, cache: dict) -> bytes:
    return json.dumps({"name": f"{name}.py", "script": old_source(rev, name, cache), "args": args}).encode()


def sizes(rev: str) -> list[dict]:
    cache: dict = {}
    rows = []
    for name in SCRIPTS:
        old = len(old_payload(rev, name, {}, cache))
        new = len(host_bundle.payload(name, {}))
        rows.append({"script": name, "old_bytes": old, "new_bytes": new, "new/old": round(new / old, 3),
                     "modules": list(host_bundle.modules(name))})
    return rows


def answer(r: remote.Remote, command: str, data: bytes) -> tuple[float, dict]:
    """One round trip: (seconds, the host's answer without its traceback)."""
    start = time.perf_counter()
    result = r._exec(command, data, 120, None)
    seconds = time.perf_counter() - start
    parsed = remote._parse_answer(result)
    assert parsed is not None, result.stdout[-500:] + result.stderr[-500:]
    parsed.pop("traceback", None)  # line numbers differ: the old way counted the prepended helpers
    return seconds, parsed


def timings(r: remote.Remote, rev: str, calls: int) -> dict:
    cache: dict = {}
    out = {}
    cases = {"server_inspect (missing tree: the floor)": ("server_inspect", {"sglang_root": "/nonexistent"}),
             "facts (a whole step)": ("facts", {"sglang_root": r.host.sglang_root})}
    old_cmd = remote.shell_command([r.python, "-c", OLD_BOOTSTRAP], timeout=60)
    new_cmd = remote.shell_command([r.python, "-c", host_bundle.BOOTSTRAP], timeout=60)
    for label, (script, args) in cases.items():
        old_data = old_payload(rev, script, args, cache)
        new_data = host_bundle.payload(script, args)
        times: dict[str, list[float]] = {"old": [], "new": []}
        for i in range(calls + 1):  # the first pair warms up and is not counted
            order = [("old", old_cmd, old_data), ("new", new_cmd, new_data)]
            answers = {}
            for way, cmd, data in order if i % 2 else reversed(order):
                seconds, answers[way] = answer(r, cmd, data)
                if i:
                    times[way].append(seconds * 1000)
            if script == "facts":  # timing fields differ from call to call; the facts themselves must not
                for a in answers.values():
                    a.get("result", {}).pop("seconds", None)
            assert answers["old"] == answers["new"], (answers["old"], answers["new"])
        ratios = [n / o for n, o in zip(times["new"], times["old"], strict=True)]
        out[label] = {"old_ms_median": round(statistics.median(times["old"]), 1),
                      "new_ms_median": round(statistics.median(times["new"]), 1),
                      "new/old_median": round(statistics.median(ratios), 3), "calls": calls}
    return out


def laptop_cost(script: str = "bench_client") -> dict:
    """Building the payload on the laptop: the first call of a process reads and compresses; later ones reuse it."""
    host_bundle.bundle.cache_clear()
    host_bundle.modules.cache_clear()
    start = time.perf_counter()
    host_bundle.payload(script, {})
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(100):
        host_bundle.payload(script, {"x": 1})
    return {"script": script, "first_ms": round(first * 1000, 2), "cached_ms": round((time.perf_counter() - start) * 10, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=None, help="commit with the concatenated scripts (default: merge-base with main)")
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--network", choices=["both", "hostile", "none"], default="both")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    rev = args.before or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO, check=True,
                                        capture_output=True, text=True).stdout.strip()
    results: dict = {"before": rev, "sizes": sizes(rev), "laptop": laptop_cost()}
    for row in results["sizes"]:
        print(f"{row['script']:16} old {row['old_bytes']:6} B  new {row['new_bytes']:6} B  new/old {row['new/old']}")
    print("laptop:", json.dumps(results["laptop"]), flush=True)
    nets = {"none": {}, "hostile": {"network": NETWORK}}
    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ["SGLOPS_ARTIFACTS"] = str(Path(tmp) / "artifacts")
        wanted = ["none", "hostile"] if args.network == "both" else [args.network]
        sb = Sandbox(Path(tmp), [{"name": f"h-{n}", **nets[n]} for n in wanted]).start()
        try:
            inv = load_inventory(sb.inventory)
            for n in wanted:
                with remote.connect(inv.get(f"h-{n}"), inventory=inv) as r:
                    try:
                        results[f"round_trip_{n}"] = timings(r, rev, args.calls)
                    except RemoteError as exc:
                        sys.exit(f"bench_bundle: {exc}")
                print(f"{n}: {json.dumps(results[f'round_trip_{n}'])}", flush=True)
        finally:
            sb.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
