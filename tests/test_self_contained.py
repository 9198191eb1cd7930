"""The suite runs from a clone alone: no test, module, bench or script reads a path beside the repository."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

OUTSIDE = re.compile(r"""REPO(?:_ROOT)?\.parent\b|["']\.\./shared|/work/shared|parent\.parent\.parent""")
# holds the patterns themselves
THIS = Path(__file__).resolve()


def test_no_test_or_module_reads_beside_the_repo():
    files = [
        p
        for folder in ("tests", "sglops", "benchmarks", "scripts")
        for p in sorted((REPO / folder).rglob("*"))
        if p.suffix in (".py", ".sh") and p.is_file() and p.resolve() != THIS
    ]
    found = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert len(files) > 50 and found == []
