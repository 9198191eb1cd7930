"""One way to print any result: `show(result)` for tasks (sglops.cli) and plays alike.

Views are functions of the view layer (sglops.views.<domain>), registered here by result class, so domain
classes keep data and JSON only and never import their views. Every result class the package defines and every
operation's result has a view here (tests/test_result_contract.py walks the package and the catalogue for them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType

# Result class (its module.qualname) -> (view module under sglops.views, the view taking (result, **options)).
# By name, so printing a result imports its own view module and nothing else (importing every result class and
# view cost a task ~130 ms); `render.registry` imports them all for the contract tests.
_VIEWS: dict[str, tuple[str, Callable[[Any], Callable[..., RenderableType]]]] = {
    "sglops.trace.analysis.TraceAnalysis": ("trace", lambda v: lambda a, top=12: v.table(a, top)),
    "sglops.trace.diff.TraceDiff": ("trace_diff", lambda v: lambda d, top=12: v.tables(d, top)),
    "sglops.trace.profile.ProfileResult": ("trace", lambda v: v.profile_table),
    "sglops.launch.results.RestartResult": ("launch", lambda v: v.restart_table),
    "sglops.launch.results.StopResult": ("launch", lambda v: v.stop_view),
    "sglops.launch.results.ServerStatus": ("launch", lambda v: v.status_table),
    "sglops.launch.results.LogLines": ("launch", lambda v: v.logs_view),
    "sglops.launch.render.Rendered": ("launch", lambda v: v.rendered_view),
    "sglops.bench.run.BenchResult": ("bench", lambda v: v.bench_table),
    "sglops.bench.compare.Comparison": ("bench", lambda v: v.compare_table),
    "sglops.bench.compare.RunList": ("bench", lambda v: v.runs_table),
    "sglops.experiment.ab_result.AbResult": ("ab", lambda v: v.ab_table),
    "sglops.experiment.sweep_result.SweepResult": ("sweep", lambda v: v.sweep_view),
    "sglops.patch.apply.PatchResult": ("patch", lambda v: v.patch_table),
    "sglops.patch.apply.PatchList": ("patch", lambda v: v.patch_list_table),
    "sglops.kernel.build.KernelBuild": ("kernel", lambda v: v.build_table),
    "sglops.kernel.build.KernelAction": ("kernel", lambda v: v.action_table),
    "sglops.patch.capture.Capture": ("patch", lambda v: v.capture_view),
    "sglops.probe.facts.Facts": ("probe", lambda v: v.facts_table),
    "sglops.play.result.PlayResult": ("play", lambda v: v.play_table),
    "sglops.play.result.Planned": ("play", lambda v: v.planned_view),
    "sglops.probe.report.ProbeReport": ("probe", lambda v: lambda r, show_hits=False, wide=False:
                                        v.probe_view(r, show_hits, wide)),
}


def _view(entry: tuple[str, Callable[[Any], Callable[..., RenderableType]]]) -> Callable[..., RenderableType]:
    module, pick = entry
    return pick(importlib.import_module(f"sglops.views.{module}"))


class _Render:
    """render(result, **options): the rich renderable for result, from the view registered for its class (or the
    nearest base class that has one)."""

    def __call__(self, result: Any, **options: Any) -> RenderableType:
        for cls in type(result).__mro__:
            entry = _VIEWS.get(f"{cls.__module__}.{cls.__qualname__}")
            if entry is not None:
                return _view(entry)(result, **options)
        raise TypeError(f"no view for {type(result).__name__} (register one in sglops.views.show)")

    @property
    def registry(self) -> dict[type, Callable[..., RenderableType]]:
        """{result class: its view}, every one imported."""
        out = {}
        for name, entry in _VIEWS.items():
            module, _, cls = name.rpartition(".")
            out[getattr(importlib.import_module(module), cls)] = _view(entry)
        return out


render = _Render()


def show(result: Any, **options: Any) -> None:
    """Print result's view on the console (options such as top= go to the view)."""
    from sglops.core.console import console

    console.print(render(result, **options))
