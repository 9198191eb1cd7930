"""Ctrl-C during an `inv ab` on the REAL SGLang 0.5.23
CPU server (red team F11), on a sandbox host of its own.

A module of its own so that another xdist worker takes its real starts while tests/test_ab_real.py runs the
other real-server ab proofs; the host, profiles and patch are the same (tests/ab_real_host.py).
"""

from __future__ import annotations

import json
import signal
import time

import pytest
from ab_real_host import BENCH, PATCH, applied, real_ab_host
from conftest import inv_cmd

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def real_ab(tmp_path_factory):
    """(sandbox, env, site): host cpu-a on the private tree, profile cpu, the test patch."""
    yield from real_ab_host(tmp_path_factory, "ab-real-interrupt")


def test_ctrl_c_on_the_real_server_restores_the_tree_and_a_second_one_waits(real_ab):
    """F11 on the real server: Ctrl-C as round 1 restarts the real server on the patched tree (side A is the
    patched one, so no unpatched start comes first; a restart that already began on the host keeps running
    there and the restore waits for its lock, but the signal follows the note so closely that it usually lands
    before the host's restart begins), then Ctrl-C twice during the restore. The restore runs to its end:
    the patch reverted, the found server back, one line, exit 130, no journal left."""
    from test_ab import _Ab

    sb, env, site = real_ab
    up = inv_cmd("restart", "cpu", "--host", "cpu-a", env=env)
    assert up.returncode == 0, up.stderr[-3000:]
    ab_run = _Ab(env, "-a", f"cpu+{PATCH}", "-b", "cpu", "--rounds", "2", *BENCH, host="cpu-a")
    ab_run.wait_for("round 1/2 A: restart", timeout=1500)
    ab_run.proc.send_signal(signal.SIGINT)
    # the patch was on the host by then
    assert any(f"round 1/2 A: apply {PATCH}" in ln for ln in ab_run.err)
    ab_run.wait_for("restore: ", timeout=600)
    ab_run.proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    ab_run.proc.send_signal(signal.SIGINT)
    rc, _out, err = ab_run.finish(timeout=1800)
    assert rc == 130 and "Traceback" not in err, err[-3000:]
    assert err.count("restoring, please wait") == 1, err[-3000:]
    (line,) = [ln for ln in err.splitlines() if "interrupted (SIGINT)" in ln]
    assert "host restored (server cpu on port" in line and "patches none" in line, line
    assert (
        applied(env) == []
        and "sglops: perturb-logits-test"
        not in (site / "sglang" / "srt" / "layers" / "sampler.py").read_text()
    )
    doc = json.loads(inv_cmd("patches", "--host", "cpu-a", "--json", env=env).stdout)
    assert doc["ab"] is None
    st = json.loads(inv_cmd("server-status", "--host", "cpu-a", "--json", env=env).stdout)
    assert st["running"] and st["profile"] == "cpu" and st["health"] == 200
