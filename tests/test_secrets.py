"""Secrets never shown nor kept, whatever their source (red team F1).

The red team's reproduction: a token in the inventory (`vars: {hf_token: ...}`) that a profile puts in its env
(`env: {HF_TOKEN: "{vars.hf_token}"}`) and an `--api-key` in `extra_args` were printed by `render`,
`restart --dry-run`, `server-status --json` and `logs`, and saved in restart.json, play.json, manifest.json.
Here each command runs as its own invocation (the registry of secrets is emptied before each, as a fresh
process has it), against a real sandbox host with the stand-in server started through the rendered script.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml
from inproc import run_inv

from sglops.core import artifacts, redact
from sglops.sandbox.sshd import free_port
from tests.conftest import REPO

HF = "hf_inventoryVarToken_5d41402abc4b2a76"
API = "sk-extraArgsApiKey-7e57d004c2d1"
PLAY = "play-var-secret-0f1e2d3c"
ENV = "laptop-env-secret-9a8b7c6d"


@pytest.fixture
def secret_host(use_sandbox, tmp_path, monkeypatch, capsys):
    """gpu-a with `vars: {hf_token: HF}` in a copy of the sandbox inventory; profile `sec` takes it through
    {vars.hf_token} and has `--api-key API` in its extra_args."""
    inv = yaml.safe_load(use_sandbox.inventory.read_text())
    for h in inv["hosts"]:
        if h["name"] == "gpu-a":
            h["vars"] = {**(h.get("vars") or {}), "hf_token": HF}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(inv))
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    shutil.copy(REPO / "playbooks" / "profiles" / "sandbox.yaml", profiles / "sandbox.yaml")
    (profiles / "sec.yaml").write_text(
        yaml.safe_dump(
            {
                "extends": "sandbox",
                "port": free_port(),
                "startup_timeout": 15,
                "stop_grace": 2,
                "per_host": {},
                "env": {"SGLOPS_STANDIN_STARTUP_S": "0.2", "HF_TOKEN": "{vars.hf_token}"},
                "extra_args": ["--api-key", API],
            }
        )
    )
    for k, v in {
        "SGLOPS_INVENTORY": str(tmp_path / "hosts.yaml"),
        "SGLOPS_PROFILES": str(profiles),
        "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts"),
    }.items():
        monkeypatch.setenv(k, v)
    yield use_sandbox.host("gpu-a")
    redact._secrets.clear()
    # whatever a failed test left running
    run_inv(capsys, "stop", "--host", "gpu-a")


def fresh(capsys, *args: str) -> tuple[int, str]:
    """`inv ARGS` as a new process sees it: nothing registered yet."""
    redact._secrets.clear()
    code, out, err = run_inv(capsys, *args)
    return code, out + err


def leaks(text: str) -> list[str]:
    return [s for s in (HF, API, PLAY) if s in text]


def test_secrets_from_inventory_vars_and_extra_args_never_reach_output_or_artifacts(
    secret_host, capsys, tmp_path
):
    code, shown = fresh(capsys, "render", "sec", "--host", "gpu-a")
    assert code == 0, shown
    assert "HF_TOKEN=" in shown and "--api-key" in shown and not leaks(shown)
    code, shown = fresh(capsys, "restart", "sec", "--host", "gpu-a", "--dry-run")
    assert code == 0 and not leaks(shown), shown
    code, shown = fresh(capsys, "restart", "sec", "--host", "gpu-a", "--json")
    assert code == 0, shown
    assert not leaks(shown)
    for args in (
        ["server-status", "--host", "gpu-a", "--json"],
        ["server-status", "--host", "gpu-a"],
        ["logs", "--host", "gpu-a", "--lines", "200"],
    ):
        code, shown = fresh(capsys, *args)
        assert code == 0 and not leaks(shown), (args, shown)
    play = tmp_path / "p.yaml"
    play.write_text(
        f"vars: {{api_token: {PLAY}}}\nsteps:\n  - {{id: up, do: restart, with: {{profile: sec}}}}\n"
    )
    code, shown = fresh(capsys, "play", str(play), "--host", "gpu-a")
    assert code == 0 and not leaks(shown), shown
    kept = [p for p in Path(os.environ["SGLOPS_ARTIFACTS"]).rglob("*") if p.is_file()]
    assert {p.name for p in kept} >= {"restart.json", "play.json", "manifest.json"}
    for path in kept:
        assert not leaks(path.read_text(errors="replace")), path
    # on the host: every file that holds a secret is the owner's alone
    state = [p for p in Path(secret_host.home).rglob("*") if "sglops" in str(p.relative_to(secret_host.home))]
    holders = [
        p for p in state if p.is_file() and not p.is_symlink() and leaks(p.read_text(errors="replace"))
    ]
    assert holders, "the launch script on the host must hold the token (the server needs it)"
    for p in holders:
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, f"{p} is {oct(p.stat().st_mode)}"


def test_masking_by_name_covers_what_this_process_never_read(tmp_path):
    """A server's command line, log and /server_info hold secrets no profile of ours registered."""
    redact._secrets.clear()
    line = (
        f"server_args=ServerArgs(model_path='/m', api_key='{API}', hf_token=None) --api-key {API}"
        f" --hf-token={HF}"
    )
    line += f" extra_args: ['--api-key', '{API}']"
    assert not leaks(redact.text(line)) and "model_path='/m'" in redact.text(line)
    doc = {
        "argv": ["python3", "-m", "sglang.launch_server", "--api-key", API, "--port", "30000"],
        "server_info": {"api_key": API, "max_total_tokens": 4096, "tokenizer_path": "/m"},
        "log_tail": [f"export HF_TOKEN={HF}", f'{{"admin_api_key": "{API}"}}'],
        "later": f"again {API}",
    }
    masked = redact.obj(doc)
    assert not leaks(str(masked))
    assert masked["argv"][-2:] == ["--port", "30000"] and masked["server_info"]["max_total_tokens"] == 4096
    assert masked["server_info"]["tokenizer_path"] == "/m"
    # remembered once seen
    path = artifacts.write_json(tmp_path / "x.json", {"note": f"seen later: {API}"})
    assert API not in path.read_text()


def test_the_laptops_secret_environment_is_masked(monkeypatch):
    redact._secrets.clear()
    redact.register_environment({"MY_SERVICE_TOKEN": ENV, "HOME": "/root"})
    assert redact.text(f"x {ENV} /root") == "x **** /root"


def test_ordinary_names_are_not_mistaken_for_secrets():
    for name in (
        "max_total_tokens",
        "tokenizer_path",
        "completion_tokens",
        "password_env",
        "token_ids",
        "--max-total-tokens",
        "api_key_file",
        "token_logprobs",
        "cpu_us_per_token",
        "token_space",
    ):
        assert not redact.is_secret_name(name), name
    for name in ("HF_TOKEN", "--api-key", "--hf-token", "db_password", "AWS_SECRET_ACCESS_KEY", "api_token"):
        assert redact.is_secret_name(name), name
