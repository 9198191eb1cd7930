"""Views of launch results (restart, stop, status, logs, a rendered script): tables for the terminal, and the
live line per host while restarts wait for /health.

The results themselves (sglops.launch.results, sglops.launch.render) keep data and JSON; tasks and plays print
them through sglops.views.show.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from sglops.core.console import err_console

if TYPE_CHECKING:
    from sglops.launch.render import Rendered
    from sglops.launch.results import LogLines, RestartResult, ServerStatus, StopResult


def restart_table(r: RestartResult) -> RenderableType:
    """`inv restart` / rollback: state, what was stopped
    and started, confirmed arguments, failure and hint."""
    t = Table(title=f"restart {r.profile or '(rollback)'} on {r.host}", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    color = "green" if r.ok else ("yellow" if r.dry_run else "red")
    t.add_row(
        "state", Text(r.state + (f" after {r.waited_s:.1f}s" if r.waited_s is not None else ""), style=color)
    )
    t.add_row("sglang", str(r.sglang_version or "?"))
    t.add_row("port", str(r.port))
    if r.stopped_pid:
        n, took = r.stop.get("processes"), r.stop.get("took_s")
        t.add_row(
            "stopped",
            f"pid {r.stopped_pid} ({r.stop_signal}"
            + (f", {n} processes in {took:.1f}s" if n and took is not None else "")
            + ")",
        )
    if r.pid:
        t.add_row("pid", str(r.pid))
    for k, v in r.confirmed.items():
        t.add_row(f"  {k}", Text(str(v), style="green"))
    for k, v in r.mismatches.items():
        t.add_row(f"  {k}", Text(f"asked {v['asked']!r}, server runs {v['effective']!r}", style="yellow"))
    if r.unconfirmed:
        t.add_row("  not reported", Text(", ".join(r.unconfirmed), style="yellow"))
    if r.failure:
        t.add_row("failure", Text(f"{r.failure_label} [{r.failure}]", style="bold red"))
        if r.failure_detail:
            t.add_row("cause", Text(r.failure_detail, style="red"))
        t.add_row("hint", r.hint or "")
    for w in r.warnings:
        t.add_row("warning", Text(w, style="yellow"))
    for d in r.derived_env:
        t.add_row("from the host", f"{d['name']}={d['value']} ({d['why']})")
    if r.node_rank is not None:
        t.add_row("node_rank", str(r.node_rank))
    for n in r.deployment:
        t.add_row(
            f"  node {n['node_rank']}",
            Text(
                f"{n['host']}: {n['state']}"
                + (f" after {n['waited_s']:.1f}s" if n.get("waited_s") is not None else "")
                + (
                    f" [{n['failure']}] {n['failure_detail'] or n['failure_label'] or ''}"
                    if n.get("failure")
                    else ""
                ),
                style="green" if n["ok"] else "red",
            ),
        )
    for step in r.plan:
        t.add_row("would", step)
    parts: list[Any] = [t]
    if r.log_tail and not r.ok:
        parts.append(Text(f"last lines of {r.log_path}:", style="bold"))
        parts.append(Text("\n".join(r.log_tail), style="dim"))
    if r.dry_run:
        parts.append(Text(r.script, no_wrap=True, overflow="ignore"))
    return Group(*parts)


def status_table(r: ServerStatus) -> RenderableType:
    """`inv server-status`: the process (or container),
    /health, the main /server_info keys, recent restarts."""
    t = Table(title=f"server on {r.host}", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row(
        "process",
        Text(f"running, pid {r.pid}" if r.running else "not running", style="green" if r.running else "red"),
    )
    if r.container:
        c = r.container
        t.add_row(
            "container",
            f"{c['status']} (the server is its command; exit code {c['exit_code']}, "
            f"restarts {c['restart_count']}, policy {c['restart_policy']})",
        )
    t.add_row("profile", str(r.profile or "-"))
    t.add_row("port", str(r.port or "-"))
    t.add_row("/health", Text(str(r.health or "no answer"), style="green" if r.health == 200 else "red"))
    if r.nnodes > 1:
        t.add_row(
            "node",
            f"node_rank {r.node_rank} of {r.nnodes}"
            + (" (node 1+ serves only a health port)" if r.node_rank else ""),
        )
    for p in r.processes:
        ranks = " ".join(f"{k.upper()}{v}" for k, v in p.items() if k not in ("pid", "role", "command"))
        t.add_row(f"  {p['role']}", f"pid {p['pid']}" + (f"  {ranks}" if ranks else ""))
    for n in r.deployment:
        alive = n.get("running") and n.get("health") == 200
        t.add_row(
            f"  node {n['node_rank']}",
            Text(
                f"{n['host']}: "
                + (
                    "running, /health 200"
                    if alive
                    else n.get("note")
                    or f"{'running' if n.get('running') else 'NOT running'}, "
                    f"/health {n.get('health') or 'no answer'}"
                ),
                style="green" if alive else "bold red",
            ),
        )
    if r.deployment_healthy is not None:
        t.add_row(
            "server",
            Text(
                "healthy: every node up" if r.deployment_healthy else "NOT healthy: a node is down",
                style="green" if r.deployment_healthy else "bold red",
            ),
        )
    info = r.server_info or {}
    for k in (
        "version",
        "model_path",
        "tp_size",
        "attention_backend",
        "kv_cache_dtype",
        "last_gen_throughput",
    ):
        if k in info:
            t.add_row(f"  {k}", str(info[k]))
    if info.get("standin"):
        t.add_row("  note", "sglops stand-in server (sandbox)")
    for rec in r.restarts[-3:]:
        t.add_row(
            "restart",
            f"{rec.get('at')} {rec.get('profile') or '(rollback)'}: {rec.get('state')}"
            + (f" [{rec['failure']}]" if rec.get("failure") else ""),
        )
    t.add_row("log", r.log_path)
    return t


def logs_view(r: LogLines) -> RenderableType:
    """`inv logs`: the lines as they are."""
    return Text("\n".join(r.lines) or f"(empty: {r.path})")


def print_logs(r: LogLines, follow: bool = False) -> None:
    """`inv logs`: the lines (with --follow they were printed as they came)."""
    if not follow:
        from sglops.core.console import console

        console.print(logs_view(r))


def validated_line(r: Rendered) -> str:
    """What the script was checked against: the engine's own tree and release on the host, or nothing."""
    if r.validated:
        return f"# validated against {r.engine} {r.sglang_version} on {r.host}"
    return f"# not validated against a host's {r.engine} tree (pass --host)"


def show_script(rendered: Rendered) -> None:
    """The launch script alone on stdout, unwrapped, so `inv render P > launch.sh` writes exactly the script;
    what it was checked against and any warnings go to stderr."""
    from sglops.core.console import note, print_raw

    note(validated_line(rendered))
    for w in rendered.warnings:
        err_console.print(Text("warning: " + w, style="yellow"), soft_wrap=True)
    for d in rendered.derived_env:
        err_console.print(
            Text(f"# from the host: {d['name']}={d['value']}: {d['why']}", style="dim"), soft_wrap=True
        )
    print_raw(rendered.script)


def stop_view(r: StopResult) -> RenderableType:
    """`inv stop`: what was (or would be) stopped."""
    if r.dry_run:
        return Text("\n".join(f"would {p}" for p in r.plan))
    if not r.stopped:
        return Text(
            f"{r.host}: no server to stop" + (f" ({r.detail['note']})" if r.detail.get("note") else "")
        )
    return Text(f"{r.host}: stopped pid {r.pid} ({r.signal})", style="green")


def rendered_view(r: Rendered) -> RenderableType:
    """`inv render` inside a task that prints results (the plain task prints the bare script: show_script)."""
    head = validated_line(r)
    return Group(
        Text(head, style="dim"),
        *[Text("warning: " + w, style="yellow") for w in r.warnings],
        *[Text(f"# from the host: {d['name']}={d['value']}: {d['why']}", style="dim") for d in r.derived_env],
        Text(r.script, no_wrap=True, overflow="ignore"),
    )


@contextmanager
def progress_view(enabled: bool = True) -> Iterator[Callable[[str], Any]]:
    """A live line per host while restarts wait for /health (stderr, so --json stays clean)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if not enabled:
        yield lambda host: None
        return
    prog = Progress(
        SpinnerColumn(),
        TextColumn("{task.fields[host]}", style="bold", markup=False),
        TextColumn("{task.description}", markup=False),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    lock = threading.Lock()

    def reporter(host: str) -> Callable[[dict], None]:
        with lock:
            task = prog.add_task("connecting", host=host, total=None)

        def update(ev: dict) -> None:
            text = ev.get("phase", "")
            if "elapsed" in ev:
                text += f" {ev['elapsed']:.0f}/{ev['timeout']:g}s"
            if ev.get("log"):
                text += f"  {ev['log'][-90:]}"
            prog.update(task, description=text)

        return update

    with prog:
        yield reporter
