"""The suite's own dockerds left behind by a killed run: found from /proc and stopped before a new one starts.

Why: a test run killed mid-way (Ctrl-C twice, SIGKILL, a CI timeout) leaves its dockerd running (it is started
in a session of its own), and once the run's process is gone nothing holds the cached data-root's lock: the
next run's daemon then shares that data-root with the leaked one, containerd waits on the other's database and
the container tests skipped with "dockerd not ready". A daemon of ours is one whose `-H` socket lies in a
`/tmp/sglops-dockerd-*` root; it is leaked when the process that started it (recorded in `<root>/owner`) is no
longer its parent. Daemons of live runs (another engineer's, a benchmark's) are never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT_PREFIX = "/tmp/sglops-dockerd-"
OWNER = "owner"


@dataclass(frozen=True)
class Daemon:
    pid: int
    ppid: int
    root: Path

    @property
    def socket(self) -> str:
        return f"unix://{self.root / 'docker.sock'}"


def _stat(pid: int) -> tuple[int, str] | None:
    """(ppid, process name) from /proc/PID/stat, None when the process is gone (or a zombie)."""
    try:
        head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
    except OSError:
        return None
    fields = rest.split()
    return None if fields[0] == "Z" else (int(fields[1]), head.split("(", 1)[1])


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def ours() -> list[Daemon]:
    """Every running dockerd whose socket is in a /tmp/sglops-dockerd-* root."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _argv(int(entry.name))
        if not argv or os.path.basename(argv[0]) != "dockerd" or "-H" not in argv[:-1]:
            continue
        sock = argv[argv.index("-H") + 1]
        if not sock.startswith(f"unix://{ROOT_PREFIX}"):
            continue
        st = _stat(int(entry.name))
        if st:
            found.append(Daemon(int(entry.name), st[0], Path(sock[len("unix://") :]).parent))
    return found


def record_owner(root: Path) -> None:
    """Written by whoever starts a daemon in ROOT: the process that must stay its parent."""
    (root / OWNER).write_text(f"{os.getpid()}\n")


def is_leaked(d: Daemon) -> bool:
    """Its starter is gone: not its parent any more (an orphan is re-parented to init or a subreaper)."""
    try:
        owner = int((d.root / OWNER).read_text().split()[0])
    # started without an owner record (a benchmark, older code)
    except (OSError, ValueError, IndexError):
        return d.ppid == 1 or _stat(d.ppid) is None
    return d.ppid != owner


def stop(d: Daemon, docker: str, grace: float = 30) -> str | None:
    """Containers first (else containerd shims stay), then TERM its process group, KILL after GRACE seconds;
    its root folder removed. None when it is gone, else why not."""
    env = {**os.environ, "DOCKER_HOST": d.socket}
    try:
        ids = subprocess.run(
            [docker, "ps", "-aq"], env=env, capture_output=True, text=True, timeout=30
        ).stdout.split()
        if ids:
            subprocess.run([docker, "rm", "-f", *ids], env=env, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        # the daemon may not answer at all: it is stopped below either way
        pass
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(d.pid, sig)
        except ProcessLookupError:
            break
        except PermissionError as exc:
            return f"cannot signal it: {exc}"
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _stat(d.pid):
            time.sleep(0.2)
        if not _stat(d.pid):
            break
    if _stat(d.pid):
        return "still running after TERM and KILL"
    subprocess.run(["rm", "-rf", str(d.root)], check=False)
    return None


def stop_leaked(docker: str) -> tuple[list[str], list[str]]:
    """(stopped, not stopped): one line each, naming the daemon's pid and root."""
    stopped, stuck = [], []
    for d in ours():
        if not is_leaked(d):
            continue
        why = stop(d, docker)
        line = f"dockerd pid {d.pid} ({d.root}) left by a killed run"
        if why:
            stuck.append(f"{line}: {why}")
        else:
            stopped.append(line)
    return stopped, stuck
