"""Figures set by a stand-in are marked as such, from what the host and server say (issue 41, item 4).

The stand-in server says so in its /server_info (`standin: true`); the sandbox's nvidia-smi is a script whose
header says STAND-IN. A run the server did not mark, and an nvidia-smi that is an ELF binary, stay unmarked:
the mark never comes from a host's name or path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglops.bench import run as bench
from sglops.bench.record import STANDIN_NOTE
from sglops.core import artifacts
from sglops.core.op import new_run_id
from sglops.host import facts as host_facts
from sglops.sandbox.standin_local import start_standin
from tests.conftest import inv_cmd

SANDBOX_SMI = Path(host_facts.__file__).parent.parent / "sandbox" / "bin" / "nvidia-smi"
WIDE = {"COLUMNS": "220"}


def test_facts_mark_gpu_lines_from_the_standin_nvidia_smi(use_sandbox):
    r = inv_cmd("facts", "--host", "gpu-a", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["gpus"] and doc["nvidia_smi"]["standin"] is True and doc["nvidia_smi"]["kind"] == "script"
    table = inv_cmd("facts", "--host", "gpu-a", env=WIDE).stdout.splitlines()
    gpu = next(line for line in table if "GPUs" in line)
    driver = next(line for line in table if "driver" in line)
    assert "STAND-IN nvidia-smi" in gpu and "no real GPU" in gpu and "STAND-IN nvidia-smi" in driver


def test_which_nvidia_smi_is_read_from_the_binary_not_its_place(tmp_path, monkeypatch):
    # names that say nothing
    real, fake = tmp_path / "real", tmp_path / "usr-bin"
    real.mkdir(), fake.mkdir()
    # an ELF binary, as NVIDIA's is
    shutil.copy(shutil.which("true"), real / "nvidia-smi")
    shutil.copy(SANDBOX_SMI, fake / "nvidia-smi")
    monkeypatch.setenv("PATH", str(real))
    assert host_facts.nvidia_smi() == {"path": str(real / "nvidia-smi"), "kind": "binary", "standin": False}
    monkeypatch.setenv("PATH", str(fake))
    assert host_facts.nvidia_smi()["standin"] is True
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert host_facts.nvidia_smi() is None


@pytest.fixture
def runs(use_sandbox, remote_a, tmp_path) -> tuple[str, str]:
    """(a run the stand-in set, the same record as a server
    that does not call itself a stand-in records it)."""
    root = use_sandbox.host("gpu-a").sglang_root
    server = start_standin(
        "--model-path",
        "m",
        "--tp-size",
        "1",
        knobs={"TPS": 400, "TTFT_MS": 5, "STARTUP_S": 0.1},
        sglang_python=root / "python",
        log=tmp_path / "standin.log",
    )
    try:
        server.wait_healthy(10)
        result = bench.record(
            bench.run_bench(
                remote_a, runs=2, output_len=16, port=server.port, vocab_size=1000, with_facts=False
            ),
            new_run_id(),
        )
    finally:
        server.stop()
    src = artifacts.find_run(result.run_id)
    other = new_run_id()
    dst = src.parent / other
    shutil.copytree(src, dst)
    for name in ("bench.json", "manifest.json"):
        doc = json.loads((dst / name).read_text())
        doc.pop("standin", None)
        doc["run_id"] = other
        (doc.get("launch_args") or {}).pop("standin", None)
        (dst / name).write_text(json.dumps(doc))
    return result.run_id, other


def test_runs_compare_report_and_json_mark_standin_figures(runs):
    standin, measured = runs
    assert json.loads((artifacts.find_run(standin) / "bench.json").read_text())["standin"] is True

    listed = inv_cmd("runs", "--task", "bench", env=WIDE).stdout.splitlines()
    assert "stand-in" in next(line for line in listed if standin in line)
    assert "stand-in" not in next(line for line in listed if measured in line)
    doc = json.loads(inv_cmd("runs", "--task", "bench", "--json").stdout)
    assert {r["run_id"]: r["standin"] for r in doc["runs"]} == {standin: True, measured: False}

    r = inv_cmd("compare", measured, standin, "--json")
    assert r.returncode == 0, r.stderr
    cmp = json.loads(r.stdout)
    assert {x["run_id"]: x["standin"] for x in cmp["runs"]} == {standin: True, measured: False}
    assert cmp["rows"] and all(row["standin"] for row in cmp["rows"])
    assert f"{standin}: {STANDIN_NOTE}" in cmp["notes"]
    table = inv_cmd("compare", measured, standin, env=WIDE).stdout
    assert f"{standin} (stand-in)" in table and STANDIN_NOTE in " ".join(table.split())

    # nothing set by the stand-in: nothing marked
    r = inv_cmd("compare", measured, measured, "--json")
    assert not any(x["standin"] for x in json.loads(r.stdout)["runs"]) and "stand-in" not in r.stdout

    for run, marked in ((standin, True), (measured, False)):
        r = inv_cmd("report", run)
        assert r.returncode == 0, r.stderr
        page = (artifacts.find_run(run) / "run-report.md").read_text()
        assert (STANDIN_NOTE in page and "(stand-in)" in page) is marked
        # a sandbox host's GPU telemetry is its stand-in nvidia-smi's, labelled so whatever server ran
        gpu_lines = [ln for ln in page.splitlines() if "STAND-IN nvidia-smi" in ln]
        assert gpu_lines and all("(STAND-IN nvidia-smi: no GPU)" in ln for ln in gpu_lines)
        assert (
            "stand-in" in "\n".join(ln for ln in page.splitlines() if ln not in gpu_lines).lower()
        ) is marked
