"""Printing: rich tables for people, --json for machines; both are views of one result object.

Text is data. Both consoles are built with markup off, so a string reaching rich (a table
cell, a title, a printed line) is shown exactly as it is: a probe hit such as
`dtype in [torch.bfloat16, torch.float8_e4m3fn]`, a host prefix `[gpu-a]` or an error with
`[/x]` in it never turns into styling or a crash. Where sglops wants colour it says so with
`rich.text.Text` (or `styled`), never by writing markup into a string.

When the output is not a terminal (a pipe, a file), lines are neither wrapped nor cropped at
80 columns: what is printed is what grep and diff see.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from enum import Enum
from typing import Any

import orjson
from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderableType
from rich.protocol import rich_cast
from rich.segment import Segment
from rich.text import Text

from sglops.core import jsonsafe, redact

# "no wrapping": wider than any line sglops prints to a pipe
NOT_A_TERMINAL_WIDTH = 4096
MAX_ERROR_CHARS = 2000


class _Redacting:
    """A text stream that masks registered secrets in everything written through it, so no table,
    progress line or script that rich prints can show a password or token."""

    def __init__(self, stream_name: str) -> None:
        self._name = stream_name

    @property
    def _stream(self):
        # looked up each time: pytest and Invoke swap sys.stdout
        return getattr(sys, self._name)

    def write(self, text: str) -> int:
        self._stream.write(redact.text(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8")


def masked_text(t: Text) -> Text:
    """A Text with its secrets masked, before rich wraps it: once wrapped, a secret folded over two lines (or
    a value wrapped away from its `--api-key`) no longer matches any mask. Styles of a masked Text are its
    base style only (its spans no longer fit the masked text)."""
    plain = t.plain
    masked = redact.text(plain)
    if masked == plain:
        return t
    return Text(
        masked,
        style=t.style,
        justify=t.justify,
        overflow=t.overflow,
        no_wrap=t.no_wrap,
        end=t.end,
        tab_size=t.tab_size,
    )


class _DataConsole(Console):
    """A rich console that never reads markup and does not wrap what goes to a pipe or file; every text it
    lays out is masked first (the stream masks again what it writes)."""

    def __init__(self, stream_name: str) -> None:
        super().__init__(file=_Redacting(stream_name), highlight=False, markup=False, emoji=False)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        renderable = rich_cast(renderable)
        if isinstance(renderable, str):
            renderable = redact.text(renderable)
        elif isinstance(renderable, Text):
            renderable = masked_text(renderable)
        return super().render(renderable, options)

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if not self.is_terminal and not os.environ.get("COLUMNS"):
            return ConsoleDimensions(NOT_A_TERMINAL_WIDTH, dims.height)
        return dims


console = _DataConsole("stdout")
err_console = _DataConsole("stderr")


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (string, style) pairs: sglops picks the styles, every string is data."""
    return Text.assemble(*parts)


# DEL and the C1 controls (U+0080-U+009F; U+009B is a one-byte CSI to a terminal) are valid raw in JSON
# strings and orjson writes them so: --json escapes them (as \u009b) like the C0 controls JSON already
# escapes.
_JSON_CONTROLS = re.compile("[\x7f-\x9f]")


def json_text(obj: Any) -> str:
    """`obj` as the JSON --json prints: secrets masked, every control character escaped (a kernel name, a
    crash line or a path from a host cannot move a terminal's cursor through `inv ... --json`)."""
    text = jsonsafe.dumps(redact.obj(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
    return (
        _JSON_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        if _JSON_CONTROLS.search(text)
        else text
    )


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout (secrets masked, control characters escaped)."""
    sys.stdout.write(json_text(obj) + "\n")
    sys.stdout.flush()


def print_raw(text: str) -> None:
    """Exactly this text on stdout (secrets masked), not through rich: for scripts meant to be redirected."""
    sys.stdout.write(redact.text(text) if text.endswith("\n") else redact.text(text) + "\n")
    sys.stdout.flush()


def one_line(message: str) -> str:
    """A message as one line: inner line breaks become ' | ', and a wall of text is cut short."""
    flat = " | ".join(part.strip() for part in str(message).splitlines() if part.strip())
    if len(flat) > MAX_ERROR_CHARS:
        flat = flat[:MAX_ERROR_CHARS] + f"... ({len(flat) - MAX_ERROR_CHARS} more characters)"
    return flat


def error_line(message: str) -> None:
    """The one line a user error ends in, on stderr."""
    err_console.print(styled(("error:", "bold red"), " ", redact.text(one_line(message))), soft_wrap=True)


def note(message: str) -> None:
    """A remark for the person at the terminal, on stderr (so stdout stays what was asked for)."""
    err_console.print(Text(redact.text(message), style="dim"), soft_wrap=True)


class Live(Enum):
    """The live display a task draws from its operation's events (`Op.live`; sglops.views.live draws
    each): a progress board for benches, a line per host for restarts, notes for ab's rounds and a sweep's
    candidates, a profile's status and download bar, the log lines of `logs --follow`."""

    BENCH = "bench"
    RESTART = "restart"
    NOTES = "notes"
    PROFILE = "profile"
    LINES = "lines"
