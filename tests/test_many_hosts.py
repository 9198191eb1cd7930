"""Several hosts at once: whatever happens on one host (a bug included) is that host's outcome.

The two sandbox hosts, an unreachable one (a closed loopback port) and a host where the step raises
an unexpected Python exception: the good host's result survives and prints, the bug keeps its
traceback in --json, and the exit code follows the classes in sglops/core/errors.py.
"""

from __future__ import annotations

import json

import pytest
from inproc import run_inv

from sglops.core.errors import EXIT_BUG, EXIT_CONNECT, EXIT_MIXED, EXIT_USAGE, combined_exit
from sglops.probe import facts
from sglops.sandbox.sshd import free_port

# nothing listens there
UNREACHABLE = f"127.0.0.1:{free_port()}"


@pytest.fixture
def buggy_on_gpu_b(use_sandbox, monkeypatch):
    real = facts.gather

    def gather(remote):
        if remote.name == "gpu-b":
            # stands for a bug in sglops on one host
            raise KeyError("cuda")
        return real(remote)

    monkeypatch.setattr(facts, "gather", gather)
    return use_sandbox


def test_a_bug_and_an_unreachable_host_do_not_hide_the_good_host(buggy_on_gpu_b, capsys):
    code, out, err = run_inv(capsys, "facts", "--hosts", f"gpu-a,gpu-b,{UNREACHABLE}", "--json")
    assert code == EXIT_MIXED
    docs = {d["host"]: d for d in json.loads(out)}
    assert docs["gpu-a"]["ok"] and docs["gpu-a"]["sglang"]["version"] == "0.5.23"
    assert docs["gpu-b"]["kind"] == "bug" and docs["gpu-b"]["exit_code"] == EXIT_BUG
    assert "KeyError: 'cuda'" in docs["gpu-b"]["traceback"] and "in gather" in docs["gpu-b"]["traceback"]
    assert docs[UNREACHABLE]["kind"] == "connect" and docs[UNREACHABLE]["exit_code"] == EXIT_CONNECT
    assert "Traceback" not in err

    code, out, err = run_inv(capsys, "facts", "--hosts", f"gpu-a,gpu-b,{UNREACHABLE}")
    assert code == EXIT_MIXED
    assert "facts: gpu-a" in out and "0.5.23" in out
    assert "facts: 1 ok, 2 failed (gpu-b: bug, " in out
    assert "error: [gpu-b] internal error (a bug in sglops): KeyError: 'cuda'" in err
    assert f"cannot reach root@{UNREACHABLE}" in err
    # a bug shows where it is
    assert "Traceback (most recent call last)" in err


def test_the_exit_code_is_the_class_the_failures_share(use_sandbox, capsys):
    other = f"127.0.0.1:{free_port()}"
    code, out, err = run_inv(capsys, "facts", "--hosts", f"gpu-a,{UNREACHABLE},{other}")
    assert code == EXIT_CONNECT
    assert "facts: 1 ok, 2 failed" in out and len(err.strip().splitlines()) == 2
    assert (
        combined_exit([0, 0]) == 0 and combined_exit([0, 6, 6]) == 6 and combined_exit([3, 70]) == EXIT_MIXED
    )


@pytest.mark.parametrize("hosts", [",", " , ", "gpu-a,gpu-a"])
def test_a_hosts_list_naming_no_host_or_one_twice_is_a_user_error(use_sandbox, capsys, hosts):
    code, out, err = run_inv(capsys, "facts", "--hosts", hosts)
    assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1 and "--hosts names" in err


def test_each_hosts_result_is_laid_out_in_its_worker_and_a_broken_view_is_that_hosts_bug(
    use_sandbox, capsys, monkeypatch
):
    import threading

    from sglops.views import show

    real, threads = show.laid_out, []

    def laid_out(result, **options):
        threads.append(threading.current_thread())
        if result.host == "gpu-a":
            # stands for a bug in one host's view
            raise ValueError("view broke")
        return real(result, **options)

    monkeypatch.setattr(show, "laid_out", laid_out)
    code, out, err = run_inv(capsys, "facts", "--hosts", "gpu-a,gpu-b")
    assert code == EXIT_BUG
    # laid out beside the other host's wait
    assert len(threads) == 2 and threading.main_thread() not in threads
    assert "facts: gpu-b" in out and "facts: gpu-a" not in out and "facts: 1 ok, 1 failed (gpu-a: bug)" in out
    assert "error: [gpu-a] internal error (a bug in sglops): ValueError: view broke" in err
