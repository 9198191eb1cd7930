"""Decision cases as data, one YAML file per decision (pyinfra's fact/operation fixtures, in YAML).

Each file holds a `cases:` list; every case has an `id` (the pytest id) and whatever its decision needs.
`tests/test_decisions_*.py` read them with `cases(name)` and run one parametrized test over them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).parent


def document(name: str) -> dict:
    """The whole case file tests/cases/NAME.yaml."""
    return yaml.safe_load((HERE / f"{name}.yaml").read_text())


def cases(name: str) -> list:
    """The file's cases as pytest params, one id each (a repeated id is a mistake in the file)."""
    found = document(name)["cases"]
    ids = [c["id"] for c in found]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"tests/cases/{name}.yaml: repeated case ids {dupes}")
    return [pytest.param(c, id=c["id"]) for c in found]
