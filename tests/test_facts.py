"""`inv facts` as the operator types it, against real sshd sandbox hosts."""

from __future__ import annotations

import json
import os
import shutil

from conftest import inv_cmd


def _env(sandbox, tmp_path, **more):
    return {
        "SGLOPS_INVENTORY": str(sandbox.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts"),
        **more,
    }


def test_facts_on_one_host(use_sandbox, tmp_path):
    res = inv_cmd("facts", "--host", "gpu-a", env=_env(use_sandbox, tmp_path))
    assert res.returncode == 0, res.stderr
    assert "8x NVIDIA RTX PRO 6000 Blackwell" in res.stdout and "cc 12.0" in res.stdout
    assert "0.5.23 @ " in res.stdout and "flashinfer" in res.stdout
    saved = list((tmp_path / "artifacts" / "gpu-a").glob("*/facts.json"))
    assert len(saved) == 1
    doc = json.loads(saved[0].read_text())
    assert doc["gpus"][0]["sm"] == "sm120" and len(doc["gpus"]) == 8
    assert doc["sglang"]["commit"] and doc["flashinfer"]["version"] == "0.7.2"
    manifest = json.loads((saved[0].parent / "manifest.json").read_text())
    assert manifest["task"] == "facts" and manifest["files"] == ["facts.json"]


def test_facts_json_for_a_tag(use_sandbox, tmp_path):
    res = inv_cmd("facts", "--tag", "sandbox", "--json", env=_env(use_sandbox, tmp_path))
    assert res.returncode == 0, res.stderr
    docs = json.loads(res.stdout)
    assert {d["host"]: d["sglang"]["version"] for d in docs} == {"gpu-a": "0.5.23", "gpu-b": "0.5.15"}


def test_one_host_down_others_still_reported(use_sandbox, tmp_path):
    res = inv_cmd("facts", "--hosts", "gpu-a,127.0.0.1:1,gpu-b", env=_env(use_sandbox, tmp_path))
    # the connect class (README "Exit codes")
    assert res.returncode == 3
    assert "facts: gpu-a" in res.stdout and "facts: gpu-b" in res.stdout
    assert "[127.0.0.1:1]" in res.stderr and "refused" in res.stderr
    assert "2 ok, 1 failed (127.0.0.1:1: connect)" in res.stdout
    assert "Traceback" not in res.stderr


def test_local_host_and_sglang_root_override(use_sandbox, tmp_path):
    tree = use_sandbox.host("gpu-b").sglang_root
    res = inv_cmd(
        "facts", "--host", "local", "--sglang-root", str(tree), "--json", env=_env(use_sandbox, tmp_path)
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["host"] == "local" and doc["sglang"]["version"] == "0.5.15" and doc["sglang"]["kind"] == "git"


def test_ssh_config_alias_is_honoured(use_sandbox, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    a = use_sandbox.host("gpu-a")
    key = home / ".ssh" / "id_ed25519"
    shutil.copy(use_sandbox.client_key, key)
    (home / ".ssh" / "config").write_text(
        f"Host sbx-alias\n  HostName 127.0.0.1\n  Port {a.port}\n  User {os.environ.get('USER', 'root')}\n"
        f"  IdentityFile {key}\n"
    )
    (home / ".ssh" / "known_hosts").write_text(a.host_key_line())
    env = {
        "HOME": str(home),
        "SGLOPS_INVENTORY": str(tmp_path / "none.yaml"),
        "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts"),
        "USER": os.environ.get("USER", "root"),
    }
    res = inv_cmd("facts", "--host", "sbx-alias", "--sglang-root", str(a.sglang_root), "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["sglang"]["version"] == "0.5.23"


def test_user_errors_are_one_line_without_traceback(use_sandbox, tmp_path):
    res = inv_cmd("facts", "--host", "glm6-box", env=_env(use_sandbox, tmp_path))
    assert res.returncode == 2
    assert "unknown host 'glm6-box'" in res.stderr and "gpu-a, gpu-b" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) <= 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  - name: x\n    port: [\n")
    res = inv_cmd("facts", "--host", "x", env={"SGLOPS_INVENTORY": str(bad)})
    assert res.returncode == 2 and "bad.yaml:" in res.stderr and "malformed YAML" in res.stderr
    assert "Traceback" not in res.stderr
