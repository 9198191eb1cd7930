"""The one live display of a task, fed by its operation's events (`ctx.event`): a progress board for benches,
a line per host for restarts, notes for ab's rounds, the log lines of `logs --follow`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from rich.text import Text

from sglops.core.console import Live

Sink = Callable[[dict], None]


@contextmanager
def display(kind: Live | None, json: bool, hosts: int = 1) -> Iterator[Callable[[str], Any]]:
    """Yields watch(host): a context manager whose value is that host's event sink (or None: no display).
    rich drives one live display at a time: the bench board and the restart lines share one among hosts; a
    profile's own display is drawn for one host only."""
    # stderr, also under --json
    if kind is Live.BENCH:
        yield _bench
    elif kind is Live.RESTART and not json:
        from sglops.views.launch import progress_view

        with progress_view(True) as reporter:
            yield lambda host: nullcontext(reporter(host))
    elif kind is Live.NOTES and not json:
        from sglops.core.console import note

        yield lambda host: nullcontext(lambda ev: note(f"{host}: {ev['note']}") if "note" in ev else None)
    elif kind is Live.PROFILE and not json and hosts == 1:
        yield _profile
    elif kind is Live.LINES:
        from sglops.core.console import console

        yield lambda host: nullcontext(lambda ev: console.print(Text(ev["line"])) if "line" in ev else None)
    else:
        yield lambda host: nullcontext(None)


@contextmanager
def _bench(host: str) -> Iterator[Sink]:
    from sglops.views.bench import board

    task = board.open(host)
    try:
        yield lambda ev: board.update(task, ev)
    finally:
        board.close(task)


@contextmanager
def _profile(host: str) -> Iterator[Sink]:
    """A status line while the host profiles and waits for
    its traces, then a bar over the download's bytes."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from sglops.core.console import err_console

    progress = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
        transient=True,
    )
    task = progress.add_task(f"{host}: profiling", total=None)

    def update(ev: dict) -> None:
        if ev.get("phase") == "profiling":
            progress.update(task, description=f"{host}: profiling {ev.get('steps')} steps")
        elif ev.get("phase") == "waiting":
            progress.update(
                task,
                description=f"{host}: waiting for trace files ({ev.get('complete')}/"
                f"{ev.get('expected') or '?'} complete, {ev.get('bytes', 0) / 1e6:.1f} MB)",
            )
        elif ev.get("phase") == "downloading":
            progress.update(
                task,
                description=f"download {ev['files']} trace file(s)",
                total=ev["bytes_total"],
                completed=ev["bytes_done"],
            )

    with progress:
        yield update


def play_line(ev: dict) -> str:
    """A step's event as the text after the play's status line."""
    if "note" in ev:
        return ev["note"]
    if ev.get("phase") == "measuring":
        return f"request {ev.get('done', 0)}/{ev.get('total', '?')}"
    if "elapsed" in ev:
        return f"{ev.get('phase', '')} {ev['elapsed']:.0f}s"
    return ev.get("phase", "")
