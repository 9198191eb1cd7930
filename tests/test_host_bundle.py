"""The host-code bundle (sglops/core/host_bundle.py): what it holds, and that a bare host python runs it.

A host has the standard library only, Python 3.8 or later; every module under sglops/host/ is sent as
source, so each must import nothing else and parse as 3.8. The bundle runs here through `--host local` (the
same bootstrap over stdin, no SSH), with this machine's stdlib-only /usr/bin/python3 and, where pyenv has one,
3.8.
"""

from __future__ import annotations

import ast
import base64
import json
import shutil
import sys
import zlib
from pathlib import Path

import pytest

from sglops.core import host_bundle
from sglops.core.errors import RemoteError
from sglops.core.hosts import LOCAL, Host
from sglops.core.remote import connect
from sglops.patch.names import parse as parse_python
from sglops.sandbox.sshd import HOST_PYTHON

MODULES = sorted(p.stem for p in host_bundle.SCRIPTS.glob("*.py"))
SCRIPTS = [m for m in MODULES if not m.startswith("_")]
PY38 = next((str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.8*/bin/python3.8"))), None)


def _tree(name: str) -> ast.Module:
    path = host_bundle.SCRIPTS / f"{name}.py"
    # SyntaxError: too new for a host
    return parse_python(path.read_text(), str(path), feature_version=(3, 8))


@pytest.mark.parametrize("name", MODULES)
def test_every_host_module_is_stdlib_only_and_parses_as_python_3_8(name):
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            tops = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            tops = [node.module.split(".")[0]]
        else:
            continue
        assert all(t in sys.stdlib_module_names for t in tops), f"{name}.py:{node.lineno} imports {tops}"


@pytest.mark.parametrize("name", MODULES)
def test_the_import_scan_finds_what_ast_finds(name):
    want: list[str] = []
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.level:
            for mod in [node.module] if node.module else [a.name for a in node.names]:
                if mod not in want:
                    want.append(mod)
    assert sorted(host_bundle.imports_of(name)) == sorted(want)


def test_a_bundle_holds_the_script_and_what_it_imports_once():
    assert host_bundle.modules("bench_client") == (
        "__init__",
        "bench_client",
        "_bench_metrics",
        "_fetch",
        "_bench_chat",
        "_common",
        "_bench_load",
        "_bench_request",
        "_bench_server",
        "_engine_here",
        "_server_engine",
        "_server_proc",
        "_server_info",
        "server_common",
        "_bench_stream",
        "_bench_sessions",
        "_vocab",
        "telemetry",
        "facts",
    )
    assert host_bundle.modules("patch_txn") == ("__init__", "patch_txn", "_common", "ab_journal", "patch_lib")
    sent = json.loads(host_bundle.payload("patch_txn", {"a": 1}))
    sources = json.loads(zlib.decompress(base64.b64decode(sent["bundle"])))
    assert sent["main"] == "patch_txn" and sent["args"] == {"a": 1}
    assert list(sources) == list(host_bundle.modules("patch_txn"))
    assert sources["patch_lib"] == (host_bundle.SCRIPTS / "patch_lib.py").read_text()
    with pytest.raises(FileNotFoundError):
        host_bundle.payload("no_such_script", {})


PYTHONS = [pytest.param(HOST_PYTHON, id="host-python3")] + (
    [pytest.param(PY38, id="python3.8")]
    if PY38
    else [
        pytest.param(
            None, id="python3.8", marks=pytest.mark.skip(reason="no pyenv python3.8 on this machine")
        )
    ]
)


@pytest.mark.parametrize("python", PYTHONS)
def test_a_bare_host_python_imports_every_script_and_answers(python, tmp_path, monkeypatch):
    """Each script's bundle imports on the host and reaches main(): an answer or a one-line error, never an
    ImportError, a SyntaxError or a NameError (what a missing import would give only on a host)."""
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    assert shutil.which(python)
    r = connect(Host(name="local", address=LOCAL, python=python))
    seen = {}
    for script in SCRIPTS:
        try:
            r.run_py(script, {"sglang_root": str(tmp_path / "none"), "port": 1}, timeout=60)
            seen[script] = "answer"
        except RemoteError as exc:
            seen[script] = str(exc)
    bad = {
        s: why
        for s, why in seen.items()
        if any(
            k in why for k in ("ImportError", "SyntaxError", "NameError", "ModuleNotFound", "gave no answer")
        )
    }
    assert not bad, bad
    assert seen["facts"] == "answer" and "SGLang not found" in seen["server_inspect"]


def test_a_host_traceback_names_the_real_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    r = connect(Host(name="local", address=LOCAL, python=HOST_PYTHON))
    with pytest.raises(RemoteError) as err:
        # no "root" in args: a bug-class KeyError with the frame it came from
        r.run_py("server_status", {})
    source = (host_bundle.SCRIPTS / "server_status.py").read_text().splitlines()
    msg = str(err.value)
    assert "KeyError: 'root'" in msg
    where = msg.rsplit("[File ", 1)[1]
    path, line = where.split('"')[1], int(where.split("line ")[1].split(",")[0])
    assert path == "sglops/host/server_status.py" and 'args["root"]' in source[line - 1]
