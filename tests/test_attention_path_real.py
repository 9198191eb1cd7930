"""`inv restart --check-path` on a REAL SGLang 0.5.23 server (CPU, tiny Llama, sandbox host over SSH): the attention
path predicted from the host's pip-installed tree is compared with what the running server reports in /server_info.

A match lands in the restart's `confirmed`, a difference in its `mismatches` (both in restart.json). The second test
asks about a launch the server did NOT get (--attention-backend triton) against the same running server: the
check must say they differ. Needs the environment scripts/setup.sh builds (skips with the reason otherwise).
"""

from __future__ import annotations

import json

import pytest
from real_server_host import PROFILE, real_host

from sglops.launch import server as launch
from sglops.launch.path_check import check_restart
from sglops.launch.results import RestartResult
from sglops.sandbox import sglang_cpu
from sglops.sandbox.sshd import free_port
from tests.conftest import inv_cmd

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    yield from real_host(tmp_path_factory, "attn")


_STATE: dict = {}


def test_restart_confirms_the_predicted_backends_from_server_info(real):
    port = free_port()
    r = inv_cmd("restart", PROFILE, "--host", "cpu-a", "--port", str(port), "--check-path", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    res = res[0] if isinstance(res, list) else res
    res = res.get("result", res)
    assert res["state"] == "healthy" and res["server_info"]["version"] == sglang_cpu.SGLANG_VERSION
    assert res["server_info"]["attention_backend"] == "torch_native"
    for stage in ("prefill", "decode"):
        said = res["confirmed"][f"attention {stage}"]
        assert said.startswith("torch_native as predicted (--attention-backend)"), said
    assert not any(k.startswith("attention") for k in res["mismatches"]), res["mismatches"]
    _STATE.update(port=port, log_tail=res["log_tail"])


def test_a_prediction_the_server_does_not_run_is_called_a_difference(real):
    sb, remote = real
    if "port" not in _STATE:
        pytest.skip("the restart above did not come up")
    info = launch.server_info(remote, _STATE["port"])
    result = RestartResult(host="cpu-a", profile=PROFILE, ok=True, state="healthy", port=_STATE["port"],
                           server_info=info, log_tail=_STATE["log_tail"])
    args = {"model_path": str(sglang_cpu.model_dir()), "attention_backend": "triton"}
    cmp = check_restart(remote, result, args)
    assert cmp is not None and cmp["predicted"]["arch"] == "LlamaForCausalLM"  # read from the host's config.json
    assert cmp["predicted"]["mla"] is False and cmp["predicted"]["sparse"] is False
    assert result.mismatches["attention decode"] == {"asked": "predicted triton", "effective": "torch_native"}
    assert result.mismatches["attention prefill"]["effective"] == "torch_native"
    assert cmp["stages"]["decode"]["field"] == "attention_backend"
