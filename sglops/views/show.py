"""One way to print any result: `show(result)` for tasks (sglops.cli) and plays alike.

Views are functions of the view layer (sglops.views.<domain>), registered here by result class, so domain
classes keep data and JSON only and never import their views. Every result class the package defines and every
operation's result has a view here (tests/test_result_contract.py walks the package and the catalogue for them).
"""

from __future__ import annotations

from functools import singledispatch
from typing import Any

from rich.console import RenderableType

from sglops.bench.compare import Comparison, RunList
from sglops.bench.run import BenchResult
from sglops.core.console import console
from sglops.experiment.ab_result import AbResult
from sglops.experiment.duel import DuelResult
from sglops.experiment.sweep_result import SweepResult
from sglops.kernel.build import KernelAction, KernelBuild
from sglops.launch.render import Rendered
from sglops.launch.results import LogLines, RestartResult, ServerStatus, StopResult
from sglops.patch.apply import PatchList, PatchResult
from sglops.patch.capture import Capture
from sglops.play.result import Planned, PlayResult
from sglops.probe.facts import Facts
from sglops.probe.report import ProbeReport
from sglops.trace.analysis import TraceAnalysis
from sglops.trace.diff import TraceDiff
from sglops.trace.profile import ProfileResult
from sglops.views import ab, bench, kernel, launch, patch, play, probe, sweep, trace, trace_diff
from sglops.views.duel import duel_view


@singledispatch
def render(result: Any) -> RenderableType:
    """The rich renderable for result: the view registered for its class."""
    raise TypeError(f"no view for {type(result).__name__} (register one in sglops.views.show)")


render.register(TraceAnalysis, lambda a, top=12: trace.table(a, top))
render.register(TraceDiff, lambda d, top=12: trace_diff.tables(d, top))
render.register(ProfileResult, trace.profile_table)
render.register(RestartResult, launch.restart_table)
render.register(StopResult, launch.stop_view)
render.register(ServerStatus, launch.status_table)
render.register(LogLines, launch.logs_view)
render.register(Rendered, launch.rendered_view)
render.register(BenchResult, bench.bench_table)
render.register(Comparison, bench.compare_table)
render.register(RunList, bench.runs_table)
render.register(AbResult, ab.ab_table)
render.register(SweepResult, sweep.sweep_view)
render.register(DuelResult, duel_view)
render.register(PatchResult, patch.patch_table)
render.register(PatchList, patch.patch_list_table)
render.register(KernelBuild, kernel.build_table)
render.register(KernelAction, kernel.action_table)
render.register(Capture, patch.capture_view)
render.register(Facts, probe.facts_table)
render.register(PlayResult, play.play_table)
render.register(Planned, play.planned_view)
render.register(ProbeReport, lambda r, show_hits=False, wide=False: probe.probe_view(r, show_hits, wide))


def show(result: Any, **options: Any) -> None:
    """Print result's view on the console (options such as top= go to the view)."""
    console.print(render(result, **options))
