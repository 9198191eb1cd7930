"""`inv ARGS` run inside the test process (Invoke's own Program over tasks.py): fast, and what the user sees.

Returns (exit code, stdout, stderr). A traceback escaping a task is not caught: the test fails on it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from invoke import Collection, Program

REPO = Path(__file__).resolve().parent.parent
_namespace: Collection | None = None


def _tasks() -> Collection:
    global _namespace
    if _namespace is None:
        spec = importlib.util.spec_from_file_location("sglops_tasks", REPO / "tasks.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _namespace = Collection.from_module(module)
    return _namespace


def run_inv(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = 0
    try:
        Program(namespace=_tasks(), name="sglops", binary="inv").run(["inv", *args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err
