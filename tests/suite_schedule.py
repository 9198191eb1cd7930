"""How the suite is spread over pytest-xdist workers: whole modules (their module fixtures start once: a real
server, a sandbox, a dockerd), modules that share the session's real CPU server on one worker, heaviest first.

Why heaviest first: with whole modules as units, a long module handed out last leaves the other workers idle at the
end (longest-processing-time-first keeps the tail short). The weights are one serial run's seconds per module on the
2-core machine (`pytest --durations=0`, 2026-12-03); a module missing from the table weighs 2 s a test, plus 60 s
when it starts a real server or a dockerd. Only the order changes: every test runs, in its module's own order.
"""

from __future__ import annotations

import os

# modules whose tests use the session's shared real CPU server (conftest `cpu_server`): one unit, so one server.
# In unit order readers come first; test_bench_real's last test kills the server on purpose.
GROUPS = {"test_profile_real.py": "cpu-server", "test_bench_real.py": "cpu-server"}
GROUP_RANK = {"test_profile_real.py": 0, "test_bench_real.py": 1}
# seconds per module, serial run (setup + call + teardown of every test)
WEIGHTS: dict[str, float] = {}
HEAVY_FIXTURES = {"dockerd", "cpu_server"}


def _module(item) -> str:
    return os.path.basename(item.nodeid.split("::", 1)[0])


def unit_of(nodeid: str) -> str:
    """The xdist work unit a test belongs to: its module's path, or its GROUPS name."""
    path = nodeid.split("::", 1)[0]
    return GROUPS.get(os.path.basename(path), path)


def _weights(items) -> dict[str, float]:
    """Each unit's weight: the table's, else 2 s a test plus 60 s for a real server or a dockerd."""
    per_module: dict[str, float] = {}
    heavy: set[str] = set()
    for item in items:
        mod = _module(item)
        per_module[mod] = per_module.get(mod, 0.0) + 2.0
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
