"""Multi-rank and multi-node launches, the parts that need no server: what a host needs for several ranks,
which hosts make one server, what must match on every node, how the nodes meet, and a stop that finds a worker
which left the server's process group (real processes on this machine). The real servers:
tests/test_multirank_real.py (TP=2 on one host) and tests/test_multinode_real.py (one server over two hosts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from sglops.core.errors import ConfigError, SglopsError
from sglops.core.hosts import Host
from sglops.core.meet import Meeting, one_server
from sglops.host import server_common
from sglops.launch import deployment, ranks
from sglops.launch.profiles import load_profile
from sglops.launch.render import TreeArgs, render

CPU_HOST = {
    "cpus": [0, 1],
    "numa_nodes": 1,
    "nccl_library": "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "gpus_visible": False,
}


def test_two_ranks_on_a_cpu_host_get_a_cpu_each_and_gloo_instead_of_the_cuda_builds_nccl():
    got = {d.name: d.value for d in ranks.derived_env({"device": "cpu", "tp_size": 2}, {}, CPU_HOST)}
    assert got == {"SGLANG_CPU_OMP_THREADS_BIND": "0|1", "SGLANG_NCCL_SO_PATH": ranks.NO_NCCL}


def test_cpus_split_into_contiguous_groups_per_rank_of_this_node():
    assert ranks.cpu_groups(list(range(8)), 2) == "0-3|4-7"
    assert ranks.cpu_groups([0, 1, 2, 3, 8, 9], 3) == "0-1|2-3|8-9"
    assert ranks.cpu_groups([0, 1, 2, 4, 5], 1) == "0-2,4-5"
    with pytest.raises(
        ConfigError, match="4 ranks on this node need at least 4 CPUs; the host lets sglops use 2"
    ):
        ranks.cpu_groups([0, 1], 4)
    # two nodes of TP=4: two ranks on each node, each node splitting its own CPUs
    env = ranks.derived_env(
        {"device": "cpu", "tp_size": 4, "nnodes": 2}, {}, {**CPU_HOST, "cpus": [0, 1, 2, 3]}
    )
    assert env[0].value == "0-1|2-3"


def test_what_the_profile_sets_wins_and_nothing_is_derived_where_nothing_is_needed():
    assert (
        ranks.derived_env(
            {"device": "cpu", "tp_size": 2},
            {"SGLANG_CPU_OMP_THREADS_BIND": "all", "SGLANG_NCCL_SO_PATH": "/x"},
            CPU_HOST,
        )
        == []
    )
    # one rank
    assert ranks.derived_env({"device": "cpu", "tp_size": 1}, {}, CPU_HOST) == []
    # a GPU launch
    assert ranks.derived_env({"tp_size": 2}, {}, CPU_HOST) == []
    # offline: no host facts
    assert ranks.derived_env({"device": "cpu", "tp_size": 2}, {}, None) == []
    assert [
        d.name
        for d in ranks.derived_env(
            {"device": "cpu", "tp_size": 2}, {}, {**CPU_HOST, "numa_nodes": 2, "nccl_library": None}
        )
    ] == []
    with pytest.raises(ConfigError, match="do not split evenly over nnodes=2"):
        ranks.derived_env({"device": "cpu", "tp_size": 3, "nnodes": 2}, {}, CPU_HOST)


def test_the_tp2_profile_renders_the_host_derived_variables_into_its_script():
    tree = TreeArgs(
        "0.5.23",
        "/site",
        {
            "--tp-size",
            "--model-path",
            "--host",
            "--port",
            "--device",
            "--attention-backend",
            "--grammar-backend",
            "--max-total-tokens",
            "--max-running-requests",
            "--mem-fraction-static",
            "--sleep-on-idle",
            "--cuda-graph-backend-decode",
            "--cuda-graph-backend-prefill",
        },
        {},
        {},
        "installed",
        CPU_HOST,
    )
    host = Host("cpu-a", "127.0.0.1", vars={"model_dir": "/m"})
    out = render(load_profile("sandbox-sglang-cpu-tp2"), host, tree)
    assert "export SGLANG_CPU_OMP_THREADS_BIND='0|1'\n" in out.script
    assert f"export SGLANG_NCCL_SO_PATH={ranks.NO_NCCL}\n" in out.script
    assert "--tp-size 2" in out.script and [d["name"] for d in out.derived_env] == [
        ranks.BIND_VAR,
        ranks.NCCL_VAR,
    ]


# -- which hosts make one server, and what must match ------------------------------------------------------
def test_a_two_node_profile_needs_one_host_per_node_rank():
    p = load_profile("sandbox-sglang-cpu-2node")
    n0, n1 = Host("cpu-n0", "127.0.0.1", node_rank=0), Host("cpu-n1", "127.0.0.1", node_rank=1)
    assert deployment.node_ranks(p, [n0, n1]) == {"cpu-n0": 0, "cpu-n1": 1}
    with pytest.raises(ConfigError, match=r"restart its nodes together.*got cpu-n1=1"):
        deployment.node_ranks(p, [n1])
    with pytest.raises(ConfigError, match="got cpu-n0=0, cpu-x=0"):
        deployment.node_ranks(p, [n0, Host("cpu-x", "127.0.0.1", node_rank=0)])
    with pytest.raises(ConfigError, match="cpu-y has no node_rank"):
        deployment.node_ranks(p, [n0, Host("cpu-y", "127.0.0.1")])


def _facts(**changes):
    doc = {
        "sglang": {"version": "0.5.23", "commit": None, "kind": "installed", "dirty": None},
        "patches": [],
        "kernels": {},
        "model": {"path": "/m", "exists": True, "config_sha256": "ab"},
    }
    for key, value in changes.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and key in ("sglang", "model") else value
    return doc


def test_nodes_that_differ_are_named_with_each_nodes_value():
    assert deployment.differences({"n0": _facts(), "n1": _facts()}) == []
    got = deployment.differences(
        {
            "n0": _facts(),
            "n1": _facts(
                sglang={"version": "0.5.22"},
                patches=[{"patch": "gather-cast", "variant": "v"}],
                model={"exists": False},
            ),
        }
    )
    assert got == [
        "SGLang release: n0: 0.5.23; n1: 0.5.22",
        "applied patches: n0: none; n1: gather-cast@v",
        "model path: /m is not a folder on n1",
    ]
    assert deployment.differences({"n0": _facts(model={"exists": False})}) == [
        "model path: /m is not a folder on n0"
    ]


def test_nodes_meet_at_each_stage_and_one_that_leaves_releases_the_others_with_one_line():
    dep = Meeting(["a", "b"])
    got = {}

    def node(name):
        got[name] = dep.gather("facts", name, name.upper())

    threads = [threading.Thread(target=node, args=(n,)) for n in ("a", "b")]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert got == {"a": {"a": "A", "b": "B"}, "b": {"a": "A", "b": "B"}}
    errors = []

    def waits():
        try:
            dep.gather("started", "a", 1, timeout=30)
        except SglopsError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=waits)
    t.start()
    time.sleep(0.2)
    # node b failed before it got there
    dep.leave()
    t.join(10)
    assert errors == [
        "a: the nodes stopped before 'started': b did not get there (unreachable, or failed first: "
        "see their lines)"
    ]


def test_hosts_are_one_server_only_when_their_inventory_node_ranks_say_so():
    a, b, c = (Host(n, "127.0.0.1", node_rank=r) for n, r in (("a", 0), ("b", 1), ("c", 2)))
    assert one_server([a, b]) and one_server([b, a, c])
    assert not one_server([a]) and not one_server([b, c]) and not one_server([a, Host("x", "127.0.0.1")])


# -- the processes of a server, found by group and by mark
# --------------------------------------------------------
def test_process_roles_and_ranks_come_from_sglangs_process_titles():
    assert server_common.process_role(["sglang::scheduler_TP1"]) == ("scheduler", {"tp": 1})
    assert server_common.process_role(["sglang::scheduler_DP1_PP0_TP3_EP3"]) == (
        "scheduler",
        {"dp": 1, "pp": 0, "tp": 3, "ep": 3},
    )
    assert server_common.process_role(["sglang::detokenizer"]) == ("detokenizer", {})
    assert server_common.process_role(["/venv/bin/python", "-m", "sglang.launch_server", "--tp", "2"]) == (
        "launcher",
        {},
    )


def test_stop_finds_a_scheduler_that_left_the_group_by_its_mark_and_command_line(tmp_path):
    """A launcher and a worker that called setsid (so it is in no group of the server) and whose parent is
    gone: both carry the server's mark; stop_server ends both. A process with the same title and no mark is
    left alone."""
    paths = {n: str(tmp_path / n) for n in ("server.pid", "server.json")}
    mark = {server_common.SERVER_ID_VAR: "abc123"}
    launcher = subprocess.Popen(
        ["bash", "-c", "exec -a sglang.launch_server sleep 300"],
        start_new_session=True,
        env={**os.environ, **mark},
    )
    stray = subprocess.Popen(
        ["setsid", "bash", "-c", "exec -a sglang::scheduler_TP1 sleep 300"], env={**os.environ, **mark}
    )
    other = subprocess.Popen(
        ["bash", "-c", "exec -a sglang::scheduler_TP1 sleep 300"], start_new_session=True
    )
    try:
        time.sleep(0.3)
        assert os.getpgid(stray.pid) not in (launcher.pid, os.getpgid(0))
        found = set(server_common.marked_processes("abc123"))
        assert stray.pid in found and other.pid not in found
        (tmp_path / "server.json").write_text(
            __import__("json").dumps(
                {
                    "pid": launcher.pid,
                    "pgid": launcher.pid,
                    "server_id": "abc123",
                    "start_ticks": server_common.start_ticks(launcher.pid),
                }
            )
        )
        out = server_common.stop_server(paths, grace_s=5)
        for p in (launcher, stray):
            p.wait(10)
        assert out["stopped"] and out["left"] == [] and out["outside_group"] >= 1
        # not ours: untouched
        assert other.poll() is None
    finally:
        for p in (launcher, stray, other):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)


# -- real traces of both shapes: per rank and across ranks
# -----------------------------------------------------
@pytest.mark.parametrize("shape", ["tp2", "2node"])
def test_a_real_multi_rank_trace_is_analysed_per_rank_and_across_ranks(shape):
    from pathlib import Path

    from sglops.trace.analysis import across_ranks, analyze
    from sglops.views.trace import across_line

    folder = Path(__file__).parent / "data" / "traces"
    t0 = time.monotonic()
    a = analyze(sorted(folder.glob(f"sglang-cpu-{shape}-TP-*.trace.json.gz")))
    took = time.monotonic() - t0
    assert [f.rank for f in a.files] == [0, 1] and all(f.busy_us > 0 and f.collective_us > 0 for f in a.files)
    x = across_ranks(a.files)
    assert x["slowest_rank"] != x["fastest_rank"] and 0 < x["spread"] < 1
    # the one the others wait for
    most_own = max(a.files, key=lambda f: f.busy_us - f.collective_us)
    waits_most = max(a.files, key=lambda f: f.collective_us / f.busy_us)
    assert x["slowest_rank"] == most_own.rank and x["fastest_rank"] == waits_most.rank
    # all-reduce waits: part of, not all of, a rank
    assert all(0 < r["collective_share"] < 1 for r in x["ranks"])
    line = across_line(a)
    assert line.startswith(f"across ranks: slowest rank {x['slowest_rank']} (") and "waits for it" in line
    assert took < 10, took
    print(f"\n{shape}: {line} (analysed in {took:.2f}s)")


def test_no_single_host_restart_starts_one_node_of_a_multi_node_server_alone():
    """ab, sweep and play steps restart one host: with a
    profile over several nodes that is refused in one line."""
    from sglops.core.hosts import load_inventory, local_host
    from sglops.core.remote import connect
    from sglops.launch import server

    with connect(local_host(load_inventory())) as remote:
        with pytest.raises(
            ConfigError,
            match=r"one server over nnodes=2: restart its nodes together \(`inv restart "
            r"sandbox-sglang-cpu-2node --hosts n0,n1,...`\)",
        ):
            server.restart(remote, "sandbox-sglang-cpu-2node")
