"""Crash classes of a REAL SGLang 0.5.23 start, end to end, on a sandbox host of their own (sglang_env: cpu).

The rest of the launch tier's crash cases (tests/test_real_server.py runs the others, between its stop and its
rollback): a module of its own so that another xdist worker takes these starts (each 20-60 s of CPU here). Same
host, profile and assertions as there (tests/real_server_host.py).
"""

from __future__ import annotations

import pytest
from real_server_host import (
    CRASHES,
    OTHER_CRASHES,
    WORKFLOW_CRASHES,
    real_host,
    start_up_failure_is_named_and_leaves_nothing,
)

pytestmark = pytest.mark.real_server


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """(sandbox, remote): one sshd host whose SGLang is the real pip-installed 0.5.23, sglops pointed at it."""
    yield from real_host(tmp_path_factory, "real-crashes")


def test_the_two_modules_run_every_crash_case_once():
    assert sorted(WORKFLOW_CRASHES + OTHER_CRASHES) == sorted(CRASHES)


@pytest.mark.parametrize("case", OTHER_CRASHES)
def test_a_real_start_up_failure_is_named_and_leaves_nothing(real, case):
    sb, remote = real
    start_up_failure_is_named_and_leaves_nothing(remote, case)
