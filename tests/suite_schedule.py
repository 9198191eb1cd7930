"""How the suite is spread over pytest-xdist workers: whole modules (their module fixtures start once: a real
server, a sandbox, a dockerd), modules that share the session's real CPU server on one worker, heaviest first.

Why heaviest first: with whole modules as units, a long module handed out last leaves the other workers idle at the
end (longest-processing-time-first keeps the tail short). The weights are measured seconds per module on the
2-core machine (WEIGHTS); a module missing from the table weighs 1 s a test, plus 60 s when it starts a real
server or a dockerd. Only the order changes: every test runs, in its module's own order.
"""

from __future__ import annotations

import os

# modules whose tests use the session's shared real CPU server (conftest `cpu_server`): one unit, so one server.
# In unit order readers come first; test_bench_real's last test kills the server on purpose.
GROUPS = {"test_profile_real.py": "cpu-server", "test_bench_workloads_real.py": "cpu-server",
          "test_bench_real.py": "cpu-server"}
GROUP_RANK = {"test_profile_real.py": 0, "test_bench_workloads_real.py": 0, "test_bench_real.py": 1}
# seconds per module (setup + call + teardown of its tests): one `-n 3` run on the shared 2-core machine while it
# was ~6x slower than idle (2026-12-03, 2,925 s wall, 8,397 s of tests), divided by 6; only their order matters.
# test_real_server.py was 312 (995 s alone at load 8-12 the same day); split in two, the halves took 525 s and
# 489 s side by side on 2 workers (load 6-11), in these units 165 and 153 (at load 2-4: 259 s alone; halves
# 206 s and 183 s side by side). Every run prints its own table now
# (tests/suite_timing.py; scripts/test.sh keeps it in .cache/suite-times.json): update from there.
# test_ab_real.py was 240 (696 s in the last 3-worker run, where most modules took ~2x their weight; 294 s alone
# idle); split in two, the halves took 155 s and 90 s alone idle, 220 s and 135 s side by side on 2 workers: at
# ~2x, 183 and 107. test_ab.py was 30 but took 336 s in that run (187 s alone idle, 117 s after its cuts): 105.
WEIGHTS: dict[str, float] = {
    "test_ab_real.py": 183,
    "test_real_server.py": 165,
    "test_real_server_crashes.py": 153,
    "test_container_server.py": 145,
    "test_multinode_real.py": 85,  # 120 s alone at load 1-3 (2026-12-04): two real starts, two crash starts
    "test_multirank_real.py": 70,  # 98 s alone at load 1: two real TP=2 starts
    "test_ab_real_interrupt.py": 107,
    "test_ab.py": 105,
    "test_bench_real.py": 88,
    "test_gather_cast_numeric.py": 81,
    "test_patches.py": 64,
    "test_hostile_inputs.py": 90,  # 63 + the 103 cases of issue 38 (28 s alone at load 2, 2026-12-06)
    "test_profile_real.py": 50,
    "test_crash_points.py": 42,
    "test_kernels.py": 41,
    "test_versions.py": 35,
    "test_container.py": 35,
    "test_launch.py": 29,
    "test_hostile_server.py": 25,  # 17 s of reads against tests/hostile_server.py + server-status over the sandbox
    "test_injection_sweep.py": 8,
    "test_bench.py": 23,
    "test_bench_workloads.py": 12,  # ~30 s alone at load 10-20 (2026-12-06): stand-in runs, one telemetry sampler each
    "test_bench_workloads_real.py": 6,  # two short runs on the shared server (its start is the group's)
    "test_remote_network.py": 14,
    "test_host_state.py": 14,
    "test_play.py": 14,
    "test_probe.py": 13,
    "test_standin_server.py": 7,
    "test_play_steps.py": 6,
    "test_trace.py": 6,
    "test_fp8_mla_decode.py": 6,
    "test_facts.py": 5,
    "test_decisions_patches.py": 5,
    "test_profile.py": 4,
    "test_gpu_tier.py": 4,
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
    """The items with their units ordered by weight (heaviest first), each module's tests in their own order."""
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

    config.option.loadscopereorder = False  # keep heaviest_first's order, not "most tests first"
    return ModuleUnits(config, log)
