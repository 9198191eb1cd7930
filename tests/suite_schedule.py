"""How the suite is spread over pytest-xdist workers: whole modules (their module fixtures start once: a real
server, a sandbox, a dockerd), modules that share the session's real CPU server on one worker, heaviest first.

Why heaviest first: with whole modules as units, a long module handed out last leaves the other workers idle
at the end (longest-processing-time-first keeps the tail short). The weights are measured seconds per module
on the 2-core machine (WEIGHTS); a module missing from the table weighs 1 s a test, plus 60 s when it starts a
real server or a dockerd. Only the order changes: every test runs, in its module's own order.
"""

from __future__ import annotations

import os

# modules whose tests use the session's shared real CPU server (conftest `cpu_server`): one unit, so one
# server. In unit order readers come first; test_bench_real's last test kills the server on purpose.
GROUPS = {
    "test_profile_real.py": "cpu-server",
    "test_bench_workloads_real.py": "cpu-server",
    "test_bench_loads_real.py": "cpu-server",
    "test_bench_real.py": "cpu-server",
}
GROUP_RANK = {
    "test_profile_real.py": 0,
    "test_bench_workloads_real.py": 0,
    "test_bench_loads_real.py": 0,
    "test_bench_real.py": 1,
}
# seconds per module (setup + call + teardown of its tests): the CI run of 2026-12-06 (scripts/test.sh, -n 3
# on a fresh 2-core machine, 1,685 s of tests) for the 15 modules its table listed, the last local -n 3 run
# for the rest (tests/suite_timing.py prints the table; scripts/test.sh keeps it in .cache/suite-times.json):
# update from there. Modules changed since are marked with what they should weigh now; only the order matters.
WEIGHTS: dict[str, float] = {
    "test_multinode_real.py": 483,
    "test_ab_real.py": 316,
    "test_container_server.py": 303,
    "test_ab.py": 290,
    "test_sweep_real.py": 262,
    # with the attention path check (was test_attention_path_real.py, 80 s: a start)
    "test_real_server.py": 245,
    "test_ab_real_interrupt.py": 224,
    "test_multirank_real.py": 222,
    "test_real_server_crashes.py": 208,
    "test_bench_real.py": 180,
    "test_hostile_inputs.py": 178,
    "test_experiment_nodes.py": 152,
    "test_profile_real.py": 125,
    # 109 when each of its 16 variant cases imported torch + Triton in a process of its own
    "test_fp8_mla_decode.py": 70,
    "test_patches.py": 100,
    "test_sweep_record.py": 79,
    "test_gather_cast_numeric.py": 75,
    "test_bench_workloads_real.py": 73,
    "test_kernels.py": 72,
    # two levels on the shared server (68 s when it started a server of its own)
    "test_bench_loads_real.py": 20,
    "test_crash_points.py": 68,
    "test_html_report.py": 65,
    "test_fp8_mla_cuda.py": 59,
    "test_launch.py": 58,
    "test_remote_network.py": 57,
    "test_bench.py": 55,
    "test_vllm_real.py": 55,
    "test_play.py": 41,
    "test_versions.py": 41,
    "test_host_state.py": 39,
    "test_gpu_tier.py": 32,
    "test_install_wheel.py": 32,
    "test_container.py": 31,
    "test_bench_workloads.py": 30,
    "test_bench_loads.py": 29,
    "test_hostile_server.py": 26,
    "test_play_steps.py": 23,
    "test_help_walk.py": 19,
    "test_profile.py": 18,
    "test_sweep.py": 18,
    "test_trace_scale.py": 18,
    "test_patches_across_nodes.py": 17,
    "test_patches_releases.py": 17,
    "test_standin_labels.py": 17,
    "test_probe.py": 16,
    "test_trace_hostile.py": 15,
    "test_secrets.py": 14,
    "test_trace_parallel.py": 13,
    "test_probe_view.py": 12,
    "test_remote_memo.py": 10,
    "test_trace.py": 10,
}
HEAVY_FIXTURES = {"dockerd", "cpu_server"}


def _module(item) -> str:
    return os.path.basename(item.nodeid.split("::", 1)[0])


def unit_of(nodeid: str) -> str:
    """The xdist work unit a test belongs to: its module's path, or its GROUPS name."""
    path = nodeid.split("::", 1)[0]
    return GROUPS.get(os.path.basename(path), path)


def _weights(items) -> dict[str, float]:
    """Each unit's weight: the table's, else 1 s a test plus 60 s for a real server or a dockerd."""
    per_module: dict[str, float] = {}
    heavy: set[str] = set()
    for item in items:
        mod = _module(item)
        per_module[mod] = per_module.get(mod, 0.0) + 1.0
        if item.get_closest_marker("real_server") or HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            heavy.add(mod)
    units: dict[str, float] = {}
    for mod, guess in per_module.items():
        w = WEIGHTS.get(mod, guess + (60.0 if mod in heavy else 0.0))
        unit = GROUPS.get(mod, mod)
        units[unit] = units.get(unit, 0.0) + w
    return units


def heaviest_first(items: list) -> list:
    """The items with their units ordered by weight (heaviest
    first), each module's tests in their own order."""
    units = _weights(items)

    def key(pair):
        i, item = pair
        mod = _module(item)
        unit = GROUPS.get(mod, mod)
        return (-units[unit], unit, GROUP_RANK.get(mod, 0), mod, i)

    return [item for _, item in sorted(enumerate(items), key=key)]


def make_scheduler(config, log):
    """Whole modules (and GROUPS) as units, handed out in collection order (heaviest_first's)."""
    if config.getvalue("dist") == "no":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    # keep heaviest_first's order, not "most tests first"
    config.option.loadscopereorder = False
    return ModuleUnits(config, log)
