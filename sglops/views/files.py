"""Report files a domain keeps but cannot draw itself (it never imports views): a runner hands `draw` down
(sglops.core.op.Draw) and the domain calls it with a figure (sglops.core.op: Page, Chart, Curves) and the
path; the view is found by the figure's type and, for a page or a chart, by the type of what it is of."""

from __future__ import annotations

import os
from functools import cache, singledispatch
from pathlib import Path
from typing import Any

from sglops.core import redact
from sglops.core.op import Chart, Curves, Frontier, Page, RateSearch, Telemetry


@singledispatch
def draw(figure: Any, path: Path) -> Path:
    """Write figure at path (atomically for text); returns the path written."""
    raise TypeError(f"no view draws a {type(figure).__name__}")


def _page(figure: Page, path: Path) -> Path:
    return _text(path, _pages().dispatch(type(figure.of))(figure.of))


def _chart(figure: Chart, path: Path) -> Path:
    return _charts().dispatch(type(figure.of))(figure.of, path)


def _curves(figure: Curves, path: Path) -> Path:
    from sglops.views.charts import decode_chart, sweep_chart

    return (sweep_chart if figure.sweep else decode_chart)(figure.runs, path, title=figure.title)


def _plot(figure: RateSearch | Frontier | Telemetry, path: Path) -> Path:
    from sglops.views.charts import max_rate_chart, pareto_chart, telemetry_chart

    chart = {RateSearch: max_rate_chart, Frontier: pareto_chart, Telemetry: telemetry_chart}[type(figure)]
    return chart(figure.data, path)


draw.register(Page, _page)
draw.register(Chart, _chart)
draw.register(Curves, _curves)
draw.register(RateSearch, _plot)
draw.register(Frontier, _plot)
draw.register(Telemetry, _plot)


@cache
def _pages() -> Any:
    """Result type -> its markdown page, registered when first drawn (a task's start-up imports no
    view)."""
    from sglops.trace.analysis import TraceAnalysis
    from sglops.trace.diff import TraceDiff
    from sglops.views import trace, trace_diff

    page = singledispatch(_undrawn)
    page.register(TraceAnalysis, trace.markdown)
    page.register(TraceDiff, trace_diff.markdown)
    return page


@cache
def _charts() -> Any:
    from sglops.trace.analysis import TraceAnalysis
    from sglops.views import trace

    chart = singledispatch(_undrawn)
    chart.register(TraceAnalysis, trace.chart)
    return chart


def _undrawn(of: Any, *_: Any) -> Any:
    raise TypeError(f"no view draws a {type(of).__name__}")


def _text(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    # a report page is an artifact too: no secret in it
    tmp.write_text(redact.text(text))
    os.replace(tmp, path)
    return path
