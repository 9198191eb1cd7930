"""Printing: rich tables for people, --json for machines; both are views of one result object."""

from __future__ import annotations

import sys
from typing import Any

import orjson
from rich.console import Console

from sglops import redact

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def print_json(obj: Any) -> None:
    """Machine-readable output on stdout (secrets masked)."""
    sys.stdout.write(orjson.dumps(redact.obj(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {redact.text(message)}", markup=True, soft_wrap=True)


def note(message: str) -> None:
    err_console.print(f"[dim]{redact.text(message)}[/]", soft_wrap=True)
