"""Check: the host probe script's JSON is byte-identical before and after a change, on real release trees.

Runs `sglops/host/probe_scan.py:main` (as the host runs it: a fresh python, the tree's FlashInfer on the path)
on the cached 0.5.15 / 0.5.17 / 0.5.23 checkouts with every probe set (default, default + launch, tree) and
both engines (rg, python), the host's tree cache off (`--cached`: a miss then a hit), and prints one sha256
per run of the JSON with the timing field dropped. `--save FILE` keeps the digests; `--compare FILE` exits 1
naming every run whose JSON changed; `--dump DIR` writes the JSON itself (to diff a failure).
Run: python3 benchmarks/probe_json_check.py --compare benchmarks/results/probe_json_digests.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.probe.spec import load_probe_set, with_launch_probes  # noqa: E402
from sglops.sandbox import trees  # noqa: E402

VERSIONS = ("0.5.15", "0.5.17", "0.5.23")
FLASHINFER = "0.7.2"
RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from sglops.host import probe_scan
out = probe_scan.main(json.loads(sys.stdin.read()))
out.pop("seconds", None)
sys.stdout.write(json.dumps(out, sort_keys=True))
"""


def probe_sets() -> dict:
    default = load_probe_set(REPO / "playbooks" / "probes.yaml")
    return {
        "default": default,
        "launch": with_launch_probes(default),
        "tree": load_probe_set(REPO / "playbooks" / "probes-tree.yaml"),
    }


def run_one(version: str, probe_set, engine: str, env: dict, cache: bool) -> bytes:
    root = trees.sglang_template(version) / "python"
    args = {
        "sglang_root": str(root),
        "engine": engine,
        "backends": {"files": probe_set.backend_files},
        "probes": [p.to_wire() for p in probe_set.probes],
        "model_path": None,
        "gpus": False,
        "cache": cache,
    }
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(REPO)],
        input=json.dumps(args).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    return proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--save")
    ap.add_argument("--compare")
    ap.add_argument("--dump")
    ap.add_argument("--engines", default="rg,python")
    ap.add_argument(
        "--cached",
        action="store_true",
        help="each run twice through the host's tree cache (a fresh one): the miss, then the hit",
    )
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(trees.flashinfer_site(FLASHINFER)), "PYTHONDONTWRITEBYTECODE": "1"}
    tmp = tempfile.TemporaryDirectory()
    env["XDG_CACHE_HOME"] = tmp.name
    digests, unsteady = {}, []
    for version in VERSIONS:
        for name, ps in probe_sets().items():
            for engine in a.engines.split(","):
                key = f"{version}/{name}/{engine}"
                for rep in ("miss", "hit") if a.cached else ("",):
                    out = run_one(version, ps, engine, env, cache=a.cached)
                    digest = hashlib.sha256(out).hexdigest()
                    if digests.setdefault(key, digest) != digest:
                        unsteady.append(key)
                    print(key, rep, digest[:16], len(out), "bytes", flush=True)
                if a.dump:
                    Path(a.dump).mkdir(parents=True, exist_ok=True)
                    Path(a.dump, key.replace("/", "_") + ".json").write_bytes(out)
    for k in unsteady:
        print(f"HIT DIFFERS FROM MISS: {k}")
    if a.save:
        Path(a.save).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    if a.compare:
        want = json.loads(Path(a.compare).read_text())
        bad = [k for k in digests if want.get(k) != digests[k]] + unsteady
        for k in bad:
            print(f"CHANGED: {k}")
        print("identical" if not bad else f"{len(bad)} of {len(digests)} changed")
        return 1 if bad else 0
    return 1 if unsteady else 0


if __name__ == "__main__":
    sys.exit(main())
