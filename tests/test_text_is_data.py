"""Text from hosts, trees and users is data: never rich markup, never cropped where it is piped.

Before: a probe hit `dtype in [torch.bfloat16, torch.float8_e4m3fn]` printed as `dtype in`, an error
with `[/x]` in it crashed the error path, `[gpu-a]` host prefixes vanished, and `inv render P --host H
> launch.sh` wrote a script cropped at 80 columns with a warning inside it.
"""

from __future__ import annotations

import json
import subprocess

from conftest import inv_cmd
from inproc import run_inv
from rich.table import Table

from sglops.core.console import console, error_line


def test_a_probe_hit_with_brackets_is_shown_whole(use_sandbox):
    env = {"SGLOPS_INVENTORY": str(use_sandbox.inventory)}
    # stdout is a pipe
    res = inv_cmd("probe-backends", "--host", "gpu-a", "--show-hits", env=env)
    assert res.returncode == 0, res.stderr
    hits = [line for line in res.stdout.splitlines() if "in [torch.bfloat16, torch.float8_e4m3fn]" in line]
    assert hits, "the hit text lost its [...] (read as markup) or was wrapped over lines"
    assert any("dsa_backend.py:" in line for line in hits)


def test_markup_like_error_text_is_one_plain_line(use_sandbox, capsys):
    code, out, err = run_inv(capsys, "facts", "--host", "[/x]")
    assert code == 2
    assert err.splitlines() == [err.strip()] and "unknown host '[/x]'" in err and "Traceback" not in err
    error_line("remote said [bold]x[/bold] and [/y]\nsecond line")
    assert capsys.readouterr().err.strip() == "error: remote said [bold]x[/bold] and [/y] | second line"


def test_host_names_in_brackets_stay_visible(capsys):
    t = Table(title="[gpu-a] facts")
    t.add_column("[gpu-b]")
    t.add_row("[torch.bfloat16, torch.float8_e4m3fn]")
    console.print(t)
    console.print("[gpu-a] ok")
    out = capsys.readouterr().out
    for text in ("[gpu-a] facts", "[gpu-b]", "[torch.bfloat16, torch.float8_e4m3fn]", "[gpu-a] ok"):
        assert text in out


def test_render_to_a_file_is_exactly_the_script(use_sandbox, tmp_path):
    env = {"SGLOPS_INVENTORY": str(use_sandbox.inventory)}
    # stdout is a pipe, as in `> launch.sh`
    res = inv_cmd("render", "sandbox", "--host", "gpu-a", env=env)
    assert res.returncode == 0, res.stderr
    as_json = inv_cmd("render", "sandbox", "--host", "gpu-a", "--json", env=env)
    script = json.loads(as_json.stdout)["script"]
    assert max(len(line) for line in script.splitlines()) > 80, "the test needs a line longer than 80 columns"
    assert res.stdout == script if script.endswith("\n") else res.stdout == script + "\n"
    assert "warning:" in res.stderr and "warning:" not in res.stdout, "warnings go to stderr"
    launch = tmp_path / "launch.sh"
    launch.write_text(res.stdout)
    assert subprocess.run(["bash", "-n", str(launch)], capture_output=True).returncode == 0
