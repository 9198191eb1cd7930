"""Benchmark: one command against one host vs the one-line `ssh` floor running the same remote command.

`inv facts --host h0` and `inv probe-backends --host h0` (whole processes, as an operator types them) against
`ssh h0 'python3 -c BOOTSTRAP' < payload`: OpenSSH sending the very bundle and arguments the task sends, so
the host does the same work and the difference is the client (start-up, imports, connection, printing). Also
the imports a task makes before its first byte goes out (`-X importtime`, summed up to the first socket
connect). Real sshd sandbox host on loopback; the host's probe cache (host/_tree_cache.py) is emptied before
every probe run of both when --cold. Interleaved runs, medians, load stated.
Run: python3 benchmarks/bench_floor.py [--repeats 7] [--cold] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.core.host_bundle import BOOTSTRAP, payload  # noqa: E402
from sglops.core.transport.command import shell_command  # noqa: E402
from sglops.probe.scan import request  # noqa: E402
from sglops.probe.spec import load_probe_set  # noqa: E402
from sglops.sandbox import trees  # noqa: E402
from sglops.sandbox.sshd import HOST_PYTHON, Sandbox  # noqa: E402

# Runs `inv ARGS` with an audit hook that marks the first socket connect on stderr (for -X importtime).
FIRST_CONNECT = (
    "import sys\n"
    "def hook(e, a):\n"
    "    if e == 'socket.connect' and not getattr(hook, 'done', False):\n"
    "        hook.done = True\n"
    "        sys.stderr.write('@@FIRST-CONNECT\\n')\n"
    "sys.addaudithook(hook)\n"
    "sys.argv = ['invoke'] + sys.argv[1:]\n"
    "from invoke.main import program\n"
    "program.run()\n"
)


def timed(argv: list[str], env: dict, stdin: bytes | None = None) -> tuple[float, float]:
    """(wall s, client CPU s): the CPU from the kernel's account of the child (children's rusage delta)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, input=stdin, capture_output=True)
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv[:4])}...: exit {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return wall, (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def imports_before_connect(argv: list[str], env: dict) -> tuple[float, int]:
    """(ms of imports, modules) before the first socket
    connect of `inv argv` (-X importtime, top-level sums)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", FIRST_CONNECT, *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    total, count = 0, 0
    for line in proc.stderr.splitlines():
        if line.startswith("@@FIRST-CONNECT"):
            break
        if (
            line.startswith("import time:")
            and "|" in line
            and not line.split("|")[1].strip().startswith("cumulative")
        ):
            name = line.split("|")[2]
            count += 1
            # a top-level import: its cumulative time covers what it pulled in
            if not name.startswith("  "):
                total += int(line.split("|")[1])
    return total / 1000, count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cold", action="store_true", help="empty the host's probe cache before each probe run")
    ap.add_argument(
        "--before", help="a checkout of an earlier sglops (git archive): its inv too, in the same rounds"
    )
    ap.add_argument("--out")
    args = ap.parse_args()
    figures: dict = {"repeats": args.repeats, "load_before": open("/proc/loadavg").read().split()[:3]}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "h0").mkdir()
        # the real release checkout, shared
        (base / "h0" / "sglang").symlink_to(trees.sglang_template("0.5.23"))
        sb = Sandbox(base, [{"name": "h0"}]).start()
        try:
            h = sb.host("h0")
            env = {
                **os.environ,
                "SGLOPS_INVENTORY": str(sb.inventory),
                "SGLOPS_ARTIFACTS": str(base / "art"),
                "PYTHONPATH": str(REPO),
            }
            # an operator's install has its .pyc files: compile once, not per run
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            ssh = [
                "ssh",
                "-F",
                "/dev/null",
                "-p",
                str(h.port),
                "-i",
                str(sb.client_key),
                "-o",
                "BatchMode=yes",
                "-o",
                f"UserKnownHostsFile={sb.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "root@127.0.0.1",
                shell_command([HOST_PYTHON, "-c", BOOTSTRAP], timeout=300),
            ]
            ps = load_probe_set()
            # what `inv probe-backends` sends: the probe behind the check of which engine serves there
            probe_request = request(str(h.sglang_root), ps, other_engines=True)
            cache = h.home / ".cache" / "sglops" / "probe-scan"
            cases = {
                "facts": (
                    ["facts", "--host", "h0"],
                    payload("facts", {"sglang_root": str(h.sglang_root), "port": None}),
                ),
                "probe-backends": (["probe-backends", "--host", "h0"], payload(*probe_request)),
            }
            inv = [sys.executable, "-m", "invoke"]
            before = str(Path(args.before).resolve()) if args.before else None
            before_env = {**env, "PYTHONPATH": before} if before else env
            # warm: page cache, .pyc, the host's probe cache
            for argv, stdin in cases.values():
                timed(inv + argv, env), timed(ssh, env, stdin)
                if before:
                    timed([*inv, "-r", before, *argv], before_env)
            rows: dict = {
                name: {"inv": [], "ssh": [], **({"before": []} if before else {})} for name in cases
            }
            for _ in range(args.repeats):
                for name, (argv, stdin) in cases.items():
                    runs = [("inv", inv + argv, None, env), ("ssh", ssh, stdin, env)]
                    if before:
                        runs.append(("before", [*inv, "-r", before, *argv], None, before_env))
                    for tool, cmd, data, tool_env in runs:
                        if args.cold and name == "probe-backends":
                            shutil.rmtree(cache, ignore_errors=True)
                        rows[name][tool].append(timed(cmd, tool_env, data))
            for name, r in rows.items():
                med = {
                    t: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                    for t, v in r.items()
                }
                figures[name] = {
                    "inv_wall_s": med["inv"][0],
                    "inv_client_cpu_s": med["inv"][1],
                    "ssh_wall_s": med["ssh"][0],
                    "ssh_client_cpu_s": med["ssh"][1],
                    "ratio": med["inv"][0] / med["ssh"][0],
                    "runs": r,
                }
                if before:
                    figures[name].update(
                        {
                            "before_wall_s": med["before"][0],
                            "before_client_cpu_s": med["before"][1],
                            "before_ratio": med["before"][0] / med["ssh"][0],
                        }
                    )
            figures["imports_ms"] = {
                name: imports_before_connect(argv, env)[0] for name, (argv, _) in cases.items()
            }
            base_ms = imports_before_connect(["--list"], env)
            figures["imports_ms"]["inv --list (no connect: all)"] = base_ms[0]
        finally:
            sb.stop()
    figures["load_after"] = open("/proc/loadavg").read().split()[:3]
    for name in ("facts", "probe-backends"):
        f = figures[name]
        print(
            f"{name}: inv {f['inv_wall_s'] * 1000:.0f} ms (client CPU {f['inv_client_cpu_s'] * 1000:.0f} ms)"
            f" vs ssh {f['ssh_wall_s'] * 1000:.0f} ms (client CPU {f['ssh_client_cpu_s'] * 1000:.0f} ms) ->"
            f" {f['ratio']:.2f}x (target <= 1.5x)"
        )
        if "before_ratio" in f:
            print(
                f"{name}: before {f['before_wall_s'] * 1000:.0f} ms (client CPU"
                f" {f['before_client_cpu_s'] * 1000:.0f} ms) -> {f['before_ratio']:.2f}x"
            )
    print(
        "imports before the first byte:",
        ", ".join(f"{k} {v:.0f} ms" for k, v in figures["imports_ms"].items()),
    )
    print("load", figures["load_before"], "->", figures["load_after"], f"({os.cpu_count()} cores)")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
