"""Restart shape (b): the container's entrypoint IS the server (profile `container_restart: entrypoint`).

Why `docker restart` and never a recreate: a container's command can only change by recreating it, and the
options it was created with (GPUs, mounts, shm size, network, restart policy, labels) belong to whoever
created it (compose, a unit file, Kubernetes); sglops rebuilding them from `inspect` would silently drop some.
So a restart first checks that the container runs the arguments the profile renders for this host; when it
does not, it refuses, says which arguments differ, and changes nothing (restarting would run the OLD command
while reporting the new profile). The engine's commands, the health wait (asked from inside the container,
whose network may be its own) and the crash classification from `docker logs` run in ONE host-side step
(host/container_server.py, the host's python3). Records live on the host, beside the container.
"""

from __future__ import annotations

from collections.abc import Callable

from sglops.core import owner
from sglops.core.errors import ConfigError, RemoteError, SglopsError
from sglops.core.remote import Remote
from sglops.launch.profiles import Profile
from sglops.launch.render import TreeArgs, inspect, render
from sglops.launch.results import HINTS, RestartResult, confirm

NOT_RUNNING = "is not running on the host"


def _args(remote: Remote, action: str, **more) -> dict:
    c = remote.container
    return {
        "action": action,
        "engine": c.engine,
        "container": c.name,
        "user": c.user,
        "python": remote.python,
        "operator": owner.user(),
        **more,
    }


def restart(
    remote: Remote,
    p: Profile,
    *,
    dry_run: bool,
    timeout: float | None,
    on_progress: Callable[[dict], None] | None = None,
):
    """`ENGINE restart` of the container whose command is the profile's server, health wait, crash named."""

    if remote.container is None:
        raise ConfigError(
            f"profile {p.name}: container_restart: entrypoint needs a container target "
            "(--container NAME, or container: in the inventory)"
        )
    warnings = []
    # the container's own tree spells the arguments; an exited container (a crashed server) cannot be asked
    try:
        tree = TreeArgs.from_inspect(inspect(remote))
    except RemoteError as exc:
        if NOT_RUNNING not in str(exc):
            raise
        tree = None
        warnings.append(
            f"container {remote.container.name} is not running: arguments rendered without its tree"
        )
    rendered = render(p, remote.host, tree)
    env = p.with_vars(remote.host.vars, remote.name).env
    wait, grace = float(timeout or p.startup_timeout), p.stop_grace
    result = RestartResult(
        host=remote.name,
        profile=p.name,
        ok=False,
        state="dry-run",
        port=rendered.port,
        sglang_version=tree.version if tree else None,
        warnings=[*rendered.warnings, *warnings],
        argv=rendered.argv,
        script=rendered.script,
        shape="entrypoint",
    )
    answer = remote.run_py(
        "container_server",
        _args(
            remote,
            "restart",
            argv=rendered.argv,
            env=env,
            host=rendered.bind,
            port=rendered.port,
            timeout_s=wait,
            grace_s=grace,
            profile=p.name,
            plan=dry_run,
        ),
        on_host=True,
        timeout=wait + 2 * grace + 120,
        on_progress=on_progress,
    )
    c = remote.container
    if answer["state"] == "refused":
        diff = answer["differences"]
        raise SglopsError(
            f"{remote.name}: container {c.name} does not run what profile {p.name} renders"
            f" ({'; '.join(diff[:3])}{f'; +{len(diff) - 3} more' if len(diff) > 3 else ''}): `{c.engine}"
            " restart` would start its old command, so nothing was changed; recreate the container with the"
            f" rendered arguments (`inv render {p.name} --host {remote.name} --container {c.name} --json`:"
            " argv) or use container_restart: exec"
        )
    result.log_path = f"{c.engine} logs {c.name}"
    if dry_run:
        result.dry_run = True
        ctr = answer["container"]
        result.plan = [
            f"container {c.name} ({ctr['status']}, id {str(ctr['id'])[:12]}) runs the rendered arguments",
            f"{c.engine} restart -t {grace:g} {c.name}: its command, the server, stops and starts again",
            (
                f"wait up to {wait:g}s for http://{rendered.bind}:{rendered.port}/health asked from inside"
                " the container, then check every rendered argument against /server_info"
            ),
            f"on a failed start, name the crash from `{c.engine} logs` since this start",
        ]
        return result
    result.state, result.waited_s = answer["state"], answer["waited_s"]
    result.log_tail, result.server_info = answer["log_tail"], answer["server_info"]
    result.server_info_endpoint = answer.get("server_info_endpoint")
    result.stopped_pid = None
    result.stop = {"container_before": answer["stopped"]["status"]}
    result.ok = answer["state"] == "healthy"
    if not result.ok:
        result.failure, result.failure_label = answer["failure"], answer["failure_label"]
        result.failure_detail = answer.get("failure_detail")
        result.hint = HINTS.get(answer["failure"])
    if result.server_info:
        confirm(result, rendered.expected, result.server_info)
    return result


def status(
    remote: Remote,
    *,
    port: int | None = None,
    tail: int = 20,
    follow_s: float = 0,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """The container's state, /health and /server_info from
    inside it, `ENGINE logs` lines, the host's records."""
    return remote.run_py(
        "container_server",
        _args(remote, "status", port=port, tail=tail, follow_s=follow_s),
        on_host=True,
        timeout=max(60, follow_s + 60),
        on_progress=on_progress,
    )


def stop(remote: Remote, *, grace_s: float) -> dict:
    """`ENGINE stop` of the container whose command is the server."""
    return remote.run_py(
        "container_server", _args(remote, "stop", grace_s=grace_s), on_host=True, timeout=grace_s + 120
    )


def rollback_refusal(remote: Remote) -> SglopsError:
    c = remote.container
    return SglopsError(
        f"{remote.name}: the server is the entrypoint of container {c.name if c else '?'}: sglops "
        "only restarts that container as it was created and never changed its command, so there is "
        "no earlier script to roll back to (recreate the container with the earlier arguments)"
    )
