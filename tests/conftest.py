"""Shared fixtures: real sshd sandbox hosts on loopback with real SGLang releases from PyPI.

`make_sandbox(hosts)` starts a sandbox for a module's own needs; `sandbox` is the default
two-host one (sglang 0.5.23 and 0.5.15, FlashInfer 0.7.2, 8x SM120 stand-in GPUs).
SGLOPS_TEST_NETWORK=hostile puts every sandbox host behind sglops/sandbox/netproxy.py (50 ms +- 10 ms each
way). Every fixture points SGLOPS_INVENTORY / SGLOPS_ARTIFACTS at temp folders, so tests never
touch the operator's inventory, known_hosts or artifacts, and never leave loopback.
`cpu_server` is one real SGLang CPU server shared by the tests that only read from it (started on first use,
started again if a test killed it). Under pytest-xdist (scripts/test.sh runs `-n`) whole modules go to a
worker, heaviest first (tests/suite_schedule.py), so a module's fixtures still start once.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import suite_schedule
import suite_timing

from sglops.core.hosts import load_inventory
from sglops.core.remote import connect
from sglops.sandbox.sshd import Sandbox

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def make_sandbox(tmp_path_factory):
    """Factory: make_sandbox([{"name": ..., "sglang": "0.5.23", "flashinfer": "0.7.2"}, ...]) -> Sandbox."""
    started: list[Sandbox] = []

    def make(hosts: list[dict], name: str = "sbx") -> Sandbox:
        # every sandbox host behind the hostile network
        if os.environ.get("SGLOPS_TEST_NETWORK") == "hostile":
            hosts = [{"network": {"seed": 7}, **h} for h in hosts]
        sb = Sandbox(tmp_path_factory.mktemp(name), hosts).start()
        started.append(sb)
        return sb

    yield make
    for sb in started:
        sb.stop()


@pytest.fixture(scope="session")
def sandbox(make_sandbox) -> Sandbox:
    return make_sandbox(
        [
            {"name": "gpu-a", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]},
            {"name": "gpu-b", "sglang": "0.5.15", "flashinfer": "0.7.2", "tags": ["sandbox", "sm120"]},
        ],
        name="default",
    )


@pytest.fixture
def use_sandbox(sandbox, monkeypatch, tmp_path) -> Sandbox:
    """Point sglops at the default sandbox's inventory and a fresh artifacts folder."""
    monkeypatch.setenv("SGLOPS_INVENTORY", str(sandbox.inventory))
    monkeypatch.setenv("SGLOPS_ARTIFACTS", str(tmp_path / "artifacts"))
    return sandbox


@contextlib.contextmanager
def open_remote(sandbox: Sandbox, name: str):
    """An open SSH Remote to one of the sandbox's hosts, closed afterwards."""
    inv = load_inventory(sandbox.inventory)
    with connect(inv.get(name), inventory=inv) as r:
        yield r


@pytest.fixture
def remote_a(use_sandbox):
    """An open SSH Remote to sandbox host gpu-a."""
    with open_remote(use_sandbox, "gpu-a") as r:
        yield r


@pytest.fixture
def remote_b(use_sandbox):
    """An open SSH Remote to sandbox host gpu-b (sglang 0.5.15)."""
    with open_remote(use_sandbox, "gpu-b") as r:
        yield r


def inv_cmd(*args: str, env: dict | None = None, cwd: Path = REPO):
    """Run `inv ARGS` as a user would; returns CompletedProcess with text output."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def require_real_server_env() -> None:
    """The real SGLang CPU environment (scripts/setup.sh
    builds it) or a clear reason: skip here, fail on CI."""
    from sglops.sandbox import sglang_cpu

    reason = sglang_cpu.not_ready()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"real-server tier: {reason}")
        pytest.skip(f"real-server tier: {reason}")


@pytest.fixture(scope="module")
def dockerd():
    """A real dockerd of the suite's own (no host networking touched), one per test module; skipped with its
    one reason where none can start. A daemon a killed run left behind is stopped first
    (tests/dockerd_leaks.py)."""
    import subprocess
    import uuid
    import warnings

    import dockerd_leaks

    from sglops.sandbox import docker

    reason = docker.available()
    if reason:
        pytest.skip(f"no Docker daemon can start here: {reason}")
    stopped, stuck = dockerd_leaks.stop_leaked(docker.DOCKER)
    for line in stopped:
        warnings.warn(f"stopped {line}", stacklevel=1)
    # short: unix sockets have a length limit
    root = Path(f"{dockerd_leaks.ROOT_PREFIX}{uuid.uuid4().hex[:8]}")
    try:
        daemon = docker.Dockerd(root).start()
    except Exception as exc:  # noqa: BLE001 (skipping needs the one reason, whatever it is)
        running = [f"pid {d.pid} ({d.root}, parent {d.ppid})" for d in dockerd_leaks.ours()]
        more = "; ".join([*stuck, *(["dockerds of ours running: " + ", ".join(running)] if running else [])])
        pytest.skip(f"no Docker daemon can start here: {exc}" + (f" ({more})" if more else ""))
    dockerd_leaks.record_owner(root)
    yield daemon
    daemon.stop()
    subprocess.run(["rm", "-rf", str(root)], check=False)


@pytest.fixture(scope="session")
def _shared_cpu_server(tmp_path_factory):
    from suite_server import SharedServer

    shared = SharedServer(tmp_path_factory.mktemp("cpu-server"))
    yield shared
    shared.stop()


@pytest.fixture
def cpu_server(_shared_cpu_server):
    """The real SGLang 0.5.23 CPU server (the sandbox profile's flags, and suite_server.SHARED_FLAGS) that
    read-only tests share: alive and healthy when the test starts (restarted, with a fresh log, if an earlier
    test killed it)."""
    require_real_server_env()
    return _shared_cpu_server.get()


# -- pytest-xdist: whole modules per worker, heaviest first
# (tests/suite_schedule.py) ---------------------------------
TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The controller's COLUMNS/LINES go to each worker: a worker starts with COLUMNS=80 LINES=24 of its own,
    and sglops' console wraps piped output at COLUMNS (test_text_is_data, test_gpu_tier failed on it)."""
    node.workerinput["sglops_terminal_env"] = {k: os.environ.get(k) for k in TERMINAL_ENV}


def pytest_configure(config):
    for key, value in getattr(config, "workerinput", {}).get("sglops_terminal_env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_collection_modifyitems(config, items):
    # an xdist worker; a plain run keeps pytest's own order
    if hasattr(config, "workerinput"):
        items[:] = suite_schedule.heaviest_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return suite_schedule.make_scheduler(config, log)


# -- where the time goes: seconds per module and per worker
# at the end of the run (tests/suite_timing.py) -------------
def pytest_runtest_logreport(report):
    suite_timing.record(report)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    suite_timing.summary(config, terminalreporter.write_line)
