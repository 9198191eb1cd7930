"""A server's API key never prints on a terminal, whatever its width and however long the key or the log.

The key here was never registered (an `inv logs` in a new shell): only the by-name mask can catch it, and it
must see the text before rich wraps it; a long log (over 64 KiB) must not lose a value that follows its name
on the next line.
"""

from __future__ import annotations

import random
import string

import pytest

from sglops.core import console as console_mod
from sglops.core import redact
from sglops.launch.results import LogLines
from sglops.views.launch import print_logs


def _key(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def _leaks(out: str, key: str) -> list[str]:
    """Pieces of the key (8 characters or more) anywhere in the output, line breaks and padding ignored."""
    flat = "".join(out.split())
    return [key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8] in flat]


def _log_lines(key: str) -> list[str]:
    return [
        f"[2026-12-02 10:00:00] server_args=ServerArgs(model_path='/models/m', api_key='{key}', port=30000)",
        f"command: ['python3', '-m', 'sglang.launch_server', '--api-key', '{key}', '--port', '30000']",
        f"launch: python3 -m sglang.launch_server --model-path /models/m --api-key {key} --port 30000",
        f"env: SGLANG_API_KEY={key} HF_HOME=/data",
        "decode batch " * 30,
    ]


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize("length", [63, 164])
def test_inv_logs_on_a_terminal_never_prints_the_key(width, length, monkeypatch, capsys):
    key = _key(length, width + length)
    term = console_mod._DataConsole("stdout")
    term._force_terminal = True
    term.width = width
    monkeypatch.setattr(console_mod, "console", term)
    print_logs(LogLines("gpu-a", "/x/server.log", _log_lines(key)))
    out = capsys.readouterr().out
    # printed, laid out to the width
    assert "api_key" in out and max(len(ln) for ln in out.splitlines()) <= width
    assert _leaks(out, key) == [], out


def test_a_long_log_masks_a_value_on_the_line_after_its_name():
    key = _key(64, 7)
    filler = "".join(
        f"[2026-12-02 10:00:{i % 60:02d}] decode batch: #running-req: 1, #token: {i}\n" for i in range(2000)
    )
    log = (
        filler
        + "cmd = ['python3', '-m', 'sglang.launch_server', '--api-key',\n'"
        + key
        + "', '--port', '1']\n"
        + filler
    )
    assert len(log) > 65536
    masked = redact.text(log)
    assert key not in masked
    assert masked.count("\n") == log.count("\n") and "decode batch" in masked
