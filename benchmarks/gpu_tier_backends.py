"""MLA backends side by side on the GPU tier's one server build (docs/gpu.md), all through sglops' own tasks.

Runs on the GPU machine after the `gpu-fp8-kv` play (scripts/gpu-tier.sh loop), which benched flashinfer at a
1M-token FP8 pool with and without gather-cast. Each further candidate gets what an operator would do by hand:
`inv apply-patch` where it has a patch, `inv restart PROFILE`, the same `inv bench` as the play's, `inv logs`
when it does not start (sglops names the crash class from the log), then `inv revert-patch`. One `inv compare`
puts every run against the play's flashinfer baseline: decode tok/s per concurrency and output identity (token
ids and logprobs). Every command's JSON and exit code are kept in ROOT/backends.json; `--table FILE` prints
the markdown table of docs/gpu.md from a backends.json and the play's record (on any machine).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PROFILE = "h200-tiny-mla-fp8"
BENCH = ["--runs", "3", "--input-len", "128", "--output-len", "256", "--concurrency", "1,4,8"]
# most telling first: a device lease may end before the last
CANDIDATES = [
    {"name": "triton", "profile": f"{PROFILE}-triton", "pool": "1M"},
    {"name": "flashinfer + fp8-kv-direct", "profile": PROFILE, "patch": "fp8-kv-direct", "pool": "1M"},
    {"name": "flashinfer", "profile": f"{PROFILE}-pool256k", "pool": "256K"},
    {
        "name": "flashinfer + gather-cast",
        "profile": f"{PROFILE}-pool256k",
        "patch": "gather-cast",
        "pool": "256K",
    },
    {"name": "flashmla", "profile": f"{PROFILE}-flashmla", "pool": "1M"},
]


def inv(*args: str, timeout: float = 900) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", *args], capture_output=True, text=True, timeout=timeout
    )
    out = {
        "argv": list(args),
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "stderr": proc.stderr[-4000:],
    }
    try:
        out["json"] = json.loads(proc.stdout)
    except ValueError:
        out["stdout"] = proc.stdout[-4000:]
    print(f"  inv {' '.join(args)} -> rc {proc.returncode} in {out['seconds']} s", flush=True)
    return out


def find_key(doc, key: str):
    """The first value of `key` anywhere in a JSON document (the tasks' --json shapes differ)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        doc = list(doc.values())
    if isinstance(doc, list):
        for item in doc:
            hit = find_key(item, key)
            if hit is not None:
                return hit
    return None


def play_runs(artifacts: Path) -> dict[str, str]:
    """Run ids of the newest gpu-fp8-kv play's bench steps, by step id."""
    plays = sorted(artifacts.glob("local/*/play.json"))
    for path in reversed(plays):
        doc = json.loads(path.read_text())
        if doc.get("play") == "gpu-fp8-kv" and not doc.get("dry_run"):
            return {
                s["id"]: find_key(s.get("result") or {}, "run_id") for s in doc["steps"] if s["do"] == "bench"
            }
    return {}


def run_candidate(c: dict) -> dict:
    print(f"{c['name']} (pool {c['pool']})", flush=True)
    rec = dict(c, steps=[])
    if c.get("patch"):
        step = inv("apply-patch", c["patch"], "--host", "local", "--json")
        rec["steps"].append(step)
        if step["rc"] != 0:
            rec["outcome"] = "patch refused"
            return rec
    try:
        step = inv("restart", c["profile"], "--host", "local", "--json")
        rec["steps"].append(step)
        if step["rc"] != 0:
            rec["outcome"] = "did not start"
            rec["steps"].append(inv("logs", "--host", "local", "--lines", "60"))
            return rec
        step = inv("bench", "--host", "local", "--json", *BENCH)
        rec["steps"].append(step)
        rec["run_id"] = find_key(step.get("json"), "run_id")
        rec["outcome"] = "ok" if step["rc"] == 0 else "bench failed"
        return rec
    finally:
        if c.get("patch"):
            rec["steps"].append(inv("revert-patch", c["patch"], "--host", "local", "--json"))


def main_run(root: Path) -> int:
    artifacts = root / "artifacts"
    base = play_runs(artifacts)
    print(f"the play's bench runs: {base}", flush=True)
    doc: dict = {"play_runs": base, "candidates": []}
    out = root / "backends.json"
    # saved after each candidate: what ran survives a lease that ends early
    for c in CANDIDATES:
        doc["candidates"].append(run_candidate(c))
        out.write_text(json.dumps(doc, indent=1))
    runs = [r for r in (base.get("baseline-bench"), base.get("patched-bench")) if r]
    runs += [r["run_id"] for r in doc["candidates"] if r.get("run_id")]
    if len(runs) > 1:
        doc["compare"] = inv(
            "compare",
            runs[0],
            ",".join(runs[1:]),
            "--json",
            "--variable",
            "attention_backend,max_total_tokens",
        )
    out.write_text(json.dumps(doc, indent=1))
    # leave the host on the profile it was found with
    inv("restart", PROFILE, "--host", "local", "--json")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/gpu-tier"))
    ap.add_argument("--table", type=Path, help="print the markdown table from this backends.json")
    args = ap.parse_args()
    if args.table:
        # beside this script
        from gpu_tier_table import markdown

        print(markdown(json.loads(args.table.read_text())))
        return 0
    return main_run(args.root)


if __name__ == "__main__":
    sys.exit(main())
