"""Fault injection on sandbox hosts, for the crash-point and read-only tests.

The host scripts stop themselves at a named durable step when SGLOPS_CRASH_AT (SIGKILL) or
SGLOPS_PAUSE_AT (sleep) is set in the HOST's environment (sglops/host/patch_lib.py).
No sglops flag or argument can set them: here a host entry `<name>-faults` reaches the same
sandbox sshd with `python:` pointing at a wrapper that sources an env file, kept outside the
host's home so a snapshot of the home sees nothing of it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import yaml

from sglops.core.hosts import load_inventory
from sglops.core.remote import Remote, connect
from sglops.sandbox.sshd import HOST_PYTHON, Sandbox


class Faults:
    """A copy of the sandbox's inventory with a fault-injecting twin of every host."""

    def __init__(self, sandbox: Sandbox, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.env_file = folder / "faults.env"
        wrapper = folder / "python-faults"
        wrapper.write_text(
            f'#!/bin/sh\nif [ -f "{self.env_file}" ]; then set -a; . "{self.env_file}"; set +a; fi\n'
            f'exec {HOST_PYTHON} "$@"\n'
        )
        wrapper.chmod(0o755)
        doc = yaml.safe_load(sandbox.inventory.read_text())
        doc["hosts"] += [
            {**h, "name": f"{h['name']}-faults", "python": str(wrapper), "node_rank": 100 + i}
            for i, h in enumerate(list(doc["hosts"]))
        ]
        self.inventory = folder / "hosts.yaml"
        self.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.clear()

    def set(self, **env: str | int) -> None:
        """The host environment for the next commands on a `-faults` host, e.g. SGLOPS_CRASH_AT=3."""
        self.env_file.write_text("".join(f"{k}='{v}'\n" for k, v in env.items()))

    def clear(self) -> None:
        self.env_file.write_text("")

    def connect(self, name: str) -> Remote:
        inv = load_inventory(self.inventory)
        return connect(inv.get(name), inventory=inv)


def home_snapshot(home: Path, *, hashes: bool = True) -> dict[str, tuple]:
    """Every path under a sandbox host's home: kind, mode, mtime (ns), inode, size, and the content
    hash of files (links: their target). What "read-only" means, checked whole rather than by
    `git status`. A write changes the mtime, a rename-over the inode, so without hashes (quicker,
    for sweeps) a change is still seen. (Not ctime: the trees' git objects are hard links shared
    with other clones, whose link counts, and so ctimes, change under us.)"""
    out: dict[str, tuple] = {}
    base = str(home)
    for dirpath, dirs, files in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            out[os.path.normpath(os.path.join(rel_dir, name))] = _entry(path, hashes)
    out["."] = _entry(base, False)
    return {p: e for p, e in out.items() if not _probe_cache(p)}


def _probe_cache(rel: str) -> bool:
    """The probes' answer cache (sglops/host/_tree_cache.py: ~/.cache/sglops/probe-scan) is a cache a
    read-only probe may fill, never state: it and the folders that only hold it are left out of "what
    changed"."""
    return rel in (".cache", ".cache/sglops") or rel == PROBE_CACHE or rel.startswith(PROBE_CACHE + "/")


PROBE_CACHE = ".cache/sglops/probe-scan"


def _entry(path: str, hashes: bool) -> tuple:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path), st.st_ino)
    meta = (oct(st.st_mode), st.st_mtime_ns, st.st_ino, st.st_size)
    if stat.S_ISDIR(st.st_mode):
        return ("dir", *meta)
    if not hashes:
        return ("file", *meta)
    with open(path, "rb") as fh:
        return ("file", *meta, hashlib.sha256(fh.read()).hexdigest())


def snapshot_diff(before: dict, after: dict) -> list[str]:
    """What changed between two home snapshots, one line each (empty when nothing did)."""
    lines = [f"added {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    lines += [
        f"changed {p}: {before[p]} -> {after[p]}"
        for p in sorted(before.keys() & after.keys())
        if before[p] != after[p]
    ]
    return lines
