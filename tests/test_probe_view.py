"""`inv probe-backends` reads at 80 and 100 columns (issue 41, item 6), against a sandbox host over SSH.

The default is a compact table: one line per backend, no line wider than the terminal. `--wide` has every
file:line the probes found, and wrapping never splits one: the file:line words of an 80- or 100-column run are
exactly those of a 400-column run.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import inv_cmd

FILE_LINE = re.compile(r"[\w./-]+\.(?:py|cuh|h):\d+")


def probe(env: dict, columns: int, *flags: str) -> list[str]:
    r = inv_cmd("probe-backends", "--host", "gpu-a", *flags, env={**env, "COLUMNS": str(columns)})
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.splitlines()


@pytest.fixture(scope="module")
def env(sandbox, tmp_path_factory) -> dict:
    return {
        "SGLOPS_INVENTORY": str(sandbox.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path_factory.mktemp("art")),
    }


@pytest.fixture(scope="module")
def backends(env) -> list[dict]:
    r = inv_cmd("probe-backends", "--host", "gpu-a", "--json", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)["backends"]


@pytest.mark.parametrize("columns", [80, 100])
def test_compact_table_one_line_per_backend(env, backends, columns):
    lines = probe(env, columns)
    assert max(len(line.rstrip()) for line in lines) <= columns
    head = next(i for i, line in enumerate(lines) if line.startswith("backend "))
    table = lines[head + 1 : next(i for i, line in enumerate(lines) if line.startswith("FP8: "))]
    rows = [line for line in table if line.split(" ", 1)[0] in {b["name"] for b in backends}]
    # every backend, each on one line
    assert [r.split()[0] for r in rows] == [b["name"] for b in backends]
    casting = next(r for r in rows if r.startswith("flashinfer_mla "))
    assert casting.split()[1:4] == ["no", "yes", "yes"] and "casts whole pool" in casting
    # the evidence is --wide's
    assert not FILE_LINE.search("\n".join(rows))
    assert any(line.startswith("FLAG: sglang 0.5.23 flashinfer_mla") for line in lines)
    assert len(lines) < 100, len(lines)


@pytest.fixture(scope="module")
def whole(env) -> list[str]:
    """The file:line words of a --wide run too wide to wrap anything."""
    return FILE_LINE.findall("\n".join(probe(env, 400, "--wide")))


@pytest.mark.parametrize("columns", [80, 100])
def test_wide_never_splits_a_file_line(env, whole, columns):
    lines = probe(env, columns, "--wide")
    assert max(len(line.rstrip()) for line in lines) <= columns
    assert sorted(FILE_LINE.findall("\n".join(lines))) == sorted(whole)
    assert "overrides.py:1210" in whole and "no architecture guard found" in "\n".join(lines)


def test_show_hits_lists_each_hit_on_a_line_of_its_own(env):
    lines = probe(env, 100, "--show-hits")
    hits = [line for line in lines if re.match(r"^\S+_backend\.py:\d+  ", line)]
    assert any("flashinfer_mla_backend.py:822" in line for line in hits)
