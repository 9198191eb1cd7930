"""The result contract (sglops.core.result): every result a task or play step prints is a Result whose JSON
carries changed / dry_run / plan, with changed derived from what the step did. Real instances, no host.

Which classes are results is not taken from the view registry (a class added without a view would pass
unseen): the operation catalogue names what each operation returns, and the whole package is walked for every
class that answers with to_json() or subclasses Result."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import typing

import pytest

import sglops
from sglops.bench.compare import RunList
from sglops.core import errors
from sglops.core.errors import SglopsError
from sglops.core.result import Observation, Planned, Result
from sglops.experiment.ab_plan import Found, Side, Step
from sglops.experiment.ab_result import AbResult
from sglops.kernel.build import KernelAction, KernelBuild
from sglops.launch.results import LogLines, RestartResult, ServerStatus, StopResult
from sglops.ops import OPS
from sglops.patch.apply import PatchList, PatchResult
from sglops.patch.capture import Capture
from sglops.play.ops import OPS as PLAY_OPS
from sglops.play.run import PlayResult, StepRecord
from sglops.probe.facts import Facts
from sglops.views.show import every_view, render, show

# each domain's views, registered (a task registers only those of the result it prints)
every_view()

# operations that print no result of their own, and why
NO_RESULT = {
    "demo": "runs two plays and prints their lines itself",
    "sandbox": "starts or stops local sandbox hosts and prints what it did",
}

# Printable results (to_json + table) that are not step results under the contract, and why: none left
# (Capture, Facts, ProbeReport and RunList answer the contract too).
NOT_STEP_RESULTS: dict[str, str] = {}


def _defined_classes() -> list[type]:
    found = []
    for m in pkgutil.walk_packages(sglops.__path__, "sglops."):
        if m.name.startswith(("sglops.host", "sglops.sandbox")):
            continue
        mod = importlib.import_module(m.name)
        found += [c for c in vars(mod).values() if inspect.isclass(c) and c.__module__ == mod.__name__]
    return found


def _printable_results() -> list[type]:
    """Every result class the package defines (a Result, or anything an operation returns), contract
    exceptions aside."""
    returned = {op.result_type() for op in [*OPS, *PLAY_OPS]} - {None}
    return [
        c
        for c in _defined_classes()
        if c.__name__ not in NOT_STEP_RESULTS
        and ((issubclass(c, Result) and c not in (Result, Observation)) or c in returned)
    ]


def test_every_printable_result_follows_the_contract():
    classes = _printable_results()
    assert len(classes) >= 15, classes
    assert [c.__name__ for c in classes if not issubclass(c, Result)] == []


def test_every_operation_names_its_result_and_every_result_has_a_view():
    """The catalogue's result types, and every Result class defined anywhere, each with its view: a result
    class added without one fails here, not when an operator prints it."""
    ops = [*OPS, *PLAY_OPS]
    assert {op.name for op in ops if op.result_type() is None} == set(NO_RESULT)
    # a union (probe-backends: an SGLang or a vLLM tree's report) names each of its types
    returned = {
        c
        for op in ops
        if op.result_type() is not None
        for c in (typing.get_args(op.result_type()) or (op.result_type(),))
    }
    assert [c for c in returned if not isinstance(c, type)] == []
    viewless = [
        c.__name__
        for c in {*returned, *_printable_results()}
        if c not in render.registry and c not in show.registry
    ]
    assert viewless == [], "register a view for each in sglops.views.show"


def test_the_catalogue_names_types_not_module_paths():
    """Results, views and live displays are found by type: no domain holds a module path ("sglops.x.y" or
    "module:name") in a string, and no module outside the runners and views imports by a name in a string."""
    import ast
    from pathlib import Path

    root = Path(sglops.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.parts[len(root.parts)] in ("host", "views", "cli", "play"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"sglops(\.[a-z_]+)+(:[A-Za-z_]+)?", node.value)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                "importlib.import_module",
                "import_module",
                "__import__",
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
    from sglops.core.console import Live

    assert {op.live for op in [*OPS, *PLAY_OPS]} - {None} <= set(Live)


def test_an_unregistered_result_class_fails_the_view_check():
    from dataclasses import dataclass

    @dataclass
    class Unviewed(Observation):
        host: str

        def payload(self) -> dict:
            return {"host": self.host}

    assert Unviewed not in render.registry
    with pytest.raises(TypeError, match="no view for Unviewed"):
        render(Unviewed("h"))


def test_views_live_in_the_view_layer():
    """A result class with a registered view keeps no table() of its own (one place renders it)."""
    moved = [c for c in render.registry if c is not object]
    assert {c.__name__ for c in moved} >= {
        "TraceAnalysis",
        "TraceDiff",
        "ProfileResult",
        "BenchResult",
        "Comparison",
        "RunList",
        "AbResult",
        "PatchResult",
        "PatchList",
        "Capture",
        "KernelBuild",
        "KernelAction",
        "ProbeReport",
        "Facts",
        "PlayResult",
        "Planned",
    }
    assert [c.__name__ for c in moved if hasattr(c, "table") or hasattr(c, "markdown")] == []


def test_no_domain_class_builds_its_own_table():
    """Tables and progress widgets live in sglops.views only: no class elsewhere has a table() left."""
    left = []
    for m in pkgutil.walk_packages(sglops.__path__, "sglops."):
        if m.name.startswith(("sglops.host", "sglops.sandbox", "sglops.views")):
            continue
        mod = importlib.import_module(m.name)
        left += [
            f"{mod.__name__}.{c.__name__}"
            for c in vars(mod).values()
            if inspect.isclass(c) and c.__module__ == mod.__name__ and "table" in vars(c)
        ]
    assert left == []


def _restart(**kw):
    return RestartResult("h", "p", True, "healthy", 30000, **kw)


def _ab(dry_run: bool, rounds: int = 0):
    side = Side("A", "default", "default", ())
    from sglops.experiment.ab_result import Round

    return AbResult(
        "h",
        side,
        Side("B", "default+x", "default", ("x",)),
        2,
        Found(True, "default", 30000, []),
        [],
        [Step("restart", "default", 1, "A"), Step("bench", "3 runs", 1, "A")],
        {},
        dry_run=dry_run,
        rounds=[Round(1, "A", None, "ok") for _ in range(rounds)] if rounds else [],
    )


# (label, instance factory, changed, dry_run, plan is non-empty)
CASES = [
    (
        "restart dry run",
        lambda: RestartResult("h", "p", False, "dry-run", 1, dry_run=True, plan=["stop pid 1", "start p"]),
        False,
        True,
        True,
    ),
    ("restart started", lambda: _restart(pid=42), True, False, False),
    (
        "restart died after stopping",
        lambda: RestartResult("h", "p", False, "died", 1, stopped_pid=7),
        True,
        False,
        False,
    ),
    (
        "rollback with nothing to do",
        lambda: RestartResult("h", None, False, "died", 1, rollback=True),
        False,
        False,
        False,
    ),
    ("stop dry run", lambda: StopResult("h", False, dry_run=True, plan=["kill -TERM 5"]), False, True, True),
    ("stop", lambda: StopResult("h", True, pid=5, signal="TERM"), True, False, False),
    ("stop, nothing running", lambda: StopResult("h", False), False, False, False),
    (
        "status",
        lambda: ServerStatus("h", False, None, None, None, None, None, [], "/l", []),
        False,
        False,
        False,
    ),
    ("logs", lambda: LogLines("h", "/l", ["x"]), False, False, False),
    ("patch applied", lambda: PatchResult("h", "p", "applied", True, files=["a.py"]), True, False, False),
    (
        "patch dry run",
        lambda: PatchResult("h", "p", "would apply", False, variant="v1", files=["a.py"], diff="+x"),
        False,
        True,
        True,
    ),
    ("patch already applied", lambda: PatchResult("h", "p", "already applied", False), False, False, False),
    ("kernel built", lambda: KernelBuild("h", "k", "built", "sm90", "ab" * 32, {}), True, False, False),
    (
        "kernel unchanged",
        lambda: KernelBuild("h", "k", "unchanged", "sm90", "ab" * 32, {}),
        False,
        False,
        False,
    ),
    (
        "kernel dry run",
        lambda: KernelBuild(
            "h",
            "k",
            "would-build",
            "sm90",
            "ab" * 32,
            {},
            commands={"build": {"env": {"A": "1"}, "argv": ["make"]}},
        ),
        False,
        True,
        True,
    ),
    (
        "kernel uninstalled",
        lambda: KernelAction("h", {"status": "uninstalled", "name": "k"}),
        True,
        False,
        False,
    ),
    (
        "kernel uninstall dry run",
        lambda: KernelAction("h", {"status": "would-uninstall", "install_path": "/x"}),
        False,
        True,
        True,
    ),
    ("kernel list", lambda: KernelAction("h", {"installed": [], "state_dir": "/s"}), False, False, False),
    ("patch list", lambda: PatchList("h", "0.5", []), False, False, False),
    ("ab dry run", lambda: _ab(True), False, True, True),
    ("ab rounds ran", lambda: _ab(False, rounds=2), True, False, True),
    (
        "capture dry run",
        lambda: Capture(
            "h",
            "p",
            "v",
            "commit",
            ["a.py"],
            "+x",
            dry_run=True,
            targets=["patches/p/v.diff", "patches/p/patch.yaml"],
        ),
        False,
        True,
        True,
    ),
    (
        "capture written",
        lambda: Capture(
            "h",
            "p",
            "v",
            "commit",
            ["a.py"],
            "+x",
            written=["patches/p/v.diff"],
            targets=["patches/p/v.diff"],
        ),
        False,
        False,
        False,
    ),
    ("facts", lambda: Facts("h", {"gpus": []}), False, False, False),
    ("run list", lambda: RunList([{"run_id": "r"}]), False, False, False),
    ("play step planned", lambda: Planned("bench 3 repeats"), False, True, True),
    (
        "play dry run",
        lambda: PlayResult(
            "p", "h", "r-dry", True, [StepRecord("s1", "bench", "ok", result=Planned("bench 3").to_json())]
        ),
        False,
        True,
        True,
    ),
    (
        "play that patched",
        lambda: PlayResult(
            "p",
            "h",
            "r",
            False,
            [StepRecord("s1", "apply-patch", "ok", result=PatchResult("h", "p", "applied", True).to_json())],
        ),
        True,
        False,
        False,
    ),
]


@pytest.mark.parametrize("label,make,changed,dry_run,planned", CASES, ids=[c[0] for c in CASES])
def test_result_json_carries_the_contract(label, make, changed, dry_run, planned):
    r = make()
    assert isinstance(r, Result)
    doc = r.to_json()
    assert (doc["changed"], doc["dry_run"], bool(doc["plan"])) == (changed, dry_run, planned)
    assert all(isinstance(line, str) for line in doc["plan"])
    assert not (doc["changed"] and doc["dry_run"]), "a dry run never changes the host"


def test_observations_never_change_anything():
    for cls in _printable_results():
        if issubclass(cls, Observation):
            assert cls.changed.fget(None) is False and cls.dry_run.fget(None) is False  # type: ignore[attr-defined]


def test_errors_side_every_error_class_has_its_exit_code():
    # imports every module, so every error class is defined
    _printable_results()
    errors = _all_subclasses(SglopsError)
    assert len(errors) > 8
    assert all(isinstance(c.exit_code, int) and c.exit_code > 0 for c in errors)


def test_domain_errors_subclass_the_failure_classes_instead_of_setting_exit_codes():
    """An exit code is a class of failure (core.errors); a domain error picks its class by subclassing it."""
    _printable_results()
    own = [
        f"{c.__module__}.{c.__name__}"
        for c in _all_subclasses(SglopsError)
        if c.__module__ != errors.__name__ and "exit_code" in vars(c)
    ]
    assert own == []


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_all_subclasses(sub)]
    return out
