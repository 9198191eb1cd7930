"""Names a patched Python file uses but never defines: a variant that applies as text can still be wrong.

SGLang renames helpers between releases (0.5.15's `dcp_enabled()` is `get_parallel().dcp_enabled` in 0.5.17),
so a variant written for one release can apply cleanly to the next and raise NameError only when the server
first runs that line (on the H200: at the first decode plan, ~50 s into a restart). Python's compile() accepts
such a file; this check does not. It is deliberately simple (any binding anywhere in the module counts, star
imports disable it) so that it never refuses a correct patch, and it reports only names the patch introduced.
"""

from __future__ import annotations

import ast
import builtins
import gc
import threading
from typing import Any

# CPython 3.11's AST constructor checks that the thread's recursion depth is the same after as before; a
# garbage collection that runs a finalizer with Python code in the middle (an asyncio task's __del__ logging
# "Task was destroyed") breaks that: "SystemError: AST constructor recursion depth mismatch". Parse with the
# collector paused, one parse at a time (gc state is per process).
_PARSE = threading.Lock()


def parse(text: str, filename: str = "<unknown>", **options: Any) -> ast.Module:
    """ast.parse (same arguments), safe from a collector's finalizer running in its middle; the tests parse
    patched SGLang files and sglops' own sources with it."""
    with _PARSE:
        was = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(text, filename, **options)
        finally:
            if was:
                gc.enable()


MODULE_NAMES = {
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__loader__",
    "__package__",
    "__builtins__",
    "__path__",
    "__annotations__",
    "__dict__",
    "__class__",
    "__qualname__",
    "__module__",
}


def _bound(tree: ast.AST) -> set[str] | None:
    """Every name the module binds anywhere (None: a star import makes that unknowable)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def unbound(text: str) -> dict[str, int] | None:
    """{name: first line} of names loaded but bound nowhere;
    None when the text does not parse or has `import *`."""
    try:
        tree = parse(text)
    except (SyntaxError, RecursionError):
        return None
    bound = _bound(tree)
    if bound is None:
        return None
    known = bound | set(dir(builtins)) | MODULE_NAMES
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known:
            out[node.id] = min(out.get(node.id, node.lineno), node.lineno)
    return out


def introduced(old: str | None, new: str) -> dict[str, int]:
    """Unbound names of `new` that `old` did not already have: what the patch itself would make raise."""
    after = unbound(new)
    if not after:
        return {}
    before = unbound(old) if old is not None else {}
    return {n: line for n, line in sorted(after.items(), key=lambda kv: kv[1]) if n not in (before or {})}
