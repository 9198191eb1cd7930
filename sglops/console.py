"""Printing: rich tables for people, --json for machines; both are views of one result object."""

from __future__ import annotations

import sys
from typing import Any

import orjson
from rich.console import Console

from sglops import redact


class _Redacting:
    """A text stream that masks registered secrets in everything written through it, so no table,
    progress line or script that rich prints can show a password or token."""

    def __init__(self, stream_name: str) -> None:
        self._name = stream_name

    @property
    def _stream(self):
        return getattr(sys, self._name)  # looked up each time: pytest and Invoke swap sys.stdout

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


console = Console(file=_Redacting("stdout"), highlight=False)
err_console = Console(file=_Redacting("stderr"), highlight=False)


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout (secrets masked)."""
    sys.stdout.write(orjson.dumps(redact.obj(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {redact.text(message)}", markup=True, soft_wrap=True)


def note(message: str) -> None:
    err_console.print(f"[dim]{redact.text(message)}[/]", soft_wrap=True)
