"""Which FlashInfer releases have native FP8-KV MLA, and on what terms: the probe set's FlashInfer
probes (playbooks/probes.yaml, root: flashinfer) run on release wheels, no GPU and no host.

    python3 benchmarks/probe_flashinfer_releases.py WHEEL_OR_PACKAGE_DIR... [--out FILE.json]

Each argument is a flashinfer_python-*.whl or an unpacked `flashinfer` package folder. Files and
regexes are the probe set's, matched per line as the host scanner does (Python engine).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def flashinfer_probes() -> list:
    sys.path.insert(0, str(ROOT))
    from sglops.probe.spec import load_probe_set

    return [p for p in load_probe_set().probes if p.root == "flashinfer" and p.kind == "grep"]


def probe_package(pkg: Path) -> dict:
    """Facts (True: hit, False: files but no hit, None: no such file) and the hit lines."""
    facts, hits = {}, {}
    for p in flashinfer_probes():
        files = sorted(
            {
                os.path.normpath(f)
                for pat in p.files
                for f in glob.glob(str(pkg / pat), recursive=True)
                if os.path.isfile(f)
            }
        )
        rx = re.compile(p.regex, re.IGNORECASE if p.ignore_case else 0)
        found = []
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    if rx.search(line):
                        found.append(f"{os.path.relpath(f, pkg)}:{lineno}: {line.strip()[:160]}")
        fact = p.fact or p.id
        facts[fact] = bool(found) if files else None
        hits[fact] = found
    return {"facts": facts, "hits": hits}


def package_dir(arg: str, tmp: str) -> tuple[str, Path]:
    path = Path(arg)
    if path.suffix == ".whl":
        version = path.name.split("-")[1]
        dest = Path(tmp) / version
        with zipfile.ZipFile(path) as zf:
            wanted = [
                n
                for n in zf.namelist()
                if n.startswith("flashinfer/") and (n.endswith(".py") or "/include/flashinfer/" in n)
            ]
            zf.extractall(dest, wanted)
        return version, dest / "flashinfer"
    # an installed package's metadata
    dist = sorted(path.parent.glob("flashinfer_python-*.dist-info"))
    return (re.sub(r"^flashinfer_python-|\.dist-info$", "", dist[0].name) if dist else path.name), path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("packages", nargs="+")
    ap.add_argument("--out")
    args = ap.parse_args()
    doc = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arg in args.packages:
            version, pkg = package_dir(arg, tmp)
            doc[version] = probe_package(pkg)
            print(version, json.dumps(doc[version]["facts"]))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
