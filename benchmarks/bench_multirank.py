"""Benchmark: the REAL SGLang 0.5.23 CPU server at 1 rank, TP=2 on one host, and one server over two hosts.

Same model (the tiny Llama), same machine, one run each,
one after the other, the load average printed with each:
- start-to-healthy of each shape (the host-side wait for /health; for two nodes, the slower node's), and the
  whole command as the operator waits for it;
- processes left after `stop` on each node, by process group and by sglops' mark (0 expected);
- a profile of each multi-rank shape: per-rank trace sizes and the analysis time over every rank;
- two nodes: node 1 killed (SIGKILL of its process group) -> how long until `inv server-status --hosts` names
  it, and until node 0 stops answering on its own (SGLang's gloo reset).
Sandbox hosts are sshd on loopback; profiles are the repo's (sandbox-sglang-cpu, -tp2, -2node) on free ports.
Run: python3 benchmarks/bench_multirank.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from sglops.core.hosts import load_inventory  # noqa: E402
from sglops.core.remote import connect  # noqa: E402
from sglops.host import server_common  # noqa: E402
from sglops.launch import server as launch  # noqa: E402
from sglops.sandbox import sglang_cpu  # noqa: E402
from sglops.sandbox.sshd import Sandbox, free_port  # noqa: E402
from sglops.trace import analyze  # noqa: E402
from sglops.trace.diff import diff_files  # noqa: E402

BASE = "sandbox-sglang-cpu"
NODES = ("cpu-n0", "cpu-n1")


def inv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env=dict(os.environ),
    )


def profiles_in(folder: Path) -> None:
    for name in (BASE, f"{BASE}-tp2", f"{BASE}-2node"):
        shutil.copy(REPO / "playbooks" / "profiles" / f"{name}.yaml", folder)
    base = yaml.safe_load((folder / f"{BASE}.yaml").read_text())
    # as the suite starts it
    base["env"] = {**(base.get("env") or {}), **sglang_cpu.start_env()}
    (folder / f"{BASE}.yaml").write_text(yaml.safe_dump(base))
    two = yaml.safe_load((folder / f"{BASE}-2node.yaml").read_text())
    two["dist_init_addr"] = f"127.0.0.1:{free_port()}"
    two["per_host"] = {n: {"port": free_port()} for n in NODES}
    (folder / f"{BASE}-2node.yaml").write_text(yaml.safe_dump(two))


def server_id(st) -> str | None:
    try:
        return json.loads((Path(st.log_path).parent / "server.json").read_text()).get("server_id")
    except (OSError, ValueError):
        return None


def one_host(remote, profile: str, out: dict) -> None:
    t0 = time.perf_counter()
    res = launch.restart(remote, profile, port=free_port())
    assert res.ok, res.failure_line()
    row = {
        "healthy_after_s": res.waited_s,
        "command_s": round(time.perf_counter() - t0, 2),
        "load1": round(os.getloadavg()[0], 2),
    }
    st = launch.status(remote)
    row["processes"] = len(st.processes)
    if profile.endswith("tp2"):
        row["profile"] = profile_of(["--host", remote.name])
    mark = server_id(st)
    stopped = launch.stop(remote, grace_s=15)
    row["stop_s"], row["left_after_stop"] = (
        stopped["took_s"],
        len(stopped["left"]) + len(server_common.marked_processes(mark)),
    )
    out[profile] = row
    print(profile, json.dumps(row), flush=True)


def profile_of(target: list[str]) -> dict:
    t0 = time.perf_counter()
    r = inv("profile", *target, "--steps", "4", "--output-len", "8", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    docs = json.loads(r.stdout)
    docs = docs if isinstance(docs, list) else [docs]
    traces = sorted(t for d in docs for t in d["traces"])
    t1 = time.perf_counter()
    analysis = analyze(traces)
    return {
        "command_s": round(t1 - t0, 2),
        "trace_bytes": {os.path.basename(t): os.path.getsize(t) for t in traces},
        "analysis_s": round(time.perf_counter() - t1, 3),
        "ranks": [f.rank for f in analysis.files],
    }


def two_nodes(inv_doc, out: dict) -> None:
    hosts = ",".join(NODES)
    t0 = time.perf_counter()
    r = inv("restart", f"{BASE}-2node", "--hosts", hosts, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    docs = {d["host"]: d for d in json.loads(r.stdout)}
    row = {
        "healthy_after_s": max(d["waited_s"] for d in docs.values()),
        "command_s": round(time.perf_counter() - t0, 2),
        "load1": round(os.getloadavg()[0], 2),
        "profile": profile_of(["--hosts", hosts]),
    }
    with (
        connect(inv_doc.get("cpu-n1"), inventory=inv_doc) as n1,
        connect(inv_doc.get("cpu-n0"), inventory=inv_doc) as n0,
    ):
        st1 = launch.status(n1)
        os.killpg(st1.pid, signal.SIGKILL)
        t_dead = time.perf_counter()
        s = inv("server-status", "--hosts", hosts)
        row["death_to_report_s"] = round(time.perf_counter() - t_dead, 2)
        row["report"] = s.stderr.strip().splitlines()[-1][:200]
        while launch.status(n0).health == 200 and time.perf_counter() - t_dead < 180:
            time.sleep(0.5)
        row["node0_down_after_s"] = round(time.perf_counter() - t_dead, 2)
        marks = [server_id(launch.status(n)) for n in (n0, n1)]
    stop = inv("stop", "--hosts", hosts)
    assert stop.returncode == 0, stop.stderr
    row["left_after_stop"] = sum(len(server_common.marked_processes(m)) for m in marks if m)
    out["two-nodes"] = row
    print("two-nodes", json.dumps(row), flush=True)


def ab_two_nodes(out: dict) -> None:
    """`inv ab --hosts n0,n1`: one round A/B on the two-node server (each side's restart starts both nodes),
    from no server running, restored to none; then diff-trace per rank on the repo's real TP=2 / two-node
    traces."""
    hosts = ",".join(NODES)
    t0 = time.perf_counter()
    r = inv(
        "ab",
        "--hosts",
        hosts,
        "-a",
        f"{BASE}-2node",
        "-b",
        "ab-b-2node",
        "--rounds",
        "1",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--variable",
        "max_running_requests",
        "--json",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)[0]
    row = {
        "command_s": round(time.perf_counter() - t0, 2),
        "load1": round(os.getloadavg()[0], 2),
        "restart_s": [x["restart_s"] for x in doc["rounds"]],
        "bench_s": [x["bench_s"] for x in doc["rounds"]],
        "decode_tok_s": [x["decode_tok_s"] for x in doc["rounds"]],
        "restored": doc["restore"]["ok"],
    }
    data = REPO / "tests" / "data" / "traces"
    t1 = time.perf_counter()
    d = diff_files(
        [data / f"sglang-cpu-tp2-TP-{k}.trace.json.gz" for k in (0, 1)],
        [data / f"sglang-cpu-2node-TP-{k}.trace.json.gz" for k in (0, 1)],
    )
    row["diff_trace_per_rank_s"] = round(time.perf_counter() - t1, 3)
    row["ranks"] = [{"rank": x["rank"], "own_us": x["own_us"]} for x in d.ranks]
    out["ab-two-nodes"] = row
    print("ab-two-nodes", json.dumps(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument(
        "--ab-only", action="store_true", help="only the ab over the two nodes (and diff-trace per rank)"
    )
    args = ap.parse_args()
    reason = sglang_cpu.not_ready()
    if reason:
        sys.exit(f"bench_multirank: {reason}")
    out: dict = {"cpus": len(os.sched_getaffinity(0))}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "profiles").mkdir()
        profiles_in(base / "profiles")
        (base / "profiles" / "ab-b-2node.yaml").write_text(
            yaml.safe_dump({"extends": f"{BASE}-2node", "max_running_requests": 4})
        )
        sb = Sandbox(
            base,
            [{"name": "cpu-a", "sglang_env": "cpu"}]
            + [{"name": n, "sglang_env": "cpu", "node_rank": i} for i, n in enumerate(NODES)],
        ).start()
        os.environ.update(
            {
                "SGLOPS_INVENTORY": str(sb.inventory),
                "SGLOPS_PROFILES": str(base / "profiles"),
                "SGLOPS_ARTIFACTS": str(base / "artifacts"),
            }
        )
        try:
            inventory = load_inventory(sb.inventory)
            if not args.ab_only:
                with connect(inventory.get("cpu-a"), inventory=inventory) as remote:
                    one_host(remote, BASE, out)
                    one_host(remote, f"{BASE}-tp2", out)
                two_nodes(inventory, out)
            ab_two_nodes(out)
        finally:
            inv("stop", "--hosts", ",".join(("cpu-a", *NODES)))
            sb.stop()
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
