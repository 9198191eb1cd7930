"""Report files a domain keeps but cannot draw itself (it never imports views): a runner hands `draw` down
(sglops.core.op.Draw) and the domain calls it with what to draw, the data and the path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sglops.core import redact


def draw(what: str, data: Any, path: Path) -> Path:
    """Write the file `what` of data at path (atomically for text); returns the path written."""
    if what == "trace-markdown":
        from sglops.views.trace import markdown

        return _text(path, markdown(data))
    if what == "trace-diff-markdown":
        from sglops.views.trace_diff import markdown

        return _text(path, markdown(data))
    if what == "trace-chart":
        from sglops.views.trace import chart

        return chart(data, path)
    if what == "decode-chart":
        from sglops.views.charts import decode_chart

        return decode_chart(data["runs"], path, title=data["title"])
    if what == "sweep-chart":
        from sglops.views.charts import sweep_chart

        return sweep_chart(data["runs"], path, title=data["title"])
    from sglops.views.charts import CHARTS

    if what in CHARTS:
        return CHARTS[what](data, path)
    raise ValueError(f"no view draws {what!r}")


def _text(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(redact.text(text))  # a report page is an artifact too: no secret in it
    os.replace(tmp, path)
    return path
