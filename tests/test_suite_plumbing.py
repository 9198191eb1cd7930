"""The suite's own machinery: how modules are spread over
xdist workers, and the dockerd a killed run leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import dockerd_leaks
import pytest
import suite_schedule

from sglops.sandbox import docker

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Item:
    """What heaviest_first reads of a pytest item."""

    nodeid: str
    marks: tuple[str, ...] = ()
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


def test_heaviest_units_first_modules_whole_and_in_their_own_order(monkeypatch):
    monkeypatch.setattr(suite_schedule, "WEIGHTS", {"test_a.py": 5.0, "test_bench_real.py": 40.0})
    items = [
        Item("tests/test_a.py::one"),
        Item("tests/test_bench_real.py::first"),
        Item("tests/test_a.py::two"),
        Item("tests/test_bench_real.py::dies"),
        Item("tests/test_c.py::x", marks=("real_server",)),
        Item("tests/test_profile_real.py::p", fixturenames=["cpu_server"]),
        Item("tests/test_d.py::y"),
        Item("tests/test_d.py::z"),
    ]
    order = [i.nodeid for i in suite_schedule.heaviest_first(items)]
    # the cpu-server group (40 + 2 + 60) > test_c (2 + 60) > test_a (5) > test_d (4); readers of the shared
    # server before test_bench_real, whose last test kills it; each module's tests in their own order
    assert order == [
        "tests/test_profile_real.py::p",
        "tests/test_bench_real.py::first",
        "tests/test_bench_real.py::dies",
        "tests/test_c.py::x",
        "tests/test_a.py::one",
        "tests/test_a.py::two",
        "tests/test_d.py::y",
        "tests/test_d.py::z",
    ]


def test_the_work_units_are_whole_modules_and_the_shared_server_group():
    assert suite_schedule.unit_of("tests/test_bench_real.py::test_x[sglang]") == "cpu-server"
    assert suite_schedule.unit_of("tests/test_profile_real.py::test_y") == "cpu-server"
    assert suite_schedule.unit_of("tests/test_trace.py::test_z[a::b]") == "tests/test_trace.py"


def test_a_dockerd_left_by_a_killed_run_is_found_and_stopped(tmp_path):
    reason = docker.available()
    if reason:
        pytest.skip(f"no Docker daemon can start here: {reason}")
    root = Path(f"{dockerd_leaks.ROOT_PREFIX}{os.urandom(4).hex()}")
    # a test run in miniature: it starts our dockerd, records itself as the owner, and is then SIGKILLed
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from pathlib import Path; sys.path.insert(0, sys.argv[2])\n"
                "import dockerd_leaks; from sglops.sandbox import docker\n"
                "root = Path(sys.argv[1]); docker.Dockerd(root).start(); dockerd_leaks.record_owner(root)\n"
                "print('ready', flush=True); time.sleep(600)\n"
            ),
            str(root),
            str(REPO / "tests"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert run.stdout.readline().strip() == "ready"
        (live,) = [d for d in dockerd_leaks.ours() if d.root == root]
        # its run is alive: never touched
        assert not dockerd_leaks.is_leaked(live)
        run.send_signal(signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 10
        # re-parented once its run is gone
        while time.monotonic() < deadline:
            live = _find(root)
            if live is None or dockerd_leaks.is_leaked(live):
                break
            time.sleep(0.1)
        # still running, and found as a leak
        assert live is not None and dockerd_leaks.is_leaked(live)
        stopped, stuck = dockerd_leaks.stop_leaked(docker.DOCKER)
        assert stuck == [] and f"dockerd pid {live.pid} ({root}) left by a killed run" in stopped
        assert _find(root) is None and not root.exists()
    finally:
        run.kill()
        found = _find(root)
        # the test failed half-way: leave nothing running
        if found:
            dockerd_leaks.stop(found, docker.DOCKER)


def _find(root: Path):
    return next((d for d in dockerd_leaks.ours() if d.root == root), None)


def test_the_time_summary_ranks_modules_and_totals_each_worker():
    import suite_timing

    times = suite_timing.SuiteTimes()
    # a reading at boot: the machine's ticks have advanced since
    times.cpu_at_start = (0, 1)
    for nodeid, when, s, w in [
        ("tests/test_a.py::one", "setup", 30.0, "gw0"),
        ("tests/test_a.py::one", "call", 2.0, "gw0"),
        ("tests/test_a.py::two", "call", 3.0, "gw0"),
        ("tests/test_a.py::two", "teardown", 5.0, "gw0"),
        ("tests/test_b.py::x[p::q]", "call", 50.0, "gw1"),
        ("tests/test_c.py::y", "call", 1.0, "gw0"),
    ]:
        times.add(nodeid, when, s, w)
    lines = times.lines(top=2)
    assert lines[0].startswith("slowest modules") and "3 modules, 91 s" in lines[0]
    # slowest first
    assert "50.0 s" in lines[1] and "1 tests  test_b.py  [gw1]" in lines[1]
    # setup + calls + teardown
    assert "40.0 s" in lines[2] and "2 tests  test_a.py  [gw0]" in lines[2]
    # beyond top
    assert not any("test_c.py" in line for line in lines)
    assert lines[3] == "per worker: gw0 41 s, gw1 50 s"
    assert times.to_json()["test_a.py"] == {"seconds": 40.0, "tests": 2, "workers": ["gw0"]}
    assert lines[4].startswith("cpu: ") and "% busy over the run" in lines[4]


def test_the_cpu_line_is_the_busy_share_of_the_ticks_between_two_readings():
    import suite_timing

    assert suite_timing.cpu_line((100, 1000), (400, 1400)) == (
        f"cpu: 75% busy over the run ({__import__('os').cpu_count()} cores, the whole machine)"
    )
    assert suite_timing.cpu_line(None, (1, 2)) is None and suite_timing.cpu_line((5, 10), (5, 10)) is None
    busy, total = suite_timing.cpu_ticks()
    assert 0 <= busy <= total


def test_cheaper_starts_skip_every_model_module_but_the_llamas(tmp_path):
    from sglops.sandbox import sglang_cpu

    models = tmp_path / "srt" / "models"
    models.mkdir(parents=True)
    for name in ("llama.py", "deepseek_v2.py", "qwen3.py", "__init__.py", "_private.py", "notes.txt"):
        (models / name).write_text("")
    (models / "subpkg").mkdir()
    assert sglang_cpu.start_env(tmp_path) == {"SGLANG_DISABLED_MODEL_ARCHS": "deepseek_v2,qwen3"}
    (models / "deepseek_v2.py").unlink()
    (models / "qwen3.py").unlink()
    # nothing to skip: no variable at all
    assert sglang_cpu.start_env(tmp_path) == {}
