"""Parse once: a bench's flags become one plan on the laptop; its parsers have one production caller each; the
host script is sent every declared flag under its declared name (and keeps no defaults of its own)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from sglops.bench.params import BENCH, LOADS
from sglops.bench.plan import FLAGS, plan_bench
from sglops.core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _calls() -> tuple[tuple[str, str], ...]:
    """Every attribute call in sglops/ (the production code): (called name, file:line), parsed once."""
    out = []
    for path in (ROOT / "sglops").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                out.append((node.func.attr, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return tuple(out)


def _callers(name: str) -> list[str]:
    """Production calls of `x.NAME`, as file:line."""
    return [where for called, where in _calls() if called == name]


@pytest.mark.parametrize("name", ["levels", "parse_dataset", "parse_slo"])
def test_each_parser_has_one_production_caller(name):
    assert _callers(name) == [c for c in _callers(name) if c.startswith("sglops/bench/plan.py")]
    assert len(_callers(name)) == 1


def test_host_args_carry_every_declared_flag_by_its_name():
    plan = plan_bench({"concurrency": "1,4", "dataset": "random:input=4-8"})
    args = plan.host_args()
    assert set(FLAGS) <= set(args) and {p.name for p in (*BENCH, *LOADS)} == set(FLAGS)
    assert args["concurrency"] == [1, 4] and [lv["concurrency"] for lv in args["levels"]] == [1, 4]
    assert args["dataset"] == {"kind": "random", "input": [4, 8]} and args["warmup"] == 1


def test_the_host_script_reads_flags_without_defaults():
    """Every flag the host script reads from args is read as args["name"], never args.get("name", default)."""
    text = (ROOT / "sglops/host/bench_client.py").read_text()
    defaulted = re.findall(r'args\.get\("(\w+)",\s*[^)]', text)
    assert [n for n in defaulted if n in FLAGS] == []


def test_checked_flags_are_not_parsed_again():
    """The runner's checked values (a list for --concurrency) go straight in; raw ones are checked here."""
    assert plan_bench({"concurrency": [2, 8]}, checked=True).levels == (
        {"concurrency": 2, "rate": None},
        {"concurrency": 8, "rate": None},
    )
    with pytest.raises(ConfigError, match="--concurrency"):
        plan_bench({"concurrency": "2,,8"})
    with pytest.raises(ConfigError, match="--duration and --requests"):
        plan_bench({"duration": 5, "requests": 3})
    with pytest.raises(ConfigError, match="not a bench flag"):
        plan_bench({"concurency": 2})
