"""No dead names in sglops: vulture at 60% confidence over the product, the tests and the benchmarks (a name
only a test uses is alive) lists nothing in sglops/ beyond scripts/dead_names_allowlist.py, where each name
says why."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from conftest import REPO

vulture = pytest.importorskip("vulture")


def test_vulture_finds_no_dead_name_in_the_product():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vulture",
            "sglops",
            "tests",
            "benchmarks",
            "scripts",
            "--min-confidence",
            "60",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    dead = [line for line in r.stdout.splitlines() if line.startswith("sglops/")]
    assert not dead, (
        "dead names (delete them, or say in scripts/dead_names_allowlist.py why they live):\n"
        + "\n".join(dead)
    )


def test_the_allowlist_holds_no_name_that_is_gone():
    # a name the allowlist keeps alive must still exist somewhere in sglops/
    tree = ast.parse((REPO / "scripts" / "dead_names_allowlist.py").read_text())
    names = {
        n.value.attr if isinstance(n.value, ast.Attribute) else n.value.id
        for n in tree.body
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Attribute | ast.Name)
    }
    source = "\n".join(p.read_text() for p in (REPO / "sglops").rglob("*.py"))
    assert len(names) > 20 and not [n for n in sorted(names) if n not in source]
