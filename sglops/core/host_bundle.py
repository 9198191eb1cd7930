"""Host code as a bundle: a remote script and the host modules it imports, for one stdin write.

Why: the host scripts (sglops/host/) are real modules with real imports (`from ._common import
UserError, sh`), linted like the rest of sglops; a host has only the standard library and nothing of sglops
installed. So run_py sends the sources a script needs (found from its relative imports), zlib-compressed, and
BOOTSTRAP, a few stdlib lines that import them from memory through a meta path finder on the host (Python 3.8
or later): still one round trip, nothing written on the host. On the host the package is named PACKAGE; its
modules' file names read `sglops/host/NAME.py`, so a host traceback points at the file here.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent.parent / "host"
PACKAGE = "sglops_host"
WHERE = "sglops/host"
RESULT_MARKER = "@@SGLOPS-RESULT@@"

# Runs on the host (`python -c`): read {main, bundle, args} from stdin, put the bundle's modules behind a meta
# path finder, import the script, call main(args), print the JSON answer after a marker so stray prints from
# the script cannot corrupt it. No importlib.abc/util: on 3.11 they import importlib.resources (+17 ms a
# step); get_source lets a host traceback quote the bundled lines.
# The finder alone (needs P, W, S and `m` = importlib.machinery in scope): BOOTSTRAP's middle, and what a
# bench harness uses to import a bundle the way a host does.
FINDER = (
    "class F:\n"
    " def key(s,n):\n"
    "  k='__init__' if n==P else n[len(P)+1:] if n.startswith(P+'.') else None\n"
    "  return k if k in S else None\n"
    " def find_spec(s,n,p=None,t=None):\n"
    "  if s.key(n): return m.ModuleSpec(n,s,is_package=n==P)\n"
    " def create_module(s,spec): return None\n"
    " def exec_module(s,mod):\n"
    "  k=s.key(mod.__name__)\n"
    "  exec(compile(S[k],W+'/'+k+'.py','exec',dont_inherit=True),mod.__dict__)\n"
    " def get_source(s,n): return S[s.key(n)]\n"
    " def is_package(s,n): return n==P\n"
    "sys.meta_path.insert(0,F())\n"
)
BOOTSTRAP = (
    "import sys,json,zlib,binascii,traceback,importlib,importlib.machinery as m\n"
    "e=json.loads(sys.stdin.buffer.read())\n"
    "P=" + repr(PACKAGE) + ";W=" + repr(WHERE) + "\n"
    "S=json.loads(zlib.decompress(binascii.a2b_base64(e['bundle'])))\n" + FINDER + "try:\n"
    " r={'ok':True,'result':importlib.import_module(P+'.'+e['main']).main(e['args'])}\n"
    "except BaseException as x:\n"
    " r={'ok':False,'user':type(x).__name__=='UserError','error':str(x) or type(x).__name__,\n"
    "    'type':type(x).__name__,'traceback':traceback.format_exc()}\n"
    "sys.stdout.write('\\n" + RESULT_MARKER + "'+json.dumps(r)+'\\n')\n"
    "sys.stdout.flush()\n"
)


def _path(name: str) -> Path:
    path = SCRIPTS / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no remote script {name!r} in {SCRIPTS}")
    return path


_RELATIVE = re.compile(r"^[ \t]*from[ \t]+(\.+)[ \t]*(\w*)[ \t]+import[ \t]+(.*)$", re.M)


def imports_of(name: str) -> list[str]:
    """The host modules `name` imports itself (`from .x import a`, `from . import x`), in source order.

    A line scan, not `ast`: parsing every module cost ~40 ms on the first run_py of a process
    (tests/test_host_bundle.py checks the scan against ast for every module).
    """
    found: list[str] = []
    for dots, module, names in _RELATIVE.findall(_path(name).read_text()):
        if len(dots) > 1 or (not module and "(" in names):
            raise ValueError(
                f"{_path(name)}: write `from .x import a` or `from . import x, y` on one line "
                "(host modules import from their own package only)"
            )
        for mod in [module] if module else [n.split(" as ")[0].strip() for n in names.split(",")]:
            if mod not in found:
                found.append(mod)
    return found


@functools.cache
def modules(script: str) -> tuple[str, ...]:
    """The script and every host module it needs, each once (the package's __init__ first)."""
    order: list[str] = ["__init__"]

    def visit(name: str) -> None:
        if name in order:
            return
        order.append(name)
        for dep in imports_of(name):
            visit(dep)

    visit(script)
    return tuple(order)


@functools.cache
def bundle(script: str) -> str:
    """The sources of modules(script) as base64(zlib(JSON)): built once per process and script."""
    sources = {name: _path(name).read_text() for name in modules(script)}
    return base64.b64encode(zlib.compress(json.dumps(sources).encode(), 6)).decode("ascii")


def payload(script: str, args: Mapping[str, Any] | None = None) -> bytes:
    """What run_py writes to the host's stdin for BOOTSTRAP."""
    return json.dumps({"main": script, "bundle": bundle(script), "args": dict(args or {})}).encode()
