"""Launch the server from a profile, restart it safely, and explain why it did not come up.

Why a restart is one host-side step: stopping (pid file + process group, never a name match),
installing the script, starting detached and polling /health all happen on the host in one
round trip (host/server_restart.py), so it works the same for a far-away host and
a failed start-up is caught within a poll interval, with the log's failure class named.

Public API for other modules: `render_for(remote, profile)`, `restart(remote, profile)`,
`status(remote)`, `server_info(remote, port=None)`, `logs(remote)`.
"""

from __future__ import annotations

from collections.abc import Callable

from sglops.core import owner
from sglops.core.errors import ConfigError, RemoteError, SglopsError
from sglops.core.remote import Remote
from sglops.engine import get as get_engine
from sglops.launch import container as launch_container
from sglops.launch.profiles import Profile, list_profiles, load_profile
from sglops.launch.render import Rendered, TreeArgs, inspect, render
from sglops.launch.results import (
    HINTS,
    LogLines,
    RestartResult,
    ServerStatus,
    confirm,
)


def _profile(profile: str | Profile) -> Profile:
    return profile if isinstance(profile, Profile) else load_profile(profile)


def _with_port(p: Profile, port: int | None) -> Profile:
    """The profile with --port applied (after its per-host overrides, so the flag wins)."""
    if port is None:
        return p
    return Profile(**{**p.__dict__, "args": {**p.args, "port": int(port)}, "per_host": {}})


def render_for(remote: Remote | None, profile: str | Profile, *, port: int | None = None) -> Rendered:
    """The profile's script for this host, validated against its tree (offline when remote is None)."""
    p = _with_port(_profile(profile).for_host(remote.name if remote else None), port)
    if remote is None:
        return render(p)
    return render(p, remote.host, tree_for(remote, p))


def server_python(remote: Remote, p: Profile) -> str | None:
    """The python the profile names for its server on this host ({vars.X} filled in), None: the host's."""
    return p.with_vars(remote.host.vars, remote.name).python if p.python else None


def tree_for(remote: Remote, p: Profile) -> TreeArgs:
    """The host's tree of the profile's engine, found through the profile's python when it names one."""
    return TreeArgs.from_inspect(inspect(remote, p.engine, server_python(remote, p)))


def restart(
    remote: Remote,
    profile: str | Profile | None = None,
    *,
    rollback: bool = False,
    dry_run: bool = False,
    timeout: float | None = None,
    port: int | None = None,
    on_progress: Callable[[dict], None] | None = None,
    lock_wait_s: float = 0,
    abort_token: str | None = None,
    as_node: bool = False,
    take_over: bool = False,
) -> RestartResult:
    """Stop the running server, start the profile's (or the last good) script, wait for /health. lock_wait_s:
    how long to wait for another restart holding the host's server lock (default: refuse at once).
    abort_token: the start gives up when `abort(remote, token)` asks it to (a node of a deployment whose peer
    failed). as_node: this is one node's part of restarting a server over several hosts
    (sglops.launch.deployment); a profile with nnodes > 1 is refused otherwise, so that no caller (ab, sweep,
    a play) starts one node alone."""
    if not rollback and profile is not None:
        chosen = _with_port(_profile(profile).for_host(remote.name), port)
        if int(chosen.args.get("nnodes", 1)) > 1 and not as_node:
            raise ConfigError(
                f"profile {chosen.name} is one server over nnodes={chosen.args['nnodes']}: restart its "
                f"nodes together (`inv restart {chosen.name} --hosts n0,n1,...`); a single host's "
                "restart (ab, sweep, a play step) would start one node alone"
            )
        # shape (b): the engine restarts the container's command
        if chosen.container_restart == "entrypoint":
            return launch_container.restart(
                remote, chosen, dry_run=dry_run, timeout=timeout, on_progress=on_progress
            )
    chosen = (
        None if rollback or profile is None else _with_port(_profile(profile).for_host(remote.name), port)
    )
    doc = inspect(
        remote, chosen.engine if chosen else None, server_python(remote, chosen) if chosen else None
    )
    tree = TreeArgs.from_inspect(doc)
    remote.memo.put(ROOT_KEY, tree.state_root, lasting=True)
    current = doc["current"]
    rendered = None
    if rollback:
        good = current.get("last_good")
        if not good and current.get("entrypoint") and remote.container:
            raise launch_container.rollback_refusal(remote)
        if not good:
            raise SglopsError(
                f"{remote.name}: nothing to roll back to (no server came up healthy through sglops)"
            )
        if profile is not None and good.get("profile") != _profile(profile).name:
            raise SglopsError(
                f"{remote.name}: the last script that came up healthy is profile "
                f"{good.get('profile')!r}, not {_profile(profile).name!r} (`inv rollback` takes it anyway)"
            )
        prof_name, bind, use_port = good.get("profile"), good.get("host") or "127.0.0.1", int(good["port"])
        grace, wait = float(good.get("grace_s") or 20), float(timeout or good.get("timeout_s") or 600)
        nodes = {"nnodes": int(good.get("nnodes") or 1), "node_rank": good.get("node_rank")}
    else:
        if profile is None:
            raise SglopsError("give a profile to restart (or --rollback)")
        p = _with_port(_profile(profile).for_host(remote.name), port)
        rendered = render(p, remote.host, tree)
        prof_name, bind, use_port = p.name, rendered.bind, rendered.port
        grace, wait = p.stop_grace, float(timeout or p.startup_timeout)
        nodes = {"nnodes": int(p.args.get("nnodes", 1)), "node_rank": rendered.node_rank}
    eng = get_engine(rendered.engine if rendered else None)
    result = RestartResult(
        host=remote.name,
        profile=prof_name,
        ok=False,
        state="dry-run",
        port=use_port,
        rollback=rollback,
        sglang_version=tree.version,
        engine=rendered.engine if rendered else None,
        warnings=list(rendered.warnings) if rendered else [],
        argv=rendered.argv if rendered else [],
        script=rendered.script if rendered else "",
        node_rank=nodes["node_rank"],
        derived_env=list(rendered.derived_env) if rendered else [],
    )
    args = {
        "root": tree.state_root,
        "engine": eng.host_spec() if rendered else None,
        "script": result.script,
        "rollback": rollback,
        "profile": prof_name,
        "host": bind,
        "port": use_port,
        "timeout_s": wait,
        "grace_s": grace,
        "operator": owner.user(),
        "lock_wait_s": lock_wait_s,
        **nodes,
        "abort_token": abort_token,
    }
    # the host script's own plan, from the host's own state: nothing changes there
    if dry_run:
        result.dry_run = True
        result.plan = remote.reading(lambda: remote.run_py("server_restart", {**args, "plan": True}))["plan"]
        return result
    answer = owner.honoured(
        remote,
        lambda extra: remote.run_py(
            "server_restart",
            {**args, **extra},
            timeout=lock_wait_s + wait + 2 * grace + 60,
            on_progress=on_progress,
        ),
        f"restart {prof_name}",
        take_over=take_over,
    )
    if answer.get("owner_note"):
        result.warnings.append(answer["owner_note"])
    result.state = answer["state"]
    result.pid = answer["pid"]
    result.stopped_pid = answer["stopped"]["pid"]
    result.stop_signal = answer["stopped"]["signal"]
    result.stop = {k: answer["stopped"].get(k) for k in ("processes", "left", "took_s")}
    result.waited_s = answer["waited_s"]
    result.log_path = answer["log_path"]
    result.log_tail = answer["log_tail"]
    result.server_info = answer["server_info"]
    result.server_info_endpoint = answer.get("server_info_endpoint")
    result.ok = answer["state"] == "healthy"
    if not result.ok:
        result.failure, result.failure_label = answer["failure"], answer["failure_label"]
        result.failure_detail = answer.get("failure_detail")
        result.hint = eng.hints.get(answer["failure"]) or HINTS.get(answer["failure"])
    if result.server_info and rendered:
        confirm(result, rendered.expected, result.server_info)
    return result


def abort(remote: Remote, token: str) -> bool:
    """Ask the restart running on the host under `token` to stop what it started and give up (its own lock
    stays held: the restart does the stopping). True when the request was written."""
    return bool(remote.run_py("server_abort", {"root": _root(remote), "token": token}, timeout=30)["asked"])


def stop(
    remote: Remote,
    *,
    grace_s: float = 20,
    dry_run: bool = False,
    lock_wait_s: float = 0,
    take_over: bool = False,
) -> dict:
    """Stop the server sglops started (pid file + process group); {stopped, pid, signal}. In a container whose
    command is the server (restart shape (b)) that is `ENGINE stop` of the container, on the host. dry_run:
    the host script's plan ({"plan": [...], "server", "entrypoint"}), nothing changed."""
    args = {
        "root": _root(remote),
        "stop_only": True,
        "grace_s": grace_s,
        "operator": owner.user(),
        "lock_wait_s": lock_wait_s,
    }
    if dry_run:
        return remote.reading(
            lambda: remote.run_py("server_restart", {**args, "plan": True}, timeout=grace_s + 30)
        )
    try:
        answer = owner.honoured(
            remote,
            lambda extra: remote.run_py(
                "server_restart", {**args, **extra}, timeout=lock_wait_s + grace_s + 30
            ),
            "stop",
            take_over=take_over,
        )
    except RemoteError as exc:
        if not (remote.container and launch_container.NOT_RUNNING in str(exc)):
            raise
        return {
            "stopped": False,
            "pid": None,
            "signal": None,
            "note": f"container {remote.container.name} is not running",
        }
    if not answer["stopped"] and answer.get("entrypoint") and remote.container:
        done = launch_container.stop(remote, grace_s=grace_s)
        return {
            "stopped": done["stopped"],
            "pid": answer["entrypoint"]["pid"],
            "signal": f"{remote.container.engine} stop",
            "container": done["container"],
        }
    return answer


def status(remote: Remote, *, port: int | None = None, tail: int = 20) -> ServerStatus:
    """Is our server running, healthy, and with which arguments (one round trip; a second, on the host, for a
    container whose command is the server: its state and log are the engine's)."""
    doc = _state_or_entrypoint(remote, port=port, tail=tail)
    if "container" in doc:
        return _entrypoint_status(remote, doc)
    srv = doc["server"] or {}
    last = next((r for r in reversed(doc["restarts"]) if r.get("profile")), {})
    return ServerStatus(
        host=remote.name,
        running=doc["running"],
        pid=srv.get("pid"),
        profile=srv.get("profile"),
        port=port or srv.get("port"),
        health=doc["health"],
        server_info=doc["server_info"],
        restarts=doc["restarts"],
        log_path=doc["log_path"],
        log_tail=doc["log_tail"],
        processes=doc.get("processes") or [],
        nnodes=int(srv.get("nnodes") or last.get("nnodes") or 1),
        node_rank=srv.get("node_rank", last.get("node_rank")),
        died=doc.get("died"),
    )


def _state_or_entrypoint(
    remote: Remote,
    *,
    port: int | None = None,
    tail: int = 20,
    follow_s: float = 0,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """inspect_state inside the target; for a container that is stopped, or whose own command is the server,
    the host-side view (container_server.py status) instead."""
    try:
        doc = inspect_state(remote, port=port, tail=tail, follow_s=follow_s, on_progress=on_progress)
    except RemoteError as exc:
        if not (remote.container and launch_container.NOT_RUNNING in str(exc)):
            raise
        doc = None
    if remote.container and (doc is None or (not doc["running"] and doc.get("entrypoint"))):
        out = launch_container.status(
            remote, port=port, tail=tail, follow_s=follow_s, on_progress=on_progress
        )
        return {**out, "entrypoint": (doc or {}).get("entrypoint")}
    return doc


def _entrypoint_status(remote: Remote, doc: dict) -> ServerStatus:
    ctr, entry = doc["container"], doc.get("entrypoint") or {}
    last = next((r for r in reversed(doc["restarts"]) if r.get("profile")), {})
    return ServerStatus(
        host=remote.name,
        running=bool(ctr["running"] and entry),
        pid=entry.get("pid"),
        profile=last.get("profile"),
        port=doc["port"],
        health=doc["health"],
        server_info=doc["server_info"],
        restarts=doc["restarts"],
        log_path=doc["log_path"],
        log_tail=doc["log_tail"],
        container=ctr,
    )


def inspect_state(
    remote: Remote,
    *,
    port: int | None = None,
    tail: int = 20,
    follow_s: float = 0,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    root = _root(remote)
    return remote.run_py(
        "server_status",
        {"root": root, "port": port, "tail": tail, "follow_s": follow_s},
        timeout=max(60, follow_s + 30),
        on_progress=on_progress,
    )


# where the tree is: read once per connection, sglops' own steps never move it
ROOT_KEY = "sglang-root"


def _root(remote: Remote) -> str:
    return remote.remembered(
        ROOT_KEY,
        lambda: (lambda d: d.get("state_root") or d["sglang"]["root"])(inspect(remote)),
        lasting=True,
    )


def server_info(remote: Remote, port: int | None = None) -> dict:
    """Effective server args of the server running on the host (its /server_info, /get_server_info before)."""
    doc = inspect_state(remote, port=port, tail=0)
    if doc["server_info"] is None:
        where = f"port {port or (doc['server'] or {}).get('port') or '?'}"
        raise SglopsError(
            f"{remote.name}: no server answering /server_info on {where} "
            f"(health {doc['health'] or 'no answer'}; see `inv server-status`)"
        )
    return doc["server_info"]


def logs(
    remote: Remote,
    *,
    lines: int = 50,
    follow: bool = False,
    follow_s: float = 3600,
    on_line: Callable[[str], None] | None = None,
) -> LogLines:
    """The server log's last lines; with follow, stream new ones to on_line until follow_s passes."""
    if not follow:
        doc = _state_or_entrypoint(remote, tail=lines)
        return LogLines(remote.name, doc["log_path"], doc["log_tail"])
    seen: list[str] = []

    def relay(ev: dict) -> None:
        if "line" in ev:
            seen.append(ev["line"])
            if on_line is not None:
                on_line(ev["line"])

    doc = _state_or_entrypoint(remote, tail=lines, follow_s=follow_s, on_progress=relay)
    return LogLines(remote.name, doc["log_path"], seen)


def check_restart_args(profile: str | None, rollback: bool) -> None:
    """Refuse a bad profile before any host is touched."""
    if profile is None and not rollback:
        raise SglopsError(
            "give a profile (`inv restart PROFILE --host H`) or --rollback; profiles: "
            + ", ".join(list_profiles())
        )
    if profile is not None and not rollback:
        load_profile(profile)
