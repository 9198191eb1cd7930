"""build-kernel on real sshd sandbox hosts (CPU path), and gather_cast's contract on the CPU.

The sandbox host `ktorch` runs this machine's python (torch, no GPU): the Triton kernel's build
is a warm-up of the torch fallback there, and its self-test checks
the fallback. GPU figures are in kernels/gather_cast/BENCH.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, inv_cmd

torch = pytest.importorskip("torch")

KERNEL_DIR = REPO / "kernels" / "gather_cast"
sys.path.insert(0, str(KERNEL_DIR))
from sglops_kernels.gather_cast import _as_fp8, gather_cast  # noqa: E402

from sglops.core.errors import ConfigError  # noqa: E402
from sglops.kernel import build as kernels  # noqa: E402

FP8 = torch.float8_e4m3fn


# -- the library contract, on the CPU ---------------------------------------------------------
def ref(pool, idx, out_dtype=torch.bfloat16, scale=None):
    """The contract, written out: pool[idx].to(dtype), or via float32 times scale."""
    rows = pool.view(FP8)[idx.long()]
    return rows.to(out_dtype) if scale is None else (rows.to(torch.float32) * scale).to(out_dtype)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_gather_cast_matches_torch_on_cpu(idx_dtype):
    g = torch.Generator().manual_seed(3)
    raw = torch.randint(0, 256, (300, 1, 576), dtype=torch.uint8, generator=g)
    for idx in (
        torch.randint(0, 300, (77,), generator=g),
        torch.tensor([299]),
        torch.empty(0, dtype=torch.long),
    ):
        idx = idx.to(idx_dtype)
        for pool in (raw, raw.view(FP8)):
            out = gather_cast(pool, idx)
            assert out.dtype == torch.bfloat16 and out.shape == (idx.numel(), 1, 576)
            assert torch.equal(out.view(torch.int16), ref(raw, idx).view(torch.int16))
            scaled = gather_cast(pool, idx, out_dtype=torch.float16, scale=0.25)
            assert torch.equal(scaled.view(torch.int16), ref(raw, idx, torch.float16, 0.25).view(torch.int16))


def test_gather_cast_refuses_wrong_inputs():
    pool = torch.zeros(4, 1, 576, dtype=torch.uint8)
    # a pool already in a 16-bit dtype (BF16 KV cache) is gathered as is: the patch may hand one over
    bf16 = torch.randn(4, 1, 576).to(torch.bfloat16)
    assert torch.equal(
        gather_cast(bf16, torch.tensor([3, 1])).view(torch.int16), bf16[[3, 1]].view(torch.int16)
    )
    with pytest.raises(TypeError, match="int32 or int64"):
        gather_cast(pool, torch.tensor([0.0]))
    with pytest.raises(TypeError):
        _as_fp8(pool.to(torch.int8))


def _triton_interpreter():
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.skipif(
    not _triton_interpreter(), reason="needs triton with TRITON_INTERPRET=1 (the kernel on the CPU)"
)
def test_triton_kernel_in_interpreter():
    """The kernel's indexing (576 = 512 + 64 split, odd row sizes, masks, 2-D idx) on the CPU.

    The interpreter emulates e4m3 without NaN and rounds fp32->bf16 toward zero, so NaN bytes are
    left out and scaled outputs are compared within one bf16 step; the GPU self-test is bit-exact."""
    from sglops_kernels.gather_cast import _triton as impl

    g = torch.Generator().manual_seed(5)
    for tokens, row in [(9, (1, 576)), (40, (1, 520)), (17, (576,))]:
        raw = torch.randint(0, 256, (tokens, *row), dtype=torch.uint8, generator=g)
        raw[(raw & 0x7F) == 0x7F] = 0x3C
        for idx in (torch.tensor([tokens - 1]), torch.randint(0, tokens, (2, 11), generator=g).int()):
            for out_dtype in (torch.bfloat16, torch.float16, torch.float32):
                got = impl.gather_cast(raw, idx, out_dtype, rows=4, warps=1)
                assert torch.equal(got, ref(raw, idx, out_dtype)), (tokens, row, out_dtype)
            got = impl.gather_cast(raw, idx, torch.bfloat16, 0.37, rows=4, warps=1).float()
            want = ref(raw, idx, torch.bfloat16, 0.37).float()
            assert torch.all((got - want).abs() <= want.abs() / 64 + 1e-30)


# -- kernel.yaml and targets -----------------------------------------------------------------------
def test_arch_from_host_facts():
    h200, rtx = kernels.Arch.from_cc("9.0"), kernels.Arch.from_cc("12.0")
    assert (h200.name, h200.gencode, h200.torch_arch) == (
        "sm_90a",
        "-gencode=arch=compute_90a,code=sm_90a",
        "9.0a",
    )
    assert (rtx.name, rtx.gencode, rtx.torch_arch) == (
        "sm_120",
        "-gencode=arch=compute_120,code=sm_120",
        "12.0",
    )
    assert kernels.Arch.parse("sm_90").name == "sm_90" and kernels.Arch.parse("8.9").name == "sm_89"
    with pytest.raises(ConfigError):
        kernels.Arch.parse("hopper")


def _kernel_copy(tmp_path: Path, edit=None) -> Path:
    root = tmp_path / "kernels"
    shutil.copytree(KERNEL_DIR, root / "gather_cast", ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        edit(root / "gather_cast")
    return root


def test_kernel_yaml_is_checked(tmp_path, monkeypatch):
    spec = kernels.load_kernel("gather_cast")
    assert spec.language == "triton" and "sglops_kernels/gather_cast/_triton.py" in spec.sources
    root = _kernel_copy(tmp_path)
    monkeypatch.setenv("SGLOPS_KERNELS", str(root))
    with pytest.raises(ConfigError, match="no kernel 'nope'.*kernels: gather_cast"):
        kernels.load_kernel("nope")
    yaml_path = root / "gather_cast" / "kernel.yaml"
    good = yaml_path.read_text()
    for bad, msg in [
        ("language: triton", "language: rust"),
        ('"--arch", "{arch}"', '"--arch", "{gpu}"'),
        ("build.py\n", "missing.py\n"),
    ]:
        yaml_path.write_text(good.replace(bad, msg, 1))
        with pytest.raises(ConfigError, match=r"kernel\.yaml"):
            kernels.load_kernel("gather_cast")
    yaml_path.write_text(good + "colour: blue\n")
    with pytest.raises(ConfigError, match="unknown field 'colour'"):
        kernels.load_kernel("gather_cast")


# -- the whole flow on sandbox hosts -----------------------------------------------------------------
@pytest.fixture(scope="module")
def ksandbox(make_sandbox):
    return make_sandbox(
        [{"name": "ktorch", "sglang": "0.5.23", "flashinfer": None, "python": sys.executable}], name="kernels"
    )


@pytest.fixture
def env(ksandbox, tmp_path):
    return {
        "SGLOPS_INVENTORY": str(ksandbox.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts"),
        "SGLOPS_KERNELS": str(_kernel_copy(tmp_path)),
    }


def _import_installed(site: Path) -> Path:
    """Import the installed module from a fresh python, as SGLang would, use it, say where it was."""
    code = (
        "import torch, sglops_kernels.gather_cast as m; p = torch.arange(4*576,"
        " dtype=torch.uint8).view(4,1,576); o = m.gather_cast(p, torch.tensor([2, 0], dtype=torch.int32)); r"
        " = p.view(torch.float8_e4m3fn)[[2, 0]].to(torch.bfloat16); assert torch.equal(o.view(torch.int16),"
        " r.view(torch.int16)); print(m.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip()).resolve()


def test_build_flow_on_a_sandbox_host(env, tmp_path):
    """dry run, build, unchanged, a failing self-test and a failing build (both keep what is
    installed), list, uninstall: as an operator runs it."""
    site = tmp_path / "site"
    common = ["--host", "ktorch", "--target", str(site)]
    dry = inv_cmd("build-kernel", "gather_cast", *common, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "would-build" in dry.stdout and "sm_120" in dry.stdout and "selftest.py" in dry.stdout
    assert not site.exists()

    built = inv_cmd("build-kernel", "gather_cast", *common, "--json", env=env)
    assert built.returncode == 0, built.stderr
    doc = json.loads(built.stdout)
    assert doc["status"] == "built" and doc["arch"] == "sm_120" and doc["stages"]["selftest"]["exit"] == 0
    link = site / "sglops_kernels" / "gather_cast"
    good = os.readlink(link)
    assert link.is_symlink() and _import_installed(site).is_relative_to(link.resolve())
    logs = Path(doc["artifact_dir"])
    assert "selftest ok" in (logs / "selftest.log").read_text() and (logs / "build.log").exists()
    assert doc["commands"]["build"]["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0"

    again = inv_cmd("build-kernel", "gather_cast", *common, env=env)
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stderr

    src = Path(env["SGLOPS_KERNELS"]) / "gather_cast" / "sglops_kernels" / "gather_cast" / "__init__.py"
    text = src.read_text()
    src.write_text(text.replace("(rows.to(torch.float32) * scale)", "(rows.to(torch.float32) + scale)"))
    bad = inv_cmd("build-kernel", "gather_cast", *common, env=env)
    assert bad.returncode != 0
    assert "self-test failed (exit 1)" in bad.stderr and "nothing installed" in bad.stderr
    # the log's error line
    assert "elements differ" in bad.stderr and "scale=0.37" in bad.stderr
    assert "Traceback (most recent call last)" not in bad.stderr
    assert (
        os.readlink(link) == good and "(rows.to(torch.float32) * scale)" in (link / "__init__.py").read_text()
    )

    src.write_text(text.replace("def backend(", "def backend(:", 1))
    broken = inv_cmd("build-kernel", "gather_cast", *common, env=env)
    assert broken.returncode != 0 and "build failed (exit 1)" in broken.stderr
    assert "SyntaxError: invalid syntax" in broken.stderr and '__init__.py", line' in broken.stderr
    # the host's error, not a traceback of ours
    assert "sglops/kernel/build.py" not in broken.stderr
    assert os.readlink(link) == good
    failed_logs = sorted((Path(env["SGLOPS_ARTIFACTS"]) / "ktorch").glob("*/build.log"))
    assert any("SyntaxError" in p.read_text() for p in failed_logs)

    listed = inv_cmd("kernels", "--host", "ktorch", "--json", env=env)
    assert listed.returncode == 0 and doc["hash"] in listed.stdout

    assert (
        inv_cmd("uninstall-kernel", "gather_cast", "--host", "ktorch", "--dry-run", env=env).returncode == 0
    )
    assert link.is_symlink()
    gone = inv_cmd("uninstall-kernel", "gather_cast", "--host", "ktorch", env=env)
    assert gone.returncode == 0, gone.stderr
    assert not (site / "sglops_kernels").exists()
    twice = inv_cmd("uninstall-kernel", "gather_cast", "--host", "ktorch", env=env)
    assert twice.returncode != 0 and "not installed" in twice.stderr and "Traceback" not in twice.stderr


def test_install_beside_sglang_with_library_calls(ksandbox, tmp_path, monkeypatch):
    from sglops.core.hosts import load_inventory
    from sglops.core.remote import connect

    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    inv = load_inventory(ksandbox.inventory)
    spec = kernels.load_kernel("gather_cast")
    with connect(inv.get("ktorch"), inventory=inv) as remote:
        result = kernels.build(remote, spec, target="sglang", arch="sm_90a")
        assert result.status == "built" and result.arch == "sm_90a"
        py_dir = ksandbox.host("ktorch").sglang_root / "python"
        assert Path(result.answer["install_path"]) == py_dir / "sglops_kernels" / "gather_cast"
        assert _import_installed(py_dir).is_relative_to(py_dir / "sglops_kernels")
        assert kernels.build(remote, spec, target="sglang", arch="sm_90a").status == "unchanged"
        assert (
            kernels.build(remote, spec, target="sglang", arch="sm_120", dry_run=True).status == "would-build"
        )
        kernels.uninstall(remote, "gather_cast")
        assert not (py_dir / "sglops_kernels").exists()


def test_a_corrupt_kernel_record_is_one_clear_error_and_is_left_as_it_is(env, ksandbox):
    """Never read as {} (which would forget what is installed); every command says so in one line."""
    state = ksandbox.host("ktorch").sglang_root / ".sglops" / "kernels"
    state.mkdir(parents=True, exist_ok=True)
    record = state / "installed.json"
    # cut short
    record.write_text('{"gather_cast": {"name": "gather_cast", "hash": ')
    there = [p for p in sorted(state.rglob("*")) if p.name != ".lock"]
    try:
        for args in (
            ["kernels"],
            ["build-kernel", "gather_cast", "--arch", "sm_90a", "--dry-run"],
            ["build-kernel", "gather_cast", "--arch", "sm_90a"],
            ["uninstall-kernel", "gather_cast"],
            ["uninstall-kernel", "gather_cast", "--dry-run"],
        ):
            out = inv_cmd(*args, "--host", "ktorch", env=env)
            assert out.returncode != 0, args
            assert (
                f"kernel record {record} is unreadable" in out.stderr and "fix or move it aside" in out.stderr
            ), args
            assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
            assert record.read_text().endswith('"hash": ')
        # (mutations took the lock)
        assert [p for p in sorted(state.rglob("*")) if p.name != ".lock"] == there
    finally:
        record.unlink()
