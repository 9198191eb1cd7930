"""`inv probe-backends` on real SGLang releases (0.5.23, 0.5.15, 0.4.10) and FlashInfer (0.7.2, 0.6.12).

Every fact asserted here was read by hand in the release's files (line numbers included where
they pin the hit), so a probe that drifts fails loudly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglops.core.errors import ConfigError, RemoteError
from sglops.core.hosts import Host, load_inventory
from sglops.core.remote import LocalRemote, connect
from sglops.probe.report import CAST_FLAG
from sglops.probe.scan import scan
from sglops.probe.spec import load_probe_set
from sglops.sandbox import trees
from tests.conftest import inv_cmd

HOSTS = [
    {"name": "p523", "sglang": "0.5.23", "flashinfer": "0.7.2"},
    {"name": "p515", "sglang": "0.5.15", "flashinfer": "0.6.12"},
    {"name": "p410", "sglang": "0.4.10", "flashinfer": "0.6.12"},
]
HOST_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def probe_sandbox(make_sandbox):
    return make_sandbox(HOSTS, name="probe")


@pytest.fixture(scope="module")
def reports(probe_sandbox):
    """One scan per host over real SSH, with the round trips it took."""
    inv = load_inventory(probe_sandbox.inventory)
    out = {}
    for h in HOSTS:
        with connect(inv.get(h["name"]), inventory=inv) as remote:
            before = remote.round_trips
            rep = scan(remote)
            out[h["name"]] = (rep, remote.round_trips - before)
    return out


@pytest.fixture
def cli_env(probe_sandbox, tmp_path):
    return {"SGLOPS_INVENTORY": str(probe_sandbox.inventory), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}


def _comparable(rep) -> dict:
    doc = rep.to_json()
    for key in ("engine", "seconds", "fallbacks"):
        doc.pop(key)
    return doc


# -- what an engineer learns from each release -------------------------------------------------
def test_0523_flashinfer_mla_casts_whole_pool_while_flashinfer_072_takes_fp8(reports, probe_sandbox):
    rep, trips = reports["p523"]
    f = rep.facts
    assert trips == 1, "the whole probe set must cost one round trip"
    assert f["sglang_version"] == "0.5.23" and f["flashinfer_version"] == "0.7.2"
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=probe_sandbox.host("p523").sglang_root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f["sglang_commit"] == head

    casts = rep.backend("flashinfer_mla").hits["casts_whole_pool"]
    assert [(h["func"], h["line"]) for h in casts] == [("forward_extend", 761), ("forward_decode", 822)]
    assert casts[1]["text"] == "k_buffer = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)"
    assert f["backend.flashinfer_mla.casts_whole_pool"] is True
    assert f["backend.flashinfer_mla.fp8_native"] is False
    assert [h["line"] for h in rep.backend("flashinfer_mla").hits["plans_model_dtype"]] == [102, 857, 1001]

    native = rep.backend("trtllm_mla").hits["fp8_native"]
    assert [(h["line"], h["text"]) for h in native] == [(248, "self.data_type = model_runner.kv_cache_dtype")]
    assert f["backend.trtllm_mla.fp8_native"] is True and f["backend.trtllm_mla.casts_whole_pool"] is False
    # L94
    assert f["backend.flashmla.fp8_native"] is True
    # trtllm_mla's Blackwell check is not in its file but in arg_groups/overrides.py L1207-1210.
    assert f["backend.trtllm_mla.arch_guard"] is False
    assert [(h["file"], h["line"]) for h in rep.backend("trtllm_mla").hits["arch_guard_args"]] == [
        ("srt/arg_groups/overrides.py", 1210)
    ]
    assert "is_blackwell" in rep.backend("trtllm_mla").hits["arch_guard_args"][0]["text"]
    assert rep.arch_cell(rep.backend("flashmla")) == "no architecture guard found"

    assert (
        f["backend.cutlass_mla.exists"] is False
        and rep.backend("cutlass_mla").verdict(f) == "absent in this release"
    )
    assert f["backend.cutedsl_mla.exists"] is True
    assert f["backend.nsa.exists"] is False and f["backend.dsa.exists"] is True

    assert f["flashinfer_mla_fp8"] is True and "USE_KV_REPACK" in f["flashinfer_mla_fp8_reason"]
    assert f[CAST_FLAG] is True
    assert any("forward_decode L822" in flag and "0.7.2" in flag for flag in rep.flags)

    assert "cutlass_mla" not in f["attention_backends"]
    assert {"trtllm_mla", "cutedsl_mla", "flashmla", "flashinfer", "fa3", "triton"} <= set(
        f["attention_backends"]
    )
    assert f["dsa_flag_prefix"] == "dsa" and f["dsa_prefill_backends.flag"] == "--dsa-prefill-backend"
    # the --nsa-* aliases are gone in 0.5.23
    assert f["dsa_prefill_backends.deprecated_flags"] == []
    assert (
        "triton_sparse_mla" in f["dsa_prefill_backends"]
        and "triton_sparse_mla" not in f["dsa_decode_backends"]
    )


def test_0515_has_cutlass_mla_and_nsa_aliases_with_flashinfer_0612_bf16_only(reports):
    rep, trips = reports["p515"]
    f = rep.facts
    assert trips == 1 and f["sglang_version"] == "0.5.15" and f["flashinfer_version"] == "0.6.12"
    assert [h["line"] for h in rep.backend("cutlass_mla").hits["fp8_native"]] == [81]
    # `if not is_blackwell_supported():`
    assert [(h["file"], h["line"]) for h in rep.backend("trtllm_mla").hits["arch_guard_args"]] == [
        ("srt/arg_groups/overrides.py", 1595)
    ]
    assert [(h["func"], h["line"]) for h in rep.backend("flashinfer_mla").hits["casts_whole_pool"]] == [
        ("forward_extend", 577),
        ("forward_decode", 639),
    ]
    assert f["backend.nsa.exists"] is True and f["backend.dsa.exists"] is True
    assert f["dsa_flag_prefix"] == "dsa"
    assert f["dsa_prefill_backends.deprecated_flags"] == ["--nsa-prefill-backend"]
    assert f["dsa_decode_backends.deprecated_flags"] == ["--nsa-decode-backend"]
    assert f["dsa_prefill_backends"] == [
        "flashmla_sparse",
        "flashmla_kv",
        "flashmla_auto",
        "fa3",
        "tilelang",
        "aiter",
        "trtllm",
    ]
    assert "cutlass_mla" in f["attention_backends"]
    # FlashInfer 0.6.12: mla.cuh L511/L566 call m16k16_rowsum_f16f16f32 -> static_assert(sizeof(DType) == 2).
    assert f["flashinfer_mla_fp8"] is False and f["flashinfer_mla_fp8_repack"] is False
    assert [h["line"] for h in rep.hits("flashinfer_mla_rowsum_f16")] == [511, 566]
    assert [h["line"] for h in rep.hits("flashinfer_mma_16bit_assert")] == [523]
    # the cast is flagged all the same (it costs what the pool
    # holds), with the way out that needs no FlashInfer FP8
    assert f[CAST_FLAG] is False
    assert [
        fl
        for fl in rep.flags
        if "casts the whole KV pool" in fl
        and "forward_decode L639" in fl
        and "inv apply-patch gather-cast" in fl
    ] == rep.flags and len(rep.flags) == 1


def test_0410_predates_trtllm_cutedsl_and_sparse_attention(reports):
    rep, _ = reports["p410"]
    f = rep.facts
    assert f["sglang_version"] == "0.4.10"
    for gone in ("trtllm_mla", "cutedsl_mla", "nsa", "dsa"):
        assert f[f"backend.{gone}.exists"] is False
    assert f["backend.cutlass_mla.fp8_native"] is True and f["backend.flashmla.fp8_native"] is True
    casts = rep.backend("flashinfer_mla").hits["casts_whole_pool"]
    assert [h["line"] for h in casts] == [421, 485] and "forward_batch.token_to_kv_pool" in casts[1]["text"]
    # 0.4.10 defines the choices inline in add_argument("--attention-backend", choices=[...]).
    assert f["attention_backends"] == [
        "aiter",
        "cutlass_mla",
        "fa3",
        "flashinfer",
        "flashmla",
        "intel_amx",
        "torch_native",
        "ascend",
        "triton",
    ]
    assert f["dsa_flag_prefix"] is None and f["dsa_prefill_backends"] is None


@pytest.mark.parametrize("name", [h["name"] for h in HOSTS])
def test_ripgrep_and_stdlib_scanner_agree(probe_sandbox, reports, name):
    inv = load_inventory(probe_sandbox.inventory)
    with connect(inv.get(name), inventory=inv) as remote:
        py = scan(remote, engine="python")
    rg, _ = reports[name]
    assert rg.engine.startswith("rg ") and py.engine == "python"
    assert _comparable(rg) == _comparable(py)


# -- where SGLang lives ------------------------------------------------------------------------
def _local(root: Path | str | None, **kw) -> LocalRemote:
    return LocalRemote(
        Host(name="local", address="local", python=HOST_PYTHON, sglang_root=str(root) if root else None, **kw)
    )


def test_installed_package_gives_the_same_answers_as_a_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(trees.flashinfer_site("0.6.12")))
    pkg = trees.make_installed_sglang("0.4.10", tmp_path / "site")
    checkout = trees.make_sglang_checkout("0.4.10", tmp_path / "checkout")
    installed, git = scan(_local(pkg)), scan(_local(checkout))
    assert installed.facts["sglang_kind"] == "installed" and installed.facts["sglang_commit"] is None
    assert installed.facts["sglang_version"] == "0.4.10" and git.facts["sglang_kind"] == "git"
    assert installed.facts["backend.flashinfer_mla.casts_whole_pool"] is True
    same = {k: v for k, v in installed.facts.items() if not k.startswith("sglang_")}
    assert same == {k: v for k, v in git.facts.items() if not k.startswith("sglang_")}
    assert installed.to_json()["backends"] == git.to_json()["backends"]


def test_no_flashinfer_and_no_ripgrep_on_the_host(tmp_path, monkeypatch):
    """A bare host: stdlib python, no rg on PATH, no FlashInfer -> stdlib scanner, stated unknowns."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("timeout", "git", "bash", "env"):
        os.symlink(
            subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip(), bare / tool
        )
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    root = trees.sglang_template("0.4.10")
    rep = scan(_local(root))
    assert rep.engine == "python"
    assert rep.facts["flashinfer_version"] is None and rep.facts["flashinfer_mla_fp8"] is None
    assert rep.facts["flashinfer_mla_fp8_reason"] == "flashinfer not installed"
    with pytest.raises(RemoteError, match="ripgrep \\(rg\\) is not on this host's PATH"):
        scan(_local(root), engine="rg")


# -- bad input -----------------------------------------------------------------------------------
def test_unreadable_backend_file_is_reported_by_both_engines(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(trees.flashinfer_site("0.7.2")))
    root = trees.make_sglang_checkout("0.4.10", tmp_path / "sglang")
    (root / "python/sglang/srt/layers/attention/ghost_backend.py").symlink_to(tmp_path / "gone.py")
    for engine in ("rg", "python"):
        rep = scan(_local(root), engine=engine)
        assert rep.unreadable == [
            {
                "file": "srt/layers/attention/ghost_backend.py",
                "error": "No such file or directory",
                "root": "sglang",
            }
        ], engine
        assert rep.backend("ghost").verdict(rep.facts) == "unreadable: No such file or directory"


def _probe_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "probes.yaml"
    path.write_text("backends:\n  files: srt/layers/attention/*_backend.py\nprobes:\n" + body)
    return path


def test_bad_probe_files_name_the_probe_and_line(tmp_path):
    bad_regex = _probe_file(
        tmp_path,
        "  - id: ok\n    scope: backend\n    regex: 'fp8'\n"
        "  - id: broken_guard\n    scope: backend\n    regex: 'sm(90|100'\n",
    )
    with pytest.raises(
        ConfigError, match=r"probes\.yaml:7: probe 'broken_guard': invalid regex 'sm\(90\|100'"
    ):
        load_probe_set(bad_regex)
    unknown = _probe_file(tmp_path, "  - id: cast\n    scope: backend\n    regex: 'x'\n    regexp: 'y'\n")
    with pytest.raises(ConfigError, match=r"probes\.yaml:4: unknown field 'regexp' in probe 'cast'"):
        load_probe_set(unknown)
    # the default set stays valid
    assert len(load_probe_set().probes) >= 10


def test_regex_ripgrep_refuses_falls_back_to_the_stdlib_scanner(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    path = _probe_file(
        tmp_path,
        "  - id: native_lookbehind\n    scope: backend\n    fact: fp8_native\n"
        "    regex: '(?<=self\\.)data_type\\s*=\\s*model_runner\\.kv_cache_dtype'\n",
    )
    root = trees.sglang_template("0.5.23")
    rg, py = (
        scan(_local(root), load_probe_set(path)),
        scan(_local(root), load_probe_set(path), engine="python"),
    )
    assert rg.fallbacks == ["native_lookbehind"]
    assert rg.facts["backend.trtllm_mla.fp8_native"] is True
    assert _comparable(rg) == _comparable(py)


# -- the task, as the engineer runs it --------------------------------------------------------
def test_inv_probe_backends_two_hosts_table_json_and_artifacts(cli_env, tmp_path):
    proc = inv_cmd("probe-backends", "--hosts", "p523,p410", "--json", env=cli_env)
    assert proc.returncode == 0, proc.stderr
    docs = {d["host"]: d for d in json.loads(proc.stdout)}
    assert docs["p523"]["facts"]["backend.flashinfer_mla.casts_whole_pool"] is True
    assert docs["p410"]["facts"]["backend.trtllm_mla.exists"] is False
    saved = json.loads(Path(docs["p523"]["artifact"]).read_text())
    assert saved["sglang"]["version"] == "0.5.23" and len(saved["sglang"]["commit"]) == 40
    assert Path(docs["p523"]["artifact"]).parent.parent.name == "p523"

    proc = inv_cmd("probe-backends", "--host", "p523", "--show-hits", env={**cli_env, "COLUMNS": "220"})
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    for text in (
        "no architecture guard found",
        "absent in this release",
        "FLAG: sglang 0.5.23 flashinfer_mla",
        "srt/layers/attention/flashinfer_mla_backend.py:822",
    ):
        assert text in out, text


def test_inv_probe_backends_local_host(tmp_path):
    env = {
        "SGLOPS_ARTIFACTS": str(tmp_path / "a"),
        "SGLOPS_INVENTORY": str(tmp_path / "none.yaml"),
        "PYTHONPATH": str(trees.flashinfer_site("0.7.2")),
    }
    root = trees.sglang_template("0.5.23")
    proc = inv_cmd("probe-backends", "--host", "local", "--sglang-root", str(root), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["host"] == "local" and doc["facts"]["flashinfer_mla_fp8"] is True
    assert (tmp_path / "a" / "local").is_dir()


def test_inv_probe_backends_bad_input_is_one_line(cli_env, tmp_path):
    proc = inv_cmd("probe-backends", "--host", "p523", "--sglang-root", "/nowhere/sglang", env=cli_env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "SGLang not found at /nowhere/sglang" in proc.stderr and "--sglang-root" in proc.stderr
    bad = _probe_file(tmp_path, "  - id: broken\n    scope: backend\n    regex: '('\n")
    proc = inv_cmd("probe-backends", "--host", "p523", "--probes", str(bad), env=cli_env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{bad}:4: probe 'broken': invalid regex" in " ".join(proc.stderr.split())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-x", "-q"]))


# -- the host's tree cache -----------------------------------------------------------------------
def test_tree_cache_answers_until_a_file_a_folder_or_the_ledger_changes(tmp_path, monkeypatch):
    """The second probe of an unchanged tree comes from the host's cache (a marker planted in it shows); an
    edited file, a new backend file and sglops' state folder (the patch ledger's) each make the host scan
    afresh."""
    monkeypatch.setenv("PYTHONPATH", str(trees.flashinfer_site("0.7.2")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = trees.make_sglang_checkout("0.4.10", tmp_path / "sglang")
    fresh = scan(_local(root), cache=False)
    assert not (tmp_path / "cache").exists()
    first = scan(_local(root))
    [kept] = (tmp_path / "cache" / "sglops" / "probe-scan").glob("*.json")
    assert _comparable(first) == _comparable(fresh)

    def plant() -> None:
        doc = json.loads(kept.read_text())
        hit = next(h for r in doc["answer"]["results"] for h in r["hits"])
        hit["text"] = "PLANTED-IN-CACHE"
        kept.write_text(json.dumps(doc))

    plant()
    assert "PLANTED-IN-CACHE" in json.dumps(scan(_local(root)).to_json())
    attention = root / "python/sglang/srt/layers/attention"
    backend = attention / "triton_backend.py"
    backend.write_text(backend.read_text() + "\n# edited\n")
    edited = scan(_local(root))
    assert "PLANTED-IN-CACHE" not in json.dumps(edited.to_json())
    plant()
    (attention / "zz_new_backend.py").write_text("class ZzNewBackend:\n    pass\n")
    added = scan(_local(root))
    assert "PLANTED-IN-CACHE" not in json.dumps(added.to_json())
    assert "srt/layers/attention/zz_new_backend.py" in [b.file for b in added.backends]
    plant()
    (root / ".sglops").mkdir()
    assert "PLANTED-IN-CACHE" not in json.dumps(scan(_local(root)).to_json())


# -- the host's import scan (follow) -------------------------------------------------------------
TRICKY = '''"""A docstring that shows code: import fake_in_docstring
from fake.module import nothing
"""
import os, sglang.srt.a as a  # import fake_in_comment
from . import (b,  # a comment with ) in it
    c as cc)
from ..d import e; import f
x = "import fake_in_string"; y = 'from g import h'
def lazy():
    from sglang.srt.layers import (attention,
                                   quantization)  # lazy and parenthesised
    import \\
        continued
raise ValueError("x") from None
s = rb"""import fake_in_bytes"""
'''


def test_import_scan_matches_the_parsed_module_on_every_file_of_a_release():
    """The host finds a backend's imports with one regex pass (probe_scan._import_statements); the parsed
    module (`ast`) is the reference, on tricky source and on every file of the 0.4.10 release's srt/layers
    (the backends and the kernels they import)."""
    import ast
    from collections import Counter

    from sglops.host.probe_scan import _import_statements

    def parsed(text: str) -> Counter:
        out: Counter = Counter()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                out.update((a.name, (), 0) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                out[(node.module, tuple(a.name for a in node.names), node.level)] += 1
        return out

    assert Counter(_import_statements(TRICKY)) == parsed(TRICKY)
    assert ("sglang.srt.layers", ("attention", "quantization"), 0) in _import_statements(TRICKY)
    files = sorted((trees.sglang_template("0.4.10") / "python" / "sglang" / "srt" / "layers").rglob("*.py"))
    assert len(files) > 80
    # a file may open with a BOM: Python skips it
    texts = {f: f.read_text(errors="replace") for f in files}
    differ = [
        f for f, t in texts.items() if Counter(_import_statements(t)) != parsed(t.removeprefix("\ufeff"))
    ]
    assert differ == []
