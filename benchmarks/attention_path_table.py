"""The predicted attention path of the seeds' launches on every SGLang release 0.5.11-0.5.23 (docs/probes.md).

Each release is the PyPI wheel laid out as pip installs it (sglops.sandbox.trees.sglang_site: cached under the
sglops cache, never committed); `inv probe-backends`'s scan runs on it in one round trip (local transport) and
sglops/probe/launch_path.py answers each case. No release
is special-cased: the same probes and rules run on all.

    python3 benchmarks/attention_path_table.py                 # the markdown tables and probe times
    # also rewrite playbooks/attention_backend_history.json
    python3 benchmarks/attention_path_table.py --history
    python3 benchmarks/attention_path_table.py --versions 0.5.17,0.5.23
    # also: the scan over SSH to a sandbox host holding each release (a git checkout), median of 3 cold trips
    python3 benchmarks/attention_path_table.py --ssh 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglops.core.hosts import Host  # noqa: E402
from sglops.core.remote import LocalRemote  # noqa: E402
from sglops.probe.backend_history import HISTORY  # noqa: E402
from sglops.probe.launch_path import predict  # noqa: E402
from sglops.probe.launch_rules import launch_for, load_rules  # noqa: E402
from sglops.probe.report import ProbeReport  # noqa: E402
from sglops.probe.scan import scan
from sglops.probe.spec import load_probe_set, with_launch_probes  # noqa: E402
from sglops.sandbox.trees import sglang_site  # noqa: E402

VERSIONS = [f"0.5.{n}" for n in range(11, 24)]
SHORT = {
    "whole_pool_cast": "pool cast",
    "q_quantised": "q quant",
    "dequant_in_smem": "FP8 in kernel",
    "rows_cast": "rows cast",
    "native": "FP8",
    "packed_fp8_inline_scales": "packed FP8",
    "raw_fp8": "raw FP8",
    "unknown": "?",
    None: "?",
}
# (table, column, arch, sm, flags)
CASES = [
    ("glm", "sm90", "GlmMoeDsaForCausalLM", "sm90", {}),
    ("glm", "sm100", "GlmMoeDsaForCausalLM", "sm100", {}),
    ("glm", "sm120", "GlmMoeDsaForCausalLM", "sm120", {}),
    (
        "glm",
        "sm120 --attention-backend flashinfer (the seeds' profile)",
        "GlmMoeDsaForCausalLM",
        "sm120",
        {"attention_backend": "flashinfer"},
    ),
    (
        "glm",
        "sm120 --dsa-decode-backend flashmla_sparse",
        "GlmMoeDsaForCausalLM",
        "sm120",
        {"dsa_decode_backend": "flashmla_sparse"},
    ),
    (
        "glm",
        "sm120 --dsa-*-backend flashinfer_sparse_mla",
        "GlmMoeDsaForCausalLM",
        "sm120",
        {"dsa_decode_backend": "flashinfer_sparse_mla", "dsa_prefill_backend": "flashinfer_sparse_mla"},
    ),
    ("dense", "sm90", "DeepseekV3ForCausalLM", "sm90", {}),
    ("dense", "sm100", "DeepseekV3ForCausalLM", "sm100", {}),
    ("dense", "sm120", "DeepseekV3ForCausalLM", "sm120", {}),
    (
        "dense",
        "sm120 --attention-backend flashinfer",
        "DeepseekV3ForCausalLM",
        "sm120",
        {"attention_backend": "flashinfer"},
    ),
    (
        "dense",
        "sm100 --attention-backend cutlass_mla",
        "DeepseekV3ForCausalLM",
        "sm100",
        {"attention_backend": "cutlass_mla"},
    ),
    (
        "dense",
        "sm100 --attention-backend tokenspeed_mla",
        "DeepseekV3ForCausalLM",
        "sm100",
        {"attention_backend": "tokenspeed_mla"},
    ),
]


def cell(lp: dict) -> str:
    """`S flashinfer_sparse_mla (packed FP8)`, `D flashinfer=flashinfer_mla (pool cast)`, a refusal, or what
    was undetermined."""
    if lp["refused"]:
        r = lp["refused"][0]
        if " is not a choice" in r:
            return "REFUSED: not a choice" + (";" + r.split(";", 1)[1] if ";" in r else "")
        where, _, msg = r.partition(": ")
        return f"REFUSED at {where.rsplit('/', 1)[-1]}: {msg[:70]}" + ("..." if len(msg) > 70 else "")
    ch = {c["stage"]: c for c in lp["choices"]}
    if not ch or any(c["value"] is None for c in ch.values()):
        return "undetermined: " + "; ".join(lp["undetermined"])[:80]

    def one(c: dict) -> str:
        name = (
            c["value"]
            if c["backend_file"] in (c["value"], "dsa", "nsa")
            else f"{c['value']}={c['backend_file']}"
        )
        return f"{name} ({SHORT.get(c['read_mode'], c['read_mode'])})"

    p, d = ch["prefill"], ch["decode"]
    kind = ("renamed, " if lp.get("renamed") else "") + ("S" if lp["sparse"] else "D")
    return f"{kind} {one(d)}" if one(p) == one(d) else f"{kind} {one(p)} / {one(d)}"


def ssh_probe_times(versions: list[str], repeats: int) -> dict[str, float]:
    """Median seconds of the whole scan (default + launch probes) over a fresh SSH connection to a sandbox
    host (real sshd on loopback) holding each release as a git checkout: the one round trip `inv
    probe-backends` makes."""
    from sglops.core.hosts import load_inventory
    from sglops.core.remote import connect
    from sglops.sandbox.sshd import Sandbox

    out = {}
    for v in versions:
        with tempfile.TemporaryDirectory() as tmp:
            name = "r" + v.replace(".", "")
            sb = Sandbox(Path(tmp), [{"name": name, "sglang": v, "flashinfer": "0.7.2"}]).start()
            try:
                inv = load_inventory(sb.inventory)
                ps = with_launch_probes(load_probe_set())
                runs = []
                # the first warms the page cache, not counted
                for i in range(repeats + 1):
                    t0 = time.monotonic()
                    with connect(inv.get(name), inventory=inv) as r:
                        scan(r, ps)
                    if i:
                        runs.append(time.monotonic() - t0)
                out[v] = statistics.median(runs)
                print(f"{v}: over SSH {out[v]:.2f} s (median of {repeats})", file=sys.stderr)
            finally:
                sb.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", default=",".join(VERSIONS))
    ap.add_argument("--history", action="store_true", help="rewrite playbooks/attention_backend_history.json")
    ap.add_argument("--json", help="write every prediction here")
    ap.add_argument(
        "--ssh", type=int, default=0, help="also time the scan over SSH (this many cold trips each)"
    )
    a = ap.parse_args()
    rules = load_rules()
    rows: dict[str, dict[str, str]] = {}
    times: dict[str, float] = {}
    history: dict[str, dict] = {}
    full: dict[str, list] = {}
    for v in a.versions.split(","):
        root = sglang_site(v) / "sglang"
        remote = LocalRemote(
            Host(name="local", address="local", python=sys.executable, sglang_root=str(root))
        )
        t0 = time.monotonic()
        rep: ProbeReport = scan(remote, with_launch_probes(load_probe_set()))
        times[v] = time.monotonic() - t0
        f = rep.facts
        history[v] = {
            k: f.get(k) for k in ("attention_backends", "dsa_prefill_backends", "dsa_decode_backends")
        }
        for table, col, arch, sm, flags in CASES:
            launch = launch_for(
                rules, arch=arch, config=None, config_source="", kv_dtype="fp8_e4m3", sm=sm, flags=flags
            )
            lp = predict(rep, launch, rules).to_json()
            rows.setdefault(f"{table}|{v}", {})[col] = cell(lp)
            full.setdefault(v, []).append({"case": f"{table} {col}", **lp})
        print(
            f"{v}: probe {times[v]:.2f} s ({rep.engine}), {len(f.get('attention_backends') or [])} "
            f"--attention-backend choices",
            file=sys.stderr,
        )
    ssh_times = ssh_probe_times(a.versions.split(","), a.ssh) if a.ssh else {}
    if a.history:
        HISTORY.write_text(
            json.dumps(
                {"generated_by": "benchmarks/attention_path_table.py --history", "releases": history},
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(full, indent=1))
    for table, title in (
        ("glm", "GLM-5-class DSA (`GlmMoeDsaForCausalLM`), `--kv-cache-dtype fp8_e4m3`"),
        ("dense", "dense MLA (`DeepseekV3ForCausalLM`, no `index_topk`), `--kv-cache-dtype fp8_e4m3`"),
    ):
        cols = [c for t, c, *_ in CASES if t == table]
        print(f"\n{title}\n")
        ssh_col = " ssh s |" if ssh_times else ""
        print("| release | probe s |" + ssh_col + " " + " | ".join(cols) + " |")
        print(
            "| --- | --- |" + (" --- |" if ssh_times else "") + " " + " | ".join("---" for _ in cols) + " |"
        )
        for v in a.versions.split(","):
            r = rows[f"{table}|{v}"]
            ssh = f" {ssh_times[v]:.2f} |" if ssh_times else ""
            print(f"| {v} | {times[v]:.2f} |{ssh} " + " | ".join(r[c] for c in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
