"""Inputs from the operator's side: a dataset file as editors write it, the ranges a value has whatever flag
it comes by, a dry run that records nothing, a run id that names one folder under the artifacts folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inproc import run_inv

from sglops.bench import loads
from sglops.core.errors import ConfigError


def test_a_jsonl_file_with_a_utf8_bom_is_read(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"prompt": "hello", "output_len": 8}).encode() + b"\n")
    data = loads.parse_dataset(f"jsonl:{path}")
    assert data["items"] == [{"text": "hello", "output_len": 8}]


@pytest.mark.parametrize("sweep", ["rate=1e-9", "rate=2e6", "rate=1,0.0001"])
def test_sweep_rates_take_the_request_rate_range(sweep):
    with pytest.raises(ConfigError, match="as --request-rate"):
        loads.levels([1], None, sweep)
    assert loads.levels([1], None, "rate=0.001,1e6")[1]["rate"] == 1e6


def test_a_repeated_slo_key_is_refused_not_silently_replaced():
    with pytest.raises(ConfigError, match="names ttft twice"):
        loads.parse_slo("ttft=500,ttft=100")


def test_a_dry_run_with_nothing_to_do_records_no_run(use_sandbox, tmp_path, capsys):
    code, out, err = run_inv(capsys, "revert-patch", "gather-cast", "--host", "gpu-a", "--dry-run")
    assert code == 0, err
    artifacts = tmp_path / "artifacts"
    assert not artifacts.exists() or not any(p.is_file() for p in artifacts.rglob("*")), list(
        artifacts.rglob("*")
    )


def test_a_run_id_never_reaches_out_of_the_artifacts_folder(use_sandbox, tmp_path, capsys):
    outside = tmp_path / "outside" / "20261202-101010-abcd"
    outside.mkdir(parents=True)
    (outside / "manifest.json").write_text(
        json.dumps({"run_id": outside.name, "task": "bench", "status": "ok"})
    )
    (tmp_path / "artifacts" / "gpu-a").mkdir(parents=True)
    for run in (f"../../outside/{outside.name}", "../../outside/*", "*"):
        code, _, err = run_inv(capsys, "report", run)
        assert code == 2 and "is not a run id" in err, (run, err)
    assert sorted(p.name for p in outside.iterdir()) == ["manifest.json"]
    assert not any(Path(tmp_path / "artifacts").rglob("report.md"))
