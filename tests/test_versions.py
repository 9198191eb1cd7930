"""Which SGLang and FlashInfer release a host runs, read from what real installs have, and where it came from.

A pip-installed tree (site-packages/sglang + dist-info, no git), a release checkout (git, tag
v<version>), a checkout some commits past its tag and a shallow clone without tags, each over real
SSH to a sandbox host: `inv facts --json`, `inv probe-backends --json`, and the patch variant
`apply-patch --dry-run` picks by release. The sandbox trees themselves hold exactly the wheel's files.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import inv_cmd

from sglops.host import _common
from sglops.sandbox import trees

GIT_ENV = {**os.environ, **trees.GIT_ENV}


@pytest.fixture
def env(use_sandbox, tmp_path):
    return {"SGLOPS_INVENTORY": str(use_sandbox.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}


def inv_json(env, *args) -> dict:
    proc = inv_cmd(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def sglang_seen(env, root: Path, host: str = "gpu-b") -> tuple[dict, dict]:
    """(facts' sglang, probe-backends' sglang) for the tree at ROOT, read over SSH on a sandbox host."""
    facts = inv_json(env, "facts", "--host", host, "--sglang-root", str(root))
    probe = inv_json(env, "probe-backends", "--host", host, "--sglang-root", str(root))
    assert probe["facts"]["sglang_version"] == probe["sglang"]["version"]
    return facts["sglang"], probe["sglang"]


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout


def wheel_text(dist: str, version: str, name: str) -> str:
    with zipfile.ZipFile(trees.cached_wheel(dist, version)) as zf:
        return zf.read(name).decode()


# -- the version files real wheels ship --------------------------------------------------------
@pytest.mark.parametrize(
    "dist,version,files,want",
    [
        # setuptools-scm / vcs-versioning: `__version__ = version = '0.5.15'`, typed declarations above it
        ("sglang", "0.5.15", ["sglang/_version.py", "sglang/version.py"], ("0.5.15", "sglang/_version.py")),
        # version.py alone only imports _version.py or falls back inside try/except: not a release
        ("sglang", "0.5.15", ["sglang/version.py"], (None, None)),
        # the hand-kept file of older releases: `__version__ = "0.4.10"`
        ("sglang", "0.4.10", ["sglang/version.py"], ("0.4.10", "sglang/version.py")),
        # FlashInfer's build writes _build_meta.py; its version.py reads it at import time
        (
            "flashinfer-python",
            "0.7.2",
            ["flashinfer/version.py", "flashinfer/_build_meta.py"],
            ("0.7.2", "flashinfer/_build_meta.py"),
        ),
        ("flashinfer-python", "0.7.2", ["flashinfer/version.py"], (None, None)),
    ],
    ids=[
        "scm-_version",
        "version-py-fallbacks-only",
        "hand-kept",
        "flashinfer-build-meta",
        "flashinfer-version-py",
    ],
)
def test_version_files_as_the_wheels_ship_them(tmp_path, dist, version, files, want):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(wheel_text(dist, version, name))
    pkg = tmp_path / files[0].split("/")[0]
    assert _common.version_from_files(str(pkg))[:2] == want
    if dist.startswith("flashinfer") and want[0]:
        assert _common.version_from_files(str(pkg))[2] == "d84335d8c54e0c8f9f7e22faa15c7e34a58abf94"


@pytest.mark.parametrize(
    "text,want",
    [
        # setuptools-scm before 7
        ("version = '0.3.1'\nversion_tuple = (0, 3, 1)\n", "0.3.1"),
        ('__version__: str = "0.4.0"  # bumped by release.sh\n', "0.4.0"),
        (
            "try:\n    from ._v import __version__\nexcept ImportError:\n    __version__ = '0.0.0.dev0'\n",
            None,
        ),
        ("__version__ = get_version()\n", None),
        ("version_tuple = ('1', '2')\n", None),
    ],
)
def test_version_file_lines(tmp_path, text, want):
    (tmp_path / "version.py").write_text(text)
    assert _common.version_from_files(str(tmp_path))[0] == want


@pytest.mark.parametrize(
    "out,want",
    [
        ("v0.5.15-0-g1a2b3c4\n", ("0.5.15", "git tag v0.5.15", 0)),
        ("v0.5.15-3-g1a2b3c4\n", ("0.5.15-3-g1a2b3c4", "git describe: 3 commits after tag v0.5.15", 3)),
        ("v0.5.15-1-g1a2b3c4", ("0.5.15-1-g1a2b3c4", "git describe: 1 commit after tag v0.5.15", 1)),
        ("0.6.0rc1-0-gabcdef0", ("0.6.0rc1", "git tag 0.6.0rc1", 0)),
        # `--always` style: a commit is not a version
        ("1a2b3c4", None),
        ("", None),
    ],
)
def test_git_describe_words(out, want):
    got = _common.version_from_describe(out)
    assert (got and (got["version"], got["source"], got["commits_after_tag"])) == want


# -- each layout, as the operator asks: facts and probe-backends over SSH -------------------------
def test_pip_installed_tree_reads_the_wheels_version_file_then_its_metadata(env, tmp_path):
    site = tmp_path / "site-packages"
    trees.make_installed_sglang("0.5.15", site)
    for seen in sglang_seen(env, site):
        assert (seen["version"], seen["version_source"], seen["kind"]) == (
            "0.5.15",
            "sglang/_version.py",
            "installed",
        )
        assert seen["commit"] is None
    facts = inv_json(env, "facts", "--host", "gpu-b", "--sglang-root", str(site))
    fi = facts["flashinfer"]
    assert (fi["version"], fi["version_source"]) == ("0.7.2", "flashinfer/_build_meta.py")
    assert fi["build_commit"] == "d84335d8c54e0c8f9f7e22faa15c7e34a58abf94"

    # a package whose version files are gone (vendored, stripped images): the dist-info METADATA
    (site / "sglang" / "_version.py").unlink()
    assert sglang_seen(env, site)[0]["version_source"] == "sglang-0.5.15.dist-info/METADATA"
    # nothing left to read: said so, not guessed
    shutil.rmtree(site / "sglang-0.5.15.dist-info")
    seen = sglang_seen(env, site)[0]
    assert seen["version"] is None and "no version file, dist-info or release tag" in seen["version_source"]
    table = inv_cmd("probe-backends", "--host", "gpu-b", "--sglang-root", str(site), env=env)
    assert table.returncode == 0 and "sglang ?" in table.stdout


def test_a_venv_inside_a_tagged_git_repo_is_still_an_install(env, tmp_path):
    """A project's .venv inside its own git repo: the project's commit and tags are not SGLang's."""
    project = tmp_path / "project"
    site = project / ".venv" / "lib" / "python3.11" / "site-packages"
    trees.make_installed_sglang("0.5.15", site)
    (project / "app.py").write_text("print('hi')\n")
    git(project, "init", "-q")
    git(project, "add", "app.py")
    git(project, "commit", "-q", "-m", "app")
    git(project, "tag", "v9.9.9")
    for seen in sglang_seen(env, site):
        assert (seen["version"], seen["version_source"], seen["kind"]) == (
            "0.5.15",
            "sglang/_version.py",
            "installed",
        )
        assert seen["commit"] is None and seen["root"] == str(site)


def test_release_checkout_reads_its_tag(env, use_sandbox):
    for seen in sglang_seen(env, use_sandbox.host("gpu-a").sglang_root, "gpu-a"):
        assert (seen["version"], seen["version_source"], seen["kind"]) == ("0.5.23", "git tag v0.5.23", "git")
    table = inv_cmd("facts", "--host", "gpu-a", env={**env, "COLUMNS": "200"})
    assert (
        "(from git tag v0.5.23)" in table.stdout and "0.7.2 (from flashinfer/_build_meta.py)" in table.stdout
    )


def test_checkout_past_its_tag_says_how_far(env, tmp_path):
    """Two commits after v0.5.15: the version file still says 0.5.15; git says what the tree is."""
    root = trees.make_sglang_checkout("0.5.15", tmp_path / "sglang")
    for i in (1, 2):
        (root / "python" / "sglang" / "lang" / "local_note.py").write_text(f"NOTE = {i}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"local change {i}")
    abbrev = git(root, "rev-parse", "--short", "HEAD").strip()
    assert _common.version_from_files(str(root / "python" / "sglang"))[0] == "0.5.15"
    for seen in sglang_seen(env, root):
        assert seen["version"] == f"0.5.15-2-g{abbrev}"
        assert seen["version_source"] == "git describe: 2 commits after tag v0.5.15"
    facts = inv_json(env, "facts", "--host", "gpu-b", "--sglang-root", str(root))["sglang"]
    assert (facts["tag"], facts["commits_after_tag"]) == ("v0.5.15", 2)


def test_shallow_clone_without_tags_reads_the_version_file(env, tmp_path):
    """A `git clone --depth 1` with an editable install (container images): no tag to describe, the
    _version.py the install wrote; and the patch variant is still chosen by that release."""
    src = trees.sglang_template("0.5.15")
    root = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", "--no-tags", f"file://{src}", str(root)],
        check=True,
        capture_output=True,
    )
    assert git(root, "tag") == ""
    for seen in sglang_seen(env, root):
        assert (seen["version"], seen["version_source"], seen["kind"]) == (
            "0.5.15",
            "sglang/_version.py",
            "git",
        )
    plan = inv_json(
        env, "apply-patch", "gather-cast", "--host", "gpu-b", "--sglang-root", str(root), "--dry-run"
    )
    assert (plan["variant"], plan["how"]) == (
        "sglang-0.5.15",
        f"exact match for sglang 0.5.15 @ {git(root, 'rev-parse', 'HEAD')[:12]}",
    )


# -- the patch variant, chosen by release ---------------------------------------------------------
def test_variant_chosen_by_release_on_a_pip_installed_tree(env, tmp_path):
    site = tmp_path / "site-packages"
    trees.make_installed_sglang("0.5.15", site)
    plan = inv_json(
        env, "apply-patch", "gather-cast", "--host", "gpu-b", "--sglang-root", str(site), "--dry-run"
    )
    assert (plan["variant"], plan["how"]) == ("sglang-0.5.15", "exact match for sglang 0.5.15")
    assert plan["action"] == "would apply"


def test_variant_past_the_tag_is_checked_not_assumed(env, tmp_path):
    root = trees.make_sglang_checkout("0.5.15", tmp_path / "sglang")
    (root / "python" / "sglang" / "lang" / "local_note.py").write_text("NOTE = 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "local change")
    plan = inv_json(
        env, "apply-patch", "gather-cast", "--host", "gpu-b", "--sglang-root", str(root), "--dry-run"
    )
    assert plan["variant"] == "sglang-0.5.15"
    assert plan["how"].startswith("no variant targets sglang 0.5.15-1-g") and plan["how"].endswith(
        "applies (checked)"
    )


# -- the sandbox trees are the wheel, nothing added -------------------------------------------------
def record(wheel: Path) -> dict[str, tuple[str, int]]:
    """The wheel's RECORD: path -> (sha256 as RECORD writes it, size); RECORD itself has neither."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(name).decode())))
    return {path: (digest, int(size) if size else -1) for path, digest, size in rows}


def tree_files(root: Path) -> dict[str, Path]:
    """The tree's files; bytecode Python wrote beside a cached tree once something imported from it is not the
    wheel's (and is no file a probe reads)."""
    return {
        p.relative_to(root).as_posix(): p
        for p in root.rglob("*")
        if (p.is_file() or p.is_symlink()) and not {".git", "__pycache__"} & set(p.relative_to(root).parts)
    }


def sha256_record(path: Path) -> str:
    return (
        "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
    )


def assert_same_bytes(files: dict[str, Path], rec: dict[str, tuple[str, int]]) -> None:
    for rel, path in files.items():
        digest, size = rec[rel]
        if digest:
            assert path.stat().st_size == size and sha256_record(path) == digest, rel


def test_sandbox_trees_hold_exactly_the_wheels_files(tmp_path):
    """0.5.15's wheel: compiled extensions, a top-level tools/ folder, _version.py, dist-info. The installed
    layout is every file of the wheel; the checkout every file but the dist-info, under python/, plus git."""
    wheel = trees.cached_wheel("sglang", "0.5.15")
    listing, rec = trees.wheel_files(wheel), record(wheel)
    assert (
        set(listing) == set(rec)
        and any(n.endswith(".so") for n in listing)
        and "sglang/_version.py" in listing
    )

    installed = tree_files(trees.make_installed_sglang("0.5.15", tmp_path / "site").parent)
    assert set(installed) == set(listing)
    assert_same_bytes(installed, rec)

    root = trees.sglang_template("0.5.15")
    source = {n for n in listing if not trees.is_install_metadata(n)}
    checkout = tree_files(root)
    # no pyproject.toml, no README: nothing added
    assert set(checkout) == {f"python/{n}" for n in source}
    assert set(git(root, "ls-files").splitlines()) == set(checkout)
    assert git(root, "tag", "--points-at", "HEAD").split() == ["v0.5.15"]
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert_same_bytes({n[len("python/") :]: p for n, p in checkout.items()}, rec)


def test_flashinfer_site_is_the_wheel(tmp_path):
    wheel = trees.cached_wheel("flashinfer-python", "0.7.2")
    listing = trees.wheel_files(wheel)
    site = tree_files(trees.flashinfer_site("0.7.2"))
    assert set(site) == set(listing)
    assert all(site[n].stat().st_size == size for n, size in listing.items())
