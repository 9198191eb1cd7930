"""Benchmark: where a fan-out's client CPU goes, per host
(`inv OP --hosts` on N sandbox hosts, in one process).

Each piece of a host's work is wrapped to add up the CPU its thread spent in it (time.thread_time; a piece
inside another counts in both): the connection, the step (the host's answer read and parsed, the record
written with its masking), the result's layout (rich), and paramiko's reader threads. Run once to warm, then
measured. Run: python3 benchmarks/fanout_client_cpu.py --hosts 16 [--op probe-backends] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sglops.sandbox import trees  # noqa: E402
from sglops.sandbox.sshd import Sandbox  # noqa: E402

# Runs in the measured process: wraps the pieces, runs the task, prints one line per piece on stderr.
ACCOUNT = r"""
import collections, importlib, sys, threading, time
spent, calls, lock = collections.Counter(), collections.Counter(), threading.Lock()
def wrap(module, attr, label):
    owner = importlib.import_module(module)
    *path, name = attr.split(".")
    for p in path:
        owner = getattr(owner, p)
    orig = getattr(owner, name)
    def timed(*a, **k):
        t = time.thread_time()
        try:
            return orig(*a, **k)
        finally:
            with lock:
                spent[label] += time.thread_time() - t
                calls[label] += 1
    setattr(owner, name, timed)
wrap("sglops.core.transport.ssh_channel", "open_connection", "connect (paramiko handshake, host keys)")
wrap("sglops.core.op", "perform", "step (run, parse, record)")
wrap("sglops.core.transport.base", "Remote.run_py", "  of which: host round trip (send, read, parse JSON)")
wrap("sglops.core.artifacts", "keep", "  of which: the record (masking, JSON, files)")
wrap("sglops.views.show", "laid_out", "result's layout (rich)")
wrap("sglops.views.show", "alike", "the answer's key (hosts of one answer print it once)")
wrap("sglops.views.alike", "Alike.body_text", "the answer's layout (rich), once an answer")
import paramiko
orig_run = paramiko.Transport.run
def run(self):
    t = time.thread_time()
    try:
        orig_run(self)
    finally:
        with lock:
            spent["paramiko reader threads"] += time.thread_time() - t
paramiko.Transport.run = run
sys.argv = ["invoke"] + sys.argv[1:]
start = time.process_time()
from invoke.main import program
try:
    program.run()
except SystemExit:
    pass
time.sleep(0.3)
hosts = max(calls.values() or [1])
cpu = time.process_time()
sys.stderr.write(f"@@ process CPU {cpu:.3f} s ({cpu - start:.3f} s from the task's start)\n")
for label, s in spent.items():
    sys.stderr.write(f"@@ {s * 1000 / hosts:7.1f} ms a host  {label}\n")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--op", default="probe-backends")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        names = [f"h{i}" for i in range(args.hosts)]
        template = trees.sglang_template("0.5.23")
        for name in names:
            (base / name).mkdir()
            (base / name / "sglang").symlink_to(template)
        sb = Sandbox(base, [{"name": n} for n in names]).start()
        try:
            env = {
                **os.environ,
                "SGLOPS_INVENTORY": str(sb.inventory),
                "SGLOPS_ARTIFACTS": str(base / "art"),
                "PYTHONPATH": str(REPO),
            }
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            argv = [sys.executable, "-c", ACCOUNT, "-r", str(REPO), args.op, "--hosts", ",".join(names)]
            # warm: .pyc files, the hosts' caches
            subprocess.run(argv, env=env, capture_output=True)
            for i in range(args.repeats):
                proc = subprocess.run(argv, env=env, capture_output=True, text=True)
                load = open("/proc/loadavg").read().split()[0]
                print(f"{args.op} on {args.hosts} hosts, run {i + 1} (load {load}):")
                print(
                    "".join(f"  {ln[3:]}\n" for ln in proc.stderr.splitlines() if ln.startswith("@@ ")),
                    end="",
                )
        finally:
            sb.stop()


if __name__ == "__main__":
    main()
