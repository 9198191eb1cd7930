"""Launch rendering and flag spelling per SGLang release (cases: tests/cases/launch_render.yaml).

The flags come from the real release trees (PyPI wheels, sglops.sandbox.trees), read by the host script's own
`launch_arguments` / `tree_facts` here in the test process:
what `inv render --host` checks against, without sshd.
"""

from __future__ import annotations

import functools

import pytest
import yaml

from sglops.core.errors import ConfigError
from sglops.host import server_inspect
from sglops.launch import render as launch_render
from sglops.launch.profiles import load_profile
from sglops.sandbox import trees
from tests.cases import cases


@functools.cache
def tree_args(release: str) -> launch_render.TreeArgs:
    """What a host with this release's checkout accepts, read
    from the wheel's files as server_inspect reads them."""
    root = trees.sglang_template(release)
    pkg = str(root / "python" / "sglang")
    flags, choices = server_inspect.launch_arguments(pkg)
    return launch_render.TreeArgs(
        release, str(root), set(flags), choices, server_inspect.tree_facts(pkg), "git"
    )


def _runs(argv: list[str], run: list[str]) -> bool:
    return any(argv[i : i + len(run)] == run for i in range(len(argv) - len(run) + 1))


@pytest.mark.parametrize("case", cases("launch_render"))
def test_launch_render(case, tmp_path):
    path = tmp_path / f"{case['id']}.yaml"
    path.write_text(yaml.safe_dump(case["profile"]))
    profile = load_profile(str(path))
    tree = tree_args(case["release"]) if case["release"] else None
    if case.get("refused"):
        with pytest.raises(ConfigError) as exc:
            launch_render.render(profile, None, tree)
        assert case["refused"] in str(exc.value) and "\n" not in str(exc.value)
        return
    out = launch_render.render(profile, None, tree)
    for run in case.get("has", []):
        assert _runs(out.argv, [str(w) for w in run]), (run, out.argv)
    for word in case.get("lacks", []):
        assert word not in out.argv, (word, out.argv)
    if "warns" in case:
        if case["warns"] is None:
            assert not [w for w in out.warnings if "variable" not in w], out.warnings
        else:
            assert any(case["warns"] in w for w in out.warnings), out.warnings
    assert out.validated == (tree is not None)
