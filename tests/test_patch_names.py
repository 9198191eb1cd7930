"""A variant that applies as text but names what the patched
file never defines is refused (sglops/patch/names.py).

The real case: gather-cast's 0.5.15 variant applies to sglang 0.5.17's flashinfer_mla_backend.py as text and
calls `dcp_enabled()`, which 0.5.17 no longer has; on the H200 the patched server raised NameError ~50 s into
its restart. tests/cases/patch_variants.yaml holds that case on the real release files; these are the rule's
edges.
"""

from __future__ import annotations

import hashlib
import json
import os

from sglops.host import _bench_server, _common
from sglops.patch import names

BASE = """
import os
from typing import Optional as Opt

def f(a, *args, b=1, **kw):
    try:
        x = [y for y in args if (z := y)]
    except ValueError as err:
        raise RuntimeError(err) from None
    match a:
        case {"k": v, **rest}:
            return v, rest
        case [first, *others]:
            return first, others
    global G
    G = len(x) + z
    return os.sep, Opt, __name__, __file__
"""


def test_a_name_the_patch_adds_and_the_file_never_binds_is_reported_with_its_line():
    new = BASE + "\ndef g():\n    return dcp_enabled() and os.sep\n"
    assert names.introduced(BASE, new) == {"dcp_enabled": BASE.count("\n") + 3}


def test_every_kind_of_binding_counts_and_builtins_and_module_names_are_known():
    assert names.unbound(BASE) == {}


def test_names_already_unbound_before_the_patch_are_not_the_patch_s_doing():
    old = BASE + "\nhook = injected_by_a_plugin\n"
    assert names.introduced(old, old + "\nmore = injected_by_a_plugin\n") == {}


def test_a_star_import_or_a_syntax_error_makes_the_check_stand_aside():
    assert names.introduced(None, "from torch import *\nx = anything\n") == {}
    assert names.introduced(None, "def broken(:\n") == {}


def test_the_ledger_sees_a_patch_intact_on_an_installed_tree(tmp_path, monkeypatch):
    """An installed tree has no python/ prefix: the ledger's
    file hashes must be read where the patch wrote."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    # the tree root of an installed SGLang is its site-packages folder
    root = tmp_path / "site"
    target = root / "sglang" / "srt" / "layers" / "attention" / "flashinfer_mla_backend.py"
    target.parent.mkdir(parents=True)
    target.write_text("# sglops: gather-cast\n")
    rel = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
    ledger = os.path.join(_common.sglops_dir(str(root)), "applied.json")
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    with open(ledger, "w") as fh:
        json.dump(
            {"applied": [{"patch": "gather-cast", "files": {rel: {"before": "x", "after": digest}}}]}, fh
        )
    assert [e["intact"] for e in _bench_server.applied_patches(str(root))] == [True]
    target.write_text("# edited by hand after the patch\n")
    assert [e["intact"] for e in _bench_server.applied_patches(str(root))] == [False]
