"""How tasks read in `inv --help` and `inv --list`: typed
placeholders, one meaning per short flag, whole lines.

Invoke types every flag without a typed default as STRING, gives short flags per task in declaration order (so
`-h` was `--host` in one task and `--hosts` in another, and `--no-logprobs` got the short flag `-`), shows a
repeatable flag as a switch, and lists a docstring's first line even when it stops mid-sentence. Flags stay
strings for Invoke (sglops.core.values checks them); only their names and their help change here.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from invoke import Task
from invoke.parser.context import ParserContext

from sglops.core.values import Flag, Float, Int, IntList, Required, StrList, Value

# runner-owned flags that take a comma-separated list
LIST_FLAGS = {"hosts"}


def placeholder(kind: Value | None, repeatable: bool = False) -> str:
    """The word `inv --help` shows for a flag's value: INT, FLOAT, LIST or STRING."""
    kind = kind.kind if isinstance(kind, Required) else kind
    if repeatable or isinstance(kind, IntList | StrList):
        return "LIST"
    return "INT" if isinstance(kind, Int) else "FLOAT" if isinstance(kind, Float) else "STRING"


def is_switch(kind: Value | None) -> bool:
    kind = kind.kind if isinstance(kind, Required) else kind
    return isinstance(kind, Flag)


def _invoke_short(name: str, taken: set[str]) -> str | None:
    """The letter Invoke's auto short flags would pick (letters only: never `-` of `no-logprobs`)."""
    return next((ch for ch in name if ch.isalpha() and ch not in taken), None)


def short_flags(tasks: Iterable[tuple[list[str], bool]]) -> dict[str, str]:
    """long flag name (dashed) -> its one short letter across every task.

    tasks: each task's flag names (dashed, in declared order) and whether it takes auto short flags. A
    one-letter name owns its letter; any other letter goes to the flag that Invoke gave it in the most tasks
    (ties: the flag seen first), and the flags that lose it have no short flag; a flag that wins two letters
    keeps the one Invoke gave it in more tasks."""
    votes: dict[str, Counter] = defaultdict(Counter)
    order: dict[str, int] = {}
    fixed = set()
    for names, auto in tasks:
        taken = {n for n in names if len(n) == 1}
        fixed |= taken
        for n in names:
            order.setdefault(n, len(order))
            if len(n) == 1 or not auto:
                continue
            ch = _invoke_short(n, taken)
            if ch:
                taken.add(ch)
                votes[ch][n] += 1
    table: dict[str, str] = {}
    won = [
        (ch, max(counts, key=lambda n: (counts[n], -order[n])))
        for ch, counts in votes.items()
        if ch not in fixed
    ]
    # a flag that wins two letters keeps the likelier one
    for ch, name in sorted(won, key=lambda w: -votes[w[0]][w[1]]):
        table.setdefault(name, ch)
    return table


class CatalogueTask(Task):
    """A task whose short flags come from the catalogue-wide table and whose flags carry their placeholder."""

    def __init__(self, *args: Any, shorts: dict[str, str], metavars: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shorts = shorts
        self.metavars = metavars

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        dashed = opts["names"][0]
        ch = self.shorts.get(dashed)
        if ch and ch not in taken_names:
            opts["names"] = [dashed, ch]
        return opts

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list:
        args = super().get_arguments(ignore_unknown_help)
        for arg in args:
            arg.metavar = self.metavars.get(arg.names[0])
        return args


_stock_help_for = ParserContext.help_for


def _help_for(self: ParserContext, flag: str) -> tuple[str, str]:
    """Invoke's help line, with the flag's own placeholder where sglops declared one."""
    names, text = _stock_help_for(self, flag)
    meta = getattr(self.flags[flag], "metavar", None)
    if not meta:
        return names, text
    specs = []
    for name in sorted({flag, *self.flags.aliases_of(flag)}, key=len):
        specs.append(f"{name} {meta}" if len(name.strip("-")) == 1 else f"{name}={meta}")
    return ", ".join(specs), text


ParserContext.help_for = _help_for  # type: ignore[method-assign]


def list_line(summary: str) -> str:
    """The docstring a task shows: its first sentence joined onto the first line (`inv --list` shows only that
    line), the rest as it was."""
    flat = " ".join(summary.split())
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z`])", flat)
    first = flat[: m.start()] if m else flat
    rest = flat[m.end() :] if m else ""
    return first + ("\n" + rest if rest else "")
