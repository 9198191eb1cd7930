"""The launch family's operations: render, restart, rollback, stop, server-status, logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglops.core.console import Live
from sglops.core.op import DRY_RUN, JSON, TARGET, TARGETS, Context, Op, Param
from sglops.core.values import Flag, Float, Int, NameOrFile, Port

if TYPE_CHECKING:
    from sglops.launch.render import Rendered
    from sglops.launch.results import LogLines, RestartResult, ServerStatus, StopResult


PROFILE = Param("profile", NameOrFile("profile"), positional=True)
PORT = Param("port", Port(), "override the profile's port")
JSON_ = JSON.again(help="print machine-readable JSON")
TIMEOUT = Param(
    "timeout", Float(1, 86400), "seconds to wait for /health (default: the profile's startup_timeout)"
)
RESTART_DRY = DRY_RUN.again(help="show the plan and the script; change nothing")


def render(ctx: Context, profile: str, port: int | None = None) -> Rendered:
    from sglops.launch import server

    return server.render_for(ctx.remote, profile, port=port)


def _spans_nodes(ctx: Context, profile: str | None, rollback: bool) -> bool:
    """Whether this restart is one node's part of a server over several hosts (a profile with nnodes > 1, or a
    rollback of several hosts at once: each goes back to its own last good script, together)."""
    from sglops.launch.profiles import load_profile

    if rollback:
        from sglops.core.meet import one_server

        return one_server(ctx.peers)
    return profile is not None and int(load_profile(profile).args.get("nnodes", 1)) > 1


def restart(
    ctx: Context,
    profile: str | None = None,
    rollback: bool = False,
    timeout: float | None = None,
    port: int | None = None,
    take_over: bool = False,
    check_path: bool = False,
) -> RestartResult:
    """A failed start raises LaunchFailed carrying its result: the runner keeps and shows it, then fails."""
    from sglops.launch import server
    from sglops.launch.results import LaunchFailed

    if _spans_nodes(ctx, profile, rollback):
        from sglops.launch import deployment

        return deployment.restart_node(
            ctx, profile, rollback=rollback, timeout=timeout, port=port, dry_run=ctx.dry_run
        )
    res = server.restart(
        ctx.remote,
        profile,
        rollback=rollback,
        dry_run=ctx.dry_run,
        timeout=timeout,
        port=port,
        on_progress=ctx.event,
        take_over=take_over,
    )
    if check_path and not res.dry_run and profile and not rollback:
        from sglops.launch.path_check import check_after_restart

        check_after_restart(ctx.remote, res, profile)
    if res.ok or res.dry_run:
        return res
    raise LaunchFailed(
        res, [] if rollback else ["`inv rollback` brings back the last script that came up healthy"]
    )


def rollback(ctx: Context, timeout: float | None = None) -> RestartResult:
    return restart(ctx, None, rollback=True, timeout=timeout)


def stop(ctx: Context, grace: float = 20.0, take_over: bool = False) -> StopResult:
    """The dry run reads the server's status and changes nothing."""
    from sglops.launch import server
    from sglops.launch.results import StopResult

    # --grace 0 has always meant the default
    remote, grace = ctx.remote, grace or 20.0
    # the host script's own plan (a container whose command is the server: the engine's stop)
    if ctx.dry_run:
        if remote.container:
            st = server.status(remote, tail=0)
            if st.container and st.running:
                return StopResult(
                    remote.name,
                    False,
                    True,
                    st.pid,
                    plan=[
                        f"{remote.container.engine} stop {remote.container.name} (its command is the server,"
                        f" pid {st.pid}), KILL after {grace:g}s"
                    ],
                )
        ans = server.stop(remote, grace_s=grace, dry_run=True)
        return StopResult(remote.name, False, True, (ans.get("server") or {}).get("pid"), plan=ans["plan"])
    ans = server.stop(remote, grace_s=grace, take_over=take_over)
    return StopResult(
        remote.name,
        bool(ans.get("stopped")),
        False,
        ans.get("pid"),
        ans.get("signal"),
        {k: v for k, v in ans.items() if k not in ("stopped", "pid", "signal")},
    )


def server_status(ctx: Context, port: int | None = None) -> ServerStatus:
    """With several hosts, every node of a server over several of them is judged with the others."""
    from sglops.core.meet import Meeting, one_server
    from sglops.launch import server

    if not one_server(ctx.peers):
        return server.status(ctx.remote, port=port)
    from sglops.launch import deployment

    try:
        st = server.status(ctx.remote, port=port)
    except BaseException:
        Meeting.of(ctx.run_id, "status", [h.name for h in ctx.peers]).leave(ctx.remote.name)
        raise
    return deployment.status_node(ctx, st)


def _whole_server(st, _opts: dict) -> None:
    """A server over several nodes with a node down is not healthy, whatever node 0 answers."""
    from sglops.core.errors import Failed

    if st.deployment_healthy is False:
        down = [
            f"{n['host']} (node_rank {n['node_rank']}): "
            + (
                n.get("note") or "not running"
                if not n.get("running")
                else f"/health {n.get('health') or 'no answer'}"
            )
            for n in st.deployment
            if not (n.get("running") and n.get("health") == 200)
        ]
        raise Failed(f"{st.host}: the server over {st.nnodes} nodes is not healthy: {'; '.join(down)}")


def logs(ctx: Context, lines: int = 50, follow: bool = False, rank: int | None = None) -> LogLines:
    """Every rank's lines are in its node's one log; --rank keeps one TP rank's (SGLang tags them `TP1]`)."""
    from sglops.core.errors import ConfigError
    from sglops.launch import server

    if follow and len(ctx.peers) > 1:
        raise ConfigError(
            "--follow streams one host's log: give --host (without --follow, --hosts shows each)"
        )
    keep = _rank_filter(rank)
    out = server.logs(
        ctx.remote,
        lines=lines,
        follow=follow,
        on_line=lambda line: ctx.event({"line": line}) if keep(line) else None,
    )
    out.lines = [ln for ln in out.lines if keep(ln)]
    return out


def _rank_filter(rank: int | None):
    import re

    if rank is None:
        return lambda line: True
    tag = re.compile(rf"[ _]TP{rank}\]")
    return lambda line: bool(tag.search(line))


def _check_profile(o: dict) -> None:
    from sglops.launch import server

    server.check_restart_args(o.get("profile"), o.get("rollback", False))


def _launched(step: str, doc: dict) -> dict:
    """A play's manifest names each launch: the step, its profile, argv and script."""
    return {
        "launch": [
            {
                "step": step,
                "profile": doc.get("profile"),
                "argv": doc.get("argv"),
                "script": doc.get("script"),
            }
        ]
    }


TAKE_OVER = Param(
    "take_over",
    Flag(),
    "act although an ab or sweep holds the host whose owner cannot be checked from "
    "here (another machine's); said in the result",
    flag=False,
    play=False,
)

OPS = [
    Op(
        "render",
        render,
        "Print the launch script for PROFILE (with --host: checked against that host's SGLang release).",
        (PROFILE, TARGET, PORT, JSON_),
        hostless=True,
    ),
    Op(
        "restart",
        restart,
        "Restart the server with PROFILE: stop ours by pid file, start detached, wait for /health, "
        "explain crashes.",
        (
            PROFILE,
            TARGETS,
            Param("rollback", Flag(), "start the last script of PROFILE that came up healthy", flag=False),
            RESTART_DRY,
            TIMEOUT,
            PORT,
            TAKE_OVER,
            JSON_,
            Param(
                "check_path",
                Flag(),
                "compare the attention path predicted from the tree with what the server "
                "reports (one more round trip; docs/probes.md)",
                flag=False,
            ),
        ),
        step="restart",
        prepare=_check_profile,
        record="restart.json",
        live=Live.RESTART,
        manifest=_launched,
        together=True,
    ),
    Op(
        "rollback",
        rollback,
        "Start the last launch script that came up healthy on the host, whatever its profile.",
        (TARGETS, RESTART_DRY, TIMEOUT, JSON_),
        record="restart.json",
        live=Live.RESTART,
        together=True,
    ),
    Op(
        "stop",
        stop,
        "Stop the server sglops started (process group and tree), or the container whose command is "
        "the server.",
        (
            TARGETS,
            DRY_RUN.again(help="show what would be stopped; change nothing"),
            Param("grace", Float(0, 3600, 20.0), "seconds between TERM and KILL (default 20)"),
            TAKE_OVER,
            JSON_,
        ),
    ),
    Op(
        "server-status",
        server_status,
        "The server sglops started: process, /health, effective args, recent restarts.",
        (TARGETS, PORT, JSON_),
        check=_whole_server,
        together=True,
    ),
    Op(
        "logs",
        logs,
        "The server's log on the host (<checkout>/.sglops/server.log; ~/.local/state/sglops/TREE/ for an "
        "installed tree).",
        (
            TARGETS,
            Param("lines", Int(1, 1_000_000, 50), "how many last lines (default {default})"),
            Param("follow", Flag(), "keep printing new lines (Ctrl-C stops)", flag=False),
            Param("rank", Int(0, 100_000), "only this TP rank's lines (SGLang tags them `TP1]`)"),
            JSON_,
        ),
        view_options=("follow",),
        live=Live.LINES,
    ),
]
