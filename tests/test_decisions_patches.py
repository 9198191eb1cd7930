"""Which patch variant a host gets (cases: tests/cases/patch_variants.yaml).

The host's file texts are the real release's (PyPI wheels, sglops.sandbox.trees), the patches the repo's own;
`patches.choose` decides from them and the version/commit the host reports, as apply-patch does after its one
read-only round trip.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest

from sglops.host._common import find_sglang
from sglops.patch import apply as patches
from sglops.patch import diff as patch_diff
from sglops.patch import spec as patch_spec
from sglops.sandbox import trees
from tests.cases import cases


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return tmp_path_factory.mktemp("site")


def reported(case: dict, site) -> tuple[str | None, str | None]:
    """(version, commit) as the host reports them: given by
    the case, or read by find_sglang from a real tree."""
    layout = case.get("layout")
    if layout is None:
        return case.get("version"), case.get("commit")
    release = str(case["files"])
    if layout == "checkout":
        root = trees.sglang_template(release)
    else:
        root = site / release / "sglang"
        if not root.exists():
            trees.make_installed_sglang(release, site / release)
    found = find_sglang(str(root))
    assert found["kind"] == ("git" if layout == "checkout" else "installed"), found
    return found["version"], found.get("commit")


@functools.cache
def release_text(release: str, rel: str) -> str:
    return (trees.sglang_template(release) / rel).read_text()


def host_texts(patch: patch_spec.Patch, case: dict) -> dict[str, str]:
    texts = {rel: release_text(str(case["files"]), rel) for rel in patch.files}
    if case.get("applied"):
        new, conflicts = patch_diff.apply(patch.variant(case["applied"]).files(), texts)
        assert not conflicts, f"{case['applied']} does not apply to {case['files']}"
        texts.update(new)
    return texts


@pytest.mark.parametrize("case", cases("patch_variants"))
def test_patch_variant(case, site):
    patch = patch_spec.load(case["patch"])
    extra = case.get("commits") or {}
    patch.variants = [
        dataclasses.replace(v, commits=v.commits + extra.get(v.name, [])) for v in patch.variants
    ]
    version, commit = reported(case, site)
    state = {
        "files": {rel: {"text": t} for rel, t in host_texts(patch, case).items()},
        "version": version,
        "commit": commit,
    }
    trial, how = patches.choose(patch, state, case.get("forced"))
    want = case["expect"]
    assert (trial.variant.name, trial.outcome) == (want["variant"], want["outcome"]), how
    assert want["how"] in how
    assert bool(trial.conflicts) == (trial.outcome == "conflict")
