"""A result split for a fan-out: the hosts whose answers are the same print it once, headed by their names.

An operator asking 64 hosts of one image wants one report, not 64 copies of it. A view that can tell when two
results would print the same body gives an `Alike`; sglops.cli.glue groups the hosts by its key, lays out the
body once per group and prints it under the group's heading.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType

from sglops.core.console import console


@dataclass(frozen=True)
class Alike:
    """key: equal for results whose bodies print the same; head(results): the heading of those results
    (for one result, the heading its own view prints); body(): the rest of the view."""

    key: Hashable
    head: Callable[[list[Any]], RenderableType]
    body: Callable[[], RenderableType]

    def head_text(self, results: list[Any]) -> str:
        return text_of(self.head(results))

    def body_text(self) -> str:
        return text_of(self.body())


def text_of(renderable: RenderableType) -> str:
    """What console.print(renderable) would write (laid out in the calling thread's buffer)."""
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()
