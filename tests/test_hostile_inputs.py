"""Every bad input a user can give ends in one line on stderr, a non-zero exit, and nothing changed.

The cases are data: tests/cases/hostile/*.yaml (files, flags, names, values, host lists, known_hosts, play
templates, YAML that attacks the loader), each run as `inv ...` inside the test process (Invoke's own Program
over tasks.py, so what Invoke parses is tested too). After each: exactly one line on stderr, no traceback, the
documented exit class, a piece (`says`) or a pattern (`matches`) of that line, and nothing written: the
artifacts folder, the inventory, the case's own input files and the sandbox hosts' trees as they were.

A case:
    - id: inventory port is text           # unique
      argv: [facts, --host, gpu-a]          # `inv ARGS`; an item may be {parts: [[text, times], ...]}
      files: {inv.yaml: "hosts: ..."}       # under {tmp}; a value may be {bytes: latin-1 text},
                                            # {parts: [[text, times], ...]} or {folder: true}
      env: {SGLOPS_INVENTORY: "{tmp}/inv.yaml"}
      # optional: a hostile HTTP server on loopback (tests/hostile_server.py)
      server: endless-tokens
      # optional: another operator's ab/sweep journal on gpu-a first
      # (who: live = a live process of this machine, far = another machine's)
      owner: {what: ab, who: live}
      exit: usage                           # usage | connect | timeout | remote | refused | failed
      says: "inv.yaml:2: port"              # or matches: REGEX
Placeholders in argv, env and files: {tmp}, {port:HOST}, {keyline:HOST} (its known_hosts line), {hostkey:HOST}
(that line without its host pattern), {root:HOST},
{key} (the client's private key), {user}, {server} (the hostile server's port).
"""

from __future__ import annotations

import getpass
import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile_server import BEHAVIOURS, HostileServer
from inproc import run_inv

from sglops.core import errors

CASES_DIR = Path(__file__).parent / "cases" / "hostile"
EXIT = {
    "failed": 1,
    "usage": errors.EXIT_USAGE,
    "connect": errors.EXIT_CONNECT,
    "timeout": errors.EXIT_TIMEOUT,
    "remote": errors.EXIT_REMOTE,
    "refused": errors.EXIT_REFUSED,
}
FIELDS = {"id", "argv", "files", "env", "server", "owner", "exit", "says", "matches"}
SANDBOX_HOSTS = ("gpu-a", "gpu-b")


def load_cases() -> list[dict]:
    cases = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()):
            unknown = set(case) - FIELDS
            assert not unknown, f"{path.name}: {case.get('id')}: unknown fields {unknown}"
            assert case["exit"] in EXIT, f"{path.name}: {case['id']}: exit {case['exit']!r}"
            assert case.get("server", "endless-tokens") in BEHAVIOURS, f"{path.name}: {case['id']}: server"
            cases.append({**case, "file": path.name})
    return cases


CASES = load_cases()


def _made(value: Any) -> str | bytes | None:
    """A case's value as text or bytes ({parts: ...} repeated, {bytes: ...} latin-1); None for a folder."""
    if isinstance(value, str):
        return value
    if "parts" in value:
        return "".join(text * times for text, times in value["parts"])
    if "bytes" in value:
        return value["bytes"].encode("latin-1")
    assert value == {"folder": True}, value
    return None


def _placeholders(sandbox, tmp: Path) -> dict[str, str]:
    subs = {"{tmp}": str(tmp), "{key}": str(sandbox.client_key), "{user}": getpass.getuser()}
    for name in SANDBOX_HOSTS:
        h = sandbox.host(name)
        subs |= {
            f"{{port:{name}}}": str(h.client_port),
            f"{{keyline:{name}}}": h.host_key_line().strip(),
            f"{{hostkey:{name}}}": h.host_key_line().split(" ", 1)[1].strip(),
            f"{{root:{name}}}": str(h.sglang_root),
        }
    return subs


def _fill(value: str | bytes, subs: dict[str, str]) -> str | bytes:
    if isinstance(value, bytes):
        return value
    for k, v in subs.items():
        value = value.replace(k, v)
    return value


def _digest(folder: Path, skip: tuple[str, ...] = ()) -> str:
    """Every file under folder, by path and content (an absent folder has its own digest)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")) if folder.exists() else []:
        if p.name not in skip:
            h.update(str(p.relative_to(folder)).encode() + (p.read_bytes() if p.is_file() else b"/"))
    return h.hexdigest()


def _tree(root: Path) -> str:
    """A sandbox host's tree: git's view of its files, and sglops' state on it (ledger, journal, backups,
    transactions). The empty lock file a refused change takes stays out: it records nothing."""
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    return status + _digest(root / ".sglops", skip=("lock", ".gitignore"))


def test_the_corpus_is_large_and_covers_every_kind_of_input():
    assert len(CASES) >= 306, len(CASES)
    ids = [c["id"] for c in CASES]
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})
    assert {c["exit"] for c in CASES} >= {"usage", "connect", "remote", "refused"}
    assert len({c["file"] for c in CASES}) >= 8


def _journal_of_another_operator(sandbox, owner: dict) -> Path:
    """An ab or sweep of another operator, owning gpu-a: its journal, written as the host keeps it."""
    import json
    import os

    from sglops.core import owner as owners
    from sglops.host import ab_journal

    who = (
        {**owners.me(), "pid": os.getppid()}
        if owner["who"] == "live"
        else {"user": "ops", "machine": "laptop-far-away", "pid": 4242}
    )
    path = Path(ab_journal.path(str(sandbox.host("gpu-a").sglang_root), create=True))
    path.write_text(
        json.dumps(
            {
                "kind": "sglops-ab-journal",
                "version": 1,
                "run_id": f"other-{owner['what']}",
                "what": owner["what"],
                "owner": who,
                "started": "2026-12-06T05:00:00Z",
                "found": {"running": False, "profile": None, "port": None, "patches": []},
                "managed": ["gather-cast"],
                "adopted_from": [],
                "nodes": [],
            }
        )
    )
    return path


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_a_hostile_input_ends_in_one_line(case, use_sandbox, tmp_path, monkeypatch, capsys):
    if case.get("owner"):
        journal = _journal_of_another_operator(use_sandbox, case["owner"])
        try:
            _one_case(case, use_sandbox, tmp_path, monkeypatch, capsys, {})
        finally:
            journal.unlink()
    elif case.get("server"):
        with HostileServer(case["server"]) as srv:
            _one_case(case, use_sandbox, tmp_path, monkeypatch, capsys, {"{server}": str(srv.port)})
    else:
        _one_case(case, use_sandbox, tmp_path, monkeypatch, capsys, {})


def _one_case(case, use_sandbox, tmp_path, monkeypatch, capsys, more: dict[str, str]) -> None:
    work = tmp_path / "in"
    work.mkdir()
    subs = {**_placeholders(use_sandbox, work), **more}
    for rel, value in (case.get("files") or {}).items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        content = _made(value)
        if content is None:
            path.mkdir()
        else:
            content = _fill(content, subs)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for key, value in (case.get("env") or {}).items():
        monkeypatch.setenv(key, _fill(value, subs))
    argv = [_fill(_made(a), subs) for a in case["argv"]]
    named = " ".join(argv) + " ".join(str(v) for v in (case.get("files") or {}).values())
    artifacts = Path(tmp_path / "artifacts")
    trees = {
        h: use_sandbox.host(h).sglang_root for h in SANDBOX_HOSTS if h in named or f"{{port:{h}}}" in named
    }

    def snapshot() -> tuple:
        return (
            _digest(artifacts),
            use_sandbox.inventory.read_bytes(),
            _digest(work),
            {h: _tree(r) for h, r in trees.items()},
        )

    before = snapshot()
    code, out, err = run_inv(capsys, *argv)

    lines = err.strip().splitlines()
    assert len(lines) == 1, f"want one line on stderr, got:\n{err[:3000]}"
    assert "Traceback" not in err
    assert code == EXIT[case["exit"]], lines[0][:500]
    assert case.get("says", "") in lines[0], lines[0][:500]
    if case.get("matches"):
        assert re.search(case["matches"], lines[0]), lines[0][:500]
    assert snapshot() == before, "the input changed something"
