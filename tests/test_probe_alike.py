"""probe-backends over many hosts prints each distinct answer once, headed by the hosts that gave it (issue
44): an operator asking 64 hosts of one release reads one report, not 64 copies. One host prints as before;
--json stays one document per host."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import inv_cmd, open_remote

from sglops.probe.scan import scan
from sglops.probe.spec import load_probe_set
from sglops.sandbox.sshd import Sandbox
from sglops.views.show import alike, laid_out

HOSTS = ["al-1", "al-2", "al-3", "al-old"]


@pytest.fixture(scope="module")
def sandbox4(make_sandbox) -> Sandbox:
    return make_sandbox(
        [
            {"name": n, "sglang": "0.5.15" if n == "al-old" else "0.5.23", "flashinfer": "0.7.2"}
            for n in HOSTS
        ],
        name="alike",
    )


@pytest.fixture(scope="module")
def env(sandbox4, tmp_path_factory) -> dict:
    return {
        "SGLOPS_INVENTORY": str(sandbox4.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path_factory.mktemp("art")),
    }


def probe(env: dict, *flags: str) -> str:
    r = inv_cmd("probe-backends", *flags, env={**env, "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_one_body_per_answer(env):
    out = probe(env, "--hosts", ",".join(HOSTS))
    heads = [line for line in out.splitlines() if line.startswith("probe-backends: al-")]
    assert len(heads) == 2, out
    assert heads[0].startswith("probe-backends: al-1, al-2, al-3 (sglang 0.5.23")
    assert heads[1].startswith("probe-backends: al-old (sglang 0.5.15")
    assert out.count("attention backends (srt/layers/attention/*_backend.py)") == 2
    assert "probe-backends: 2 different answers from 4 hosts: al-1, al-2, al-3; al-old" in out
    assert "probe-backends: 4 ok, 0 failed" in out


def test_one_answer_and_json_per_host(env):
    out = probe(env, "--hosts", "al-1,al-2")
    assert out.count("attention backends (srt/layers/attention/*_backend.py)") == 1
    assert "probe-backends: one answer from both hosts" in out
    docs = json.loads(probe(env, "--hosts", "al-1,al-2", "--json"))
    assert [d["host"] for d in docs] == ["al-1", "al-2"] and all(d["backends"] for d in docs)


def test_one_host_prints_as_before(env):
    out = probe(env, "--host", "al-1")
    assert out.startswith("probe-backends: al-1 (sglang 0.5.23") and "answer" not in out.splitlines()[-1]


@pytest.mark.parametrize("options", [{}, {"wide": True}, {"show_hits": True}])
def test_the_split_is_the_view(sandbox4, env, monkeypatch, options):
    """Heading + body is the one-host view, byte for byte; the key ignores the host and the time, not the
    answer."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    reps = {}
    for name in ("al-1", "al-old"):
        with open_remote(sandbox4, name) as remote:
            reps[name] = scan(remote, load_probe_set(None))
    rep = reps["al-1"]
    split = alike(rep, **options)
    assert split.head_text([rep]) + split.body_text() == laid_out(rep, **options)
    twin = dataclasses.replace(rep, host="al-9", seconds=rep.seconds + 1)
    assert alike(twin, **options).key == split.key
    assert alike(reps["al-old"], **options).key != split.key
    changed = dataclasses.replace(rep, flags=[*rep.flags, "one more flag"])
    assert alike(changed, **options).key != split.key


def test_a_broken_split_is_that_hosts_bug(env, monkeypatch, capsys):
    from inproc import run_inv

    from sglops.core.errors import EXIT_BUG
    from sglops.views import show

    real = show.alike

    def broken(result, **options):
        if result.host == "al-2":
            # stands for a bug in one host's split
            raise ValueError("split broke")
        return real(result, **options)

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(show, "alike", broken)
    code, out, err = run_inv(capsys, "probe-backends", "--hosts", "al-1,al-2,al-3")
    assert code == EXIT_BUG
    assert (
        "probe-backends: al-1, al-3 (sglang 0.5.23" in out
        and "probe-backends: 2 ok, 1 failed (al-2: bug)" in out
    )
    assert "error: [al-2] internal error (a bug in sglops): ValueError: split broke" in err
