"""The layers, enforced: every import in sglops (module level, function-local and under TYPE_CHECKING alike)
is walked with ast and held against one table; and no import circle between modules.

    host    -> the standard library only (it runs on a bare GPU host)
    core    -> nothing of sglops above it
    domain  -> core and the siblings it declares below
    views   -> core and the results they show (domain modules; never a runner, never the catalogue)
    catalogue (sglops.ops) -> the domains; runners (play, cli, tasks.py) -> anything below them
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from sglops.patch.names import parse as parse_python

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "sglops"
DOMAINS = {"probe", "patch", "trace", "bench", "launch", "kernel", "sandbox", "experiment", "engine"}

# layer -> the layers it may import (besides its own); a domain's declared siblings are listed with it
MAY_IMPORT: dict[str, set[str]] = {
    "host": set(),
    "core": set(),
    # probe-backends --profile: a profile's flags (profiles
    # imports only core); engine: the serving engine's tree
    "probe": {"core", "engine", "launch.profiles"},
    # what differs between serving engines: names and spellings, nothing above core
    "engine": {"core"},
    # the launch path predicted from the tree (probe.launch_*), removed backends
    "launch": {"core", "probe", "engine"},
    "sandbox": {"core", "engine"},
    # where an engine's profiler writes its traces
    "trace": {"core", "engine"},
    "kernel": {"core", "probe"},
    "patch": {"core", "probe"},
    # engine: the specs the host reads its server's engine by (bench API, where it says its config)
    "bench": {"core", "probe", "engine"},
    # ab, sweep: restarts, patches, profiles
    "experiment": {"core", "bench", "launch", "patch", "probe", "trace", "engine"},
    # the catalogue: every domain's ops.py
    "ops": {"core", *DOMAINS},
    # results only
    "views": {"core", *DOMAINS, "play.result"},
    # a runner: plays of the catalogue's operations
    "play": {"core", *DOMAINS, "ops", "views"},
    # the runner Invoke calls
    "cli": {"core", *DOMAINS, "ops", "views", "play"},
    "sglops": set(),
    # python -m sglops: the installed command's entry point (sglops/cli/program.py)
    "__main__": {"cli"},
}


def _module(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str, root: Path) -> bool:
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _resolve(name: str, root: Path) -> str:
    """The sglops module an imported name lives in (`sglops.bench.run.check` -> `sglops.bench.run`)."""
    parts = name.split(".")
    while parts and not _exists(".".join(parts), root):
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = REPO) -> list[tuple[int, str]]:
    """(line, imported name) of every import in the file: anywhere in it, relative ones resolved."""
    module = _module(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(parse_python(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out += [(node.lineno, mod)] + [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _allowed(src: str, dst: str) -> bool:
    if layer(src) == layer(dst):
        return True
    rule = MAY_IMPORT[layer(src)]
    return layer(dst) in rule or any(dst == f"sglops.{r}" or dst.startswith(f"sglops.{r}.") for r in rule)


def graph(package: Path = PACKAGE) -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the sglops modules it imports; and every import that breaks the table, as file:line."""
    root = package.parent
    edges: dict[str, set[str]] = defaultdict(set)
    broken = []
    for path in sorted(package.rglob("*.py")):
        src = _module(path, root)
        for line, name in imports(path, root):
            top = name.split(".")[0]
            if layer(src) == "host" and top not in sys.stdlib_module_names and top != "sglops":
                broken.append(f"{path.relative_to(root)}:{line}: host imports {name} (standard library only)")
            if top != "sglops":
                continue
            dst = _resolve(name, root)
            if not dst or dst == src:
                continue
            edges[src].add(dst)
            if not _allowed(src, dst):
                broken.append(f"{path.relative_to(root)}:{line}: {layer(src)} imports {dst}")
    return edges, sorted(set(broken))


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_import_keeps_to_its_layer():
    edges, broken = graph()
    assert len(edges) > 80, "the walk found too few modules to mean anything"
    assert set(MAY_IMPORT) >= {layer(m) for m in edges}, "a new package needs its row in MAY_IMPORT"
    assert broken == []


def test_no_import_circle():
    assert circles(graph()[0]) == []


def test_tasks_py_is_only_the_runner():
    names = {
        name.split(".")[0] + "." + name.split(".")[1]
        for _, name in imports(REPO / "tasks.py")
        if name.startswith("sglops.")
    }
    assert names == {"sglops.cli"}


@pytest.mark.parametrize(
    "src,dst,line",
    [
        ("core", "from sglops.views.show import show\n", "core imports sglops.views.show"),
        ("trace", "from sglops.views import trace\n", "trace imports sglops.views"),
        ("host", "import yaml\n", "host imports yaml"),
        ("views", "from sglops.cli import tasks\n", "views imports sglops.cli"),
    ],
)
def test_a_layer_broken_by_hand_is_caught(tmp_path, src, dst, line):
    """The same walk over a copy of the package with one import added where it does not belong, in a function
    (function-local imports count)."""
    import shutil

    copy = tmp_path / "sglops"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = next(p for p in sorted((copy / src).glob("*.py")) if p.name != "__init__.py")
    target.write_text(target.read_text() + "\n\ndef _broken():\n    " + dst)
    _, broken = graph(copy)
    assert any(line in b for b in broken), broken


def test_a_circle_made_by_hand_is_caught():
    edges = graph()[0]
    assert "sglops.core.artifacts" in edges["sglops.core.op"]
    # one import back
    edges["sglops.core.artifacts"] = {*edges["sglops.core.artifacts"], "sglops.core.op"}
    assert any({"sglops.core.artifacts", "sglops.core.op"} <= set(c) for c in circles(edges))
