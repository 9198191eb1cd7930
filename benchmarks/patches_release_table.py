"""gather-cast and fp8-mla-native on every SGLang release 0.5.11-0.5.23: the table in docs/patches.md.

Each release is the PyPI wheel laid out as pip installs it (sglops.sandbox.trees.sglang_site: cached under the
sglops cache, never committed). One sandbox host (a real sshd on loopback) and one inventory entry per release
(its sglang_root that release's tree); `inv patches --hosts ... --json` runs once, as a user would, and the
table is its answer: per patch and release, the status, the variant and how it was chosen (or why it is
refused). Nothing is changed on any tree (`inv patches` is read-only).

    python3 benchmarks/patches_release_table.py                      # the markdown table
    python3 benchmarks/patches_release_table.py --patches gather-cast --versions 0.5.20,0.5.23
    python3 benchmarks/patches_release_table.py --json out.json      # also the raw `inv patches` answer
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sglops.sandbox.sshd import Sandbox  # noqa: E402
from sglops.sandbox.trees import sglang_site  # noqa: E402

VERSIONS = [f"0.5.{n}" for n in range(11, 24)]
PATCHES = ["gather-cast", "fp8-mla-native"]


def host_name(version: str) -> str:
    return "r" + version.replace(".", "-")


def listing(versions: list[str]) -> tuple[list[dict], float]:
    """`inv patches --hosts` over SSH against each release's tree; (its JSON answer, its seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox(
            Path(tmp) / "sandbox", [{"name": "rel", "sglang": "0.5.23", "tags": ["sandbox"]}]
        ).start()
        try:
            port = sb.hosts[0].client_port
            sb.write_inventory(
                [
                    {
                        "name": host_name(v),
                        "address": "127.0.0.1",
                        "port": port,
                        "sglang_root": str(sglang_site(v) / "sglang"),
                    }
                    for v in versions
                ]
            )
            env = {
                **os.environ,
                "SGLOPS_INVENTORY": str(sb.inventory),
                "SGLOPS_ARTIFACTS": str(Path(tmp) / "art"),
                "PYTHONPATH": str(REPO),
            }
            t0 = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "invoke",
                    "patches",
                    "--hosts",
                    ",".join(host_name(v) for v in versions),
                    "--json",
                ],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            took = time.monotonic() - t0
        finally:
            sb.stop()
    if proc.returncode != 0:
        sys.exit(f"inv patches failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout), took


def cell(row: dict) -> str:
    status, variant, detail = row["status"], row.get("variant"), row.get("detail") or ""
    if status in ("applicable", "available"):
        how = (
            "exact"
            if detail.startswith("exact match") or "exact match" in detail
            else "checked"
            if "(checked)" in detail
            else ""
        )
        text = f"{status}: {variant}" + (f" ({how})" if how and status == "applicable" else "")
        if status == "available":
            text += f" - needs {detail.split(' is ')[0]}"
        return text
    return f"**{status}**: {detail}"


def table(answer: list[dict], versions: list[str], names: list[str]) -> str:
    by_host = {h["host"]: h for h in answer}
    out = ["| release | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for v in versions:
        h = by_host[host_name(v)]
        if not h.get("ok", True):
            out.append(f"| {v} | " + " | ".join(f"error: {h.get('error')}" for _ in names) + " |")
            continue
        rows = {r["patch"]: r for r in h["patches"]}
        out.append(f"| {h['sglang']} | " + " | ".join(cell(rows[n]) for n in names) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", default=",".join(VERSIONS))
    ap.add_argument("--patches", default=",".join(PATCHES))
    ap.add_argument("--json", help="also write the raw `inv patches --json` answer here")
    a = ap.parse_args()
    versions, names = a.versions.split(","), a.patches.split(",")
    answer, took = listing(versions)
    if a.json:
        Path(a.json).write_text(json.dumps(answer, indent=1) + "\n")
    print(table(answer, versions, names))
    print(f"\n`inv patches` over SSH, {len(versions)} release trees in one invocation: {took:.1f} s")


if __name__ == "__main__":
    main()
