"""Benchmark: truncated answers over a hostile network, with the fix and with the old reading logic.

A sandbox sshd sits behind sglops/sandbox/netproxy.py (50 ms +- 10 ms each way, data split into
random pieces of 1..1448 bytes). Each call asks the host for --size bytes of stdout and counts the
answers that came back short. `--reader old` swaps in, for this process only, the reading loop
sglops had before (it stopped at the exit status); it is not an option of sglops itself.
Optionally applies and reverts a patch --apply-revert times through the same network and checks
that the tree is whole-old or whole-new after each step.

Run: python3 benchmarks/bench_remote_loop.py --calls 1000 --reader both [--size 1048576] [--apply-revert 5]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.core import remote  # noqa: E402
from sglops.core.errors import ConnectError, RemoteTimeout  # noqa: E402
from sglops.core.hosts import load_inventory  # noqa: E402
from sglops.sandbox.sshd import HOST_PYTHON, Sandbox  # noqa: E402

NETWORK = {"delay_ms": 50, "jitter_ms": 10, "max_chunk": 1448, "rate_mbit": 100, "buffer": 131072, "seed": 13}


def _exec_stopping_at_exit_status(self, command, stdin, timeout, on_output):
    """sglops' reading loop before the fix (kept here only to count what it lost)."""
    conn = self._connection()
    self.round_trips += 1
    start = time.monotonic()
    chan = conn.client.get_transport().open_session(timeout=self.host.connect_timeout)
    chan.settimeout(timeout)
    out: list[bytes] = []
    err: list[bytes] = []
    try:
        chan.exec_command(command)
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        deadline = time.monotonic() + timeout
        while True:
            got = False
            while chan.recv_ready():
                out.append(chan.recv(1 << 16))
                got = True
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(1 << 16))
                got = True
            if not got:
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if chan.closed and not chan.recv_ready():
                    break
                if time.monotonic() > deadline:
                    raise RemoteTimeout(f"{self.name}: no answer within {timeout:g} s")
                select.select([chan], [], [], 0.005)
        code = chan.recv_exit_status()
    except (OSError, EOFError) as exc:
        raise ConnectError(f"{self.name}: connection lost during a command: {exc}") from None
    finally:
        chan.close()
    return remote.CommandResult(
        command,
        code,
        b"".join(out).decode(errors="replace"),
        b"".join(err).decode(errors="replace"),
        time.monotonic() - start,
    )


# Writes the whole answer into the pipe at once (a pipe as large as the answer) and exits at once:
# sshd then sees the exit before it has read the answer, and may send exit-status first.
FAST_EXIT_WRITER = (
    "import fcntl, os, stat, sys\n"
    "size = int(sys.argv[1])\n"
    "if stat.S_ISFIFO(os.fstat(1).st_mode):\n"
    "    try:\n"
    "        fcntl.fcntl(1, 1031, size + 3)  # F_SETPIPE_SZ\n"
    "    except OSError:\n"
    "        pass\n"
    "data = memoryview(b'x' * size + b'END')\n"
    "while data:\n"
    "    data = data[os.write(1, data):]\n"
    "os._exit(0)\n"
)


def big_answer_argv(size: int) -> list[str]:
    """A host command that writes `size` bytes plus an end mark and exits at once."""
    return [HOST_PYTHON, "-c", FAST_EXIT_WRITER, str(size)]


def loop(r, calls: int, size: int) -> dict:
    """`calls` calls of `size` bytes each; counts the answers that came back short."""
    truncated, shortest, lost, start = 0, size + 3, [], time.perf_counter()
    argv = big_answer_argv(size)
    for i in range(calls):
        try:
            out = r.run(argv, timeout=120).stdout
        # the connection died: count it, reconnect, go on
        except Exception as exc:
            lost.append(f"call {i}: {type(exc).__name__}: {exc}")
            r.close()
            continue
        if len(out) != size + 3 or not out.endswith("END"):
            truncated += 1
            shortest = min(shortest, len(out))
    wall = time.perf_counter() - start
    return {
        "calls": calls,
        "size": size,
        "truncated": truncated,
        "shortest": shortest,
        "seconds": round(wall, 1),
        "ms_per_call": round(wall / max(calls, 1) * 1000, 1),
        "connections_lost": lost,
    }


def tree_state(root: Path) -> tuple[str, list[str]]:
    """(`git status` of the release tree, patches in the ledger): what a half state would show."""
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    ledger = root / ".sglops" / "applied.json"
    names = [e["patch"] for e in json.loads(ledger.read_text())["applied"]] if ledger.exists() else []
    return status, names


def apply_revert(r, root: Path, cycles: int, patch: str = "gather-cast") -> dict:
    """Apply and revert a real patch `cycles` times through the hostile network; count half states."""
    from sglops.patch import apply as patches

    half, start = 0, time.perf_counter()
    for _ in range(cycles):
        assert patches.apply_patch(r, patch).action == "applied"
        status, names = tree_state(root)
        half += 0 if (status.startswith("M ") or status.startswith(" M")) and names == [patch] else 1
        assert patches.revert_patch(r, patch).action == "reverted"
        status, names = tree_state(root)
        half += 0 if status == "" and names == [] else 1
    return {"cycles": cycles, "half_states": half, "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--reader", choices=["new", "old", "both"], default="both")
    ap.add_argument(
        "--network",
        choices=["hostile", "none"],
        default="hostile",
        help="hostile: through the delaying, splitting proxy; none: plain loopback",
    )
    ap.add_argument(
        "--apply-revert", type=int, default=0, help="apply/revert cycles of gather-cast (fixed reader)"
    )
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SGLOPS_ARTIFACTS"] = str(Path(tmp) / "artifacts")
        net = {"network": NETWORK} if args.network == "hostile" else {}
        sb = Sandbox(Path(tmp), [{"name": "far", **net}]).start()
        try:
            inv = load_inventory(sb.inventory)
            host = inv.get("far")
            fixed = remote.SSHRemote._exec
            for reader in ["new", "old"] if args.reader == "both" else [args.reader]:
                remote.SSHRemote._exec = fixed if reader == "new" else _exec_stopping_at_exit_status
                try:
                    with remote.connect(host, inventory=inv) as r:
                        results[reader] = loop(r, args.calls, args.size)
                finally:
                    remote.SSHRemote._exec = fixed
                print(f"{reader} reader: {json.dumps(results[reader])}", flush=True)
            if args.apply_revert:
                with remote.connect(host, inventory=inv) as r:
                    results["apply_revert"] = apply_revert(r, sb.host("far").sglang_root, args.apply_revert)
                print(f"apply/revert: {json.dumps(results['apply_revert'])}", flush=True)
            proxy = sb.host("far").proxy
            results["network"] = (
                {
                    **NETWORK,
                    "connections": proxy.stats.connections,
                    "bytes_down": proxy.stats.bytes_down,
                    "pieces": proxy.stats.pieces,
                }
                if proxy
                else "plain loopback"
            )
        finally:
            sb.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
