"""One way to print any result: `show(result)` for tasks (sglops.cli) and plays alike.

Views are functions of the view layer (sglops.views.<domain>), registered here by result class (an
operation names no view: its function's return type finds it), so domain classes keep data and JSON only and
never import their views. A domain's views are registered when a result of that domain is first shown (a task
that prints a launch script loads no bench view); `every_view()` registers them all. Every result class the
package defines and every operation's result has a view here (tests/test_result_contract.py walks the package
and the catalogue).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import cache, singledispatch
from types import ModuleType
from typing import Any

from rich.console import RenderableType

import sglops.bench
import sglops.experiment
import sglops.kernel
import sglops.launch
import sglops.patch
import sglops.play.result as play_result
import sglops.probe
import sglops.trace
from sglops.core import result as core_result
from sglops.core.console import console
from sglops.views.alike import text_of


def _registered(cls: type) -> bool:
    """Register the views of cls's home (the nearest module or package above it with a registrar); whether
    it has one."""
    for base in cls.__mro__:
        parts = base.__module__.split(".")
        for home in (sys.modules.get(".".join(parts[:n])) for n in range(len(parts), 1, -1)):
            if home in _VIEWS:
                _VIEWS[home]()
                return True
    return False


@singledispatch
def render(result: Any, **options: Any) -> RenderableType:
    """The rich renderable for result: the view registered for its class."""
    if _registered(type(result)) and render.dispatch(type(result)) is not _no_view:
        return render(result, **options)
    raise TypeError(f"no view for {type(result).__name__} (register one in sglops.views.show)")


_no_view = render.dispatch(object)


@singledispatch
def show(result: Any, **options: Any) -> None:
    """Print result's view on the console (options such as top= go to the view); a result printed otherwise
    than as one renderable on stdout (a script to redirect, log lines, a report's path) registers its own
    printer here."""
    if _registered(type(result)) and show.dispatch(type(result)) is not _plain:
        return show(result, **options)
    console.print(render(result, **options))
    return None


_plain = show.dispatch(object)


def laid_out(result: Any, **options: Any) -> str | None:
    """The text show(result) would print, laid out now (rich buffers per thread: a host's worker lays out its
    result while the other hosts still work); None for a result printed otherwise than as one renderable."""
    _registered(type(result))
    if show.dispatch(type(result)) is not _plain:
        return None
    return text_of(render(result, **options))


def alike(result: Any, **options: Any) -> Any:
    """The result split for a fan-out (sglops.views.alike.Alike), None for a result whose view has no such
    split."""
    _registered(type(result))
    split = _ALIKE.get(type(result))
    return split(result, **options) if split else None


# result class -> its Alike (views that print one body for the hosts of one answer)
_ALIKE: dict[type, Callable[..., Any]] = {}


def every_view() -> None:
    """Register every domain's views (the contract test asks the registry about every result class)."""
    for registrar in set(_VIEWS.values()):
        registrar()


@cache
def _trace() -> None:
    from sglops.trace.analysis import TraceAnalysis
    from sglops.trace.diff import TraceDiff
    from sglops.trace.profile import ProfileResult
    from sglops.views import trace, trace_diff

    render.register(TraceAnalysis, lambda a, top=12: trace.table(a, top))
    render.register(TraceDiff, lambda d, top=12: trace_diff.tables(d, top))
    render.register(ProfileResult, trace.profile_table)
    show.register(TraceAnalysis, lambda a: trace.show_analysis(a))


@cache
def _launch() -> None:
    from sglops.launch.render import Rendered
    from sglops.launch.results import LogLines, RestartResult, ServerStatus, StopResult
    from sglops.views import launch

    render.register(RestartResult, launch.restart_table)
    render.register(StopResult, launch.stop_view)
    render.register(ServerStatus, launch.status_table)
    render.register(LogLines, launch.logs_view)
    render.register(Rendered, launch.rendered_view)
    show.register(Rendered, lambda r: launch.show_script(r))
    show.register(LogLines, lambda r, follow=False: launch.print_logs(r, follow))


@cache
def _bench() -> None:
    from sglops.bench.compare import Comparison, RunList
    from sglops.bench.run import BenchResult
    from sglops.views import bench

    render.register(BenchResult, bench.bench_table)
    render.register(Comparison, bench.compare_table)
    render.register(RunList, bench.runs_table)


@cache
def _experiment() -> None:
    from sglops.experiment.ab_result import AbResult
    from sglops.experiment.duel import DuelResult
    from sglops.experiment.sweep_result import SweepResult
    from sglops.views import ab, sweep
    from sglops.views.duel import duel_view

    render.register(AbResult, ab.ab_table)
    render.register(SweepResult, sweep.sweep_view)
    render.register(DuelResult, duel_view)


@cache
def _patch() -> None:
    from sglops.patch.apply import PatchList, PatchResult
    from sglops.patch.capture import Capture
    from sglops.views import patch

    render.register(PatchResult, patch.patch_table)
    render.register(PatchList, patch.patch_list_table)
    render.register(Capture, patch.capture_view)


@cache
def _kernel() -> None:
    from sglops.kernel.build import KernelAction, KernelBuild
    from sglops.views import kernel

    render.register(KernelBuild, kernel.build_table)
    render.register(KernelAction, kernel.action_table)


@cache
def _probe() -> None:
    from sglops.probe.facts import Facts
    from sglops.probe.report import ProbeReport
    from sglops.probe.vllm_backends import VllmProbeReport
    from sglops.views import probe, vllm_probe

    render.register(Facts, probe.facts_table)
    render.register(ProbeReport, lambda r, show_hits=False, wide=False: probe.probe_view(r, show_hits, wide))
    _ALIKE[ProbeReport] = lambda r, show_hits=False, wide=False: probe.probe_alike(r, show_hits, wide)
    render.register(VllmProbeReport, vllm_probe.vllm_probe_view)


@cache
def _play() -> None:
    from sglops.views import play, report

    render.register(play_result.PlayResult, play.play_table)
    render.register(core_result.Planned, play.planned_view)
    show.register(play_result.Written, lambda w: report.print_written(w.path))


# the module (or package) results live in -> the registrar of their views
_VIEWS: dict[ModuleType, Callable[[], None]] = {
    sglops.trace: _trace,
    sglops.launch: _launch,
    sglops.bench: _bench,
    sglops.experiment: _experiment,
    sglops.patch: _patch,
    sglops.kernel: _kernel,
    sglops.probe: _probe,
    play_result: _play,
    core_result: _play,
}
