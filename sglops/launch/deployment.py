"""One SGLang server over several hosts (`nnodes` > 1):
its nodes checked, started, judged and stopped together.

Why a coordinator: every host of an invocation runs in a worker thread of its own (sglops.core.parallel), but
a node alone is no server. Node 0 waits at the dist-init for the others; a node that dies takes the rest down
a while later, or not at all (sglang#3099: rank 0 kept serving after rank 1's NCCL timeout). So the nodes'
threads meet at stages (`Deployment.gather`): before anything is stopped every node must run the same release,
patches, kernels and model; they start together; the first node that fails has every other node's start
aborted (the host's own restart stops what it started), a node that came up is stopped again; and the result
of each names every node's outcome. Never "healthy" while a node is dead.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from sglops.core.errors import ConfigError, SglopsError
from sglops.core.hosts import Host
from sglops.core.meet import Meeting
from sglops.core.remote import Remote
from sglops.launch.profiles import Profile, load_profile
from sglops.launch.results import HINTS, LaunchFailed, RestartResult, ServerStatus


class Deployment(Meeting):
    """The nodes of one server in one invocation: a meeting,
    plus the start's abort token and the first failure."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        # this start's abort token (sglops.launch.server.abort)
        self.token = secrets.token_hex(8)
        self.remotes: dict[str, Remote] = {}
        self.failed: tuple[str, RestartResult] | None = None
        self.failed_at: float | None = None
        self._first = threading.Lock()

    def fail(self, host: str, result: RestartResult, on_abort: Callable[[str], None]) -> bool:
        """Record the first node that failed and abort every
        other node's start; False if one failed before."""
        with self._first:
            if self.failed is not None:
                return False
            self.failed, self.failed_at = (host, result), time.monotonic()
        for name, remote in list(self.remotes.items()):
            if name != host:
                try:
                    from sglops.launch import server

                    server.abort(remote, self.token)
                except SglopsError:
                    # that node's own wait ends anyway (its peers are gone); its line says how
                    pass
                on_abort(name)
        return True


def node_ranks(profile: Profile, hosts: list[Host]) -> dict[str, int]:
    """{host name: node_rank} of the nodes of this profile's
    server, refusing a set that is not one whole server."""
    nnodes = int(profile.args.get("nnodes", 1))
    ranks: dict[str, int] = {}
    for h in hosts:
        rank = profile.for_host(h.name).args.get("node_rank", h.node_rank)
        if rank is None:
            raise ConfigError(
                f"profile {profile.name}: {h.name} has no node_rank (inventory node_rank or the "
                "profile's per_host)"
            )
        ranks[h.name] = int(rank)
    got = sorted(ranks.values())
    if got != list(range(nnodes)):
        said = ", ".join(f"{n}={r}" for n, r in ranks.items())
        raise ConfigError(
            f"profile {profile.name} is one server over nnodes={nnodes}: restart its nodes together, "
            f"one host per node_rank 0..{nnodes - 1} (--hosts n0,n1,...); got {said}"
        )
    return ranks


def node_facts(remote: Remote, model_path: str | None) -> dict:
    """What must match on every node (host/node_facts.py)."""
    return remote.run_py(
        "node_facts", {"sglang_root": remote.host.sglang_root, "model_path": model_path}, timeout=60
    )


def differences(facts: dict[str, dict]) -> list[str]:
    """One line per thing the nodes do not agree on, naming each node's value."""

    def pick(doc: dict, path: str) -> Any:
        for part in path.split("."):
            doc = (doc or {}).get(part)
        return doc

    out = []
    checks = [
        ("sglang.version", "SGLang release"),
        ("sglang.commit", "SGLang commit"),
        ("sglang.dirty", "hand edits in the tree"),
        ("patches", "applied patches"),
        ("kernels", "installed kernels"),
        ("model.path", "model path"),
        ("model.config_sha256", "model config.json"),
    ]
    for path, what in checks:
        seen = {name: pick(doc, path) for name, doc in facts.items()}
        if len({repr(v) for v in seen.values()}) > 1:
            out.append(f"{what}: " + "; ".join(f"{n}: {_short(v)}" for n, v in sorted(seen.items())))
    for name, doc in sorted(facts.items()):
        model = doc.get("model") or {}
        if model.get("path") and model["path"].startswith(("/", "~")) and not model.get("exists"):
            out.append(f"model path: {model['path']} is not a folder on {name}")
    return out


def _short(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(f"{e.get('patch')}@{e.get('variant')}" for e in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={str(v)[:12]}" for k, v in value.items()) or "none"
    return "none" if value is None else str(value)[:40]


def _outcome(host: str, rank: int | None, res: RestartResult) -> dict:
    return {
        "host": host,
        "node_rank": rank,
        "state": res.state,
        "ok": res.ok,
        "pid": res.pid,
        "waited_s": res.waited_s,
        "failure": res.failure,
        "failure_label": res.failure_label,
        "failure_detail": res.failure_detail,
        "log_path": res.log_path,
    }


def restart_node(
    ctx: Any, profile: str | None, *, rollback: bool, timeout: float | None, port: int | None, dry_run: bool
) -> RestartResult:
    """This host's part of restarting a server over several nodes; raises LaunchFailed (naming the node that
    failed first) unless every node came up."""
    from sglops.launch import server

    remote: Remote = ctx.remote
    names = [h.name for h in ctx.peers]
    if rollback:
        what = "rollback"
    else:
        p = load_profile(profile)
        # one whole server, or refused before anything is asked of a host
        node_ranks(p, list(ctx.peers))
        what = p.name
    dep = Deployment.of(ctx.run_id, f"restart {what}", names)
    try:
        model = None
        if not rollback:
            model = server.render_for(remote, profile, port=port).expected.get("model_path")
        facts = node_facts(remote, model)
    except BaseException:
        dep.leave(remote.name)
        raise
    every = dep.gather("facts", remote.name, facts)
    differ = differences(every)
    if differ:
        raise ConfigError(
            f"{remote.name}: the nodes of {what} differ; nothing was stopped or started: "
            + " | ".join(differ)
        )
    if dry_run:
        return server.restart(
            remote, profile, rollback=rollback, dry_run=True, timeout=timeout, port=port, as_node=True
        )
    dep.remotes[remote.name] = remote
    dep.gather("connected", remote.name, True)

    def tell(name: str) -> None:
        ctx.event({"phase": f"node {name} asked to stop: {remote.name} failed"})

    try:
        res = server.restart(
            remote,
            profile,
            rollback=rollback,
            timeout=timeout,
            port=port,
            on_progress=ctx.event,
            abort_token=dep.token,
            as_node=True,
        )
    # no answer from this node's restart: the others must not wait for it
    except SglopsError as exc:
        res = RestartResult(
            host=remote.name,
            profile=what,
            ok=False,
            state="error",
            port=port or 0,
            failure="error",
            failure_label=str(exc),
        )
    if not res.ok and res.failure != "aborted":
        dep.fail(remote.name, res, tell)
    outcomes = dep.gather(
        "started", remote.name, _outcome(remote.name, res.node_rank, res), timeout=(timeout or 3600) + 300
    )
    res.deployment = sorted(outcomes.values(), key=lambda o: (o["node_rank"] is None, o["node_rank"] or 0))
    if dep.failed is None:
        return res
    bad_host, bad = dep.failed
    # it came up, but its server is not whole: stop it again
    if res.ok:
        stopped = server.stop(remote, grace_s=20)
        res.ok, res.state = False, "stopped"
        res.failure, res.failure_label = "aborted", "stopped again: another node of this server failed"
        res.stop = {**res.stop, "after_peer_failed": stopped.get("signal")}
    if remote.name != bad_host:
        res.failure_label = (
            f"{res.failure_label}: node {bad_host} (node_rank {bad.node_rank}) "
            f"{bad.failure_label} [{bad.failure}]" + (f": {bad.failure_detail}" if bad.failure_detail else "")
        )
        res.hint = HINTS.get("aborted")
    if dep.failed_at is not None:
        res.stop = {**res.stop, "reported_after_failure_s": round(time.monotonic() - dep.failed_at, 3)}
    raise LaunchFailed(res, [f"node {bad_host} failed first; every node was stopped"])


def status_node(ctx: Any, st: ServerStatus) -> ServerStatus:
    """This node's status, with every node's when several hosts were asked at once (a node that is dead
    makes the whole server unhealthy, whatever node 0 answers)."""
    names = [h.name for h in ctx.peers]
    every = Meeting.of(ctx.run_id, "status", names).gather(
        "status",
        ctx.remote.name,
        {
            "host": st.host,
            "node_rank": st.node_rank,
            "nnodes": st.nnodes,
            "profile": st.profile or _last_profile(st),
            "running": st.running,
            "health": st.health,
            "pid": st.pid,
        },
    )
    mine = _last_profile(st)
    st.deployment = (
        sorted(
            (n for n in every.values() if n["nnodes"] > 1 and n["profile"] == mine),
            key=lambda n: n["node_rank"] or 0,
        )
        if st.nnodes > 1
        else []
    )
    if st.deployment and len(st.deployment) < st.nnodes:
        have = {n["node_rank"] for n in st.deployment}
        st.deployment += [
            {
                "host": "?",
                "node_rank": r,
                "running": False,
                "health": None,
                "profile": mine,
                "note": "not among the hosts asked",
            }
            for r in range(st.nnodes)
            if r not in have
        ]
    return st


def _last_profile(st: ServerStatus) -> str | None:
    return st.profile or next((r.get("profile") for r in reversed(st.restarts) if r.get("profile")), None)


def restart_together(
    remotes: list[Remote],
    profile_for: Callable[[str], Any],
    *,
    ports: dict[str, int | None],
    lock_wait_s: float = 0,
    timeout: float | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> RestartResult:
    """Restart every node of one server from ONE thread (an experiment's rounds: ab, sweep): checked alike,
    started at once, every node stopped again when one fails. Returns node 0's result, its `deployment` naming
    every node's outcome; a failed result names the node that failed first with its class and log line."""
    from sglops.launch import server

    names = [r.name for r in remotes]
    profiles = {r.name: profile_for(r.name) for r in remotes}
    model = server.render_for(remotes[0], profiles[names[0]], port=ports.get(names[0])).expected.get(
        "model_path"
    )
    differ = differences({r.name: node_facts(r, model) for r in remotes})
    if differ:
        raise ConfigError(
            f"the nodes of {names[0]}'s server differ; nothing was stopped or started: " + " | ".join(differ)
        )
    dep = Deployment(names)
    dep.remotes = {r.name: r for r in remotes}
    results: dict[str, RestartResult] = {}

    def one(remote: Remote) -> None:
        try:
            res = server.restart(
                remote,
                profiles[remote.name],
                port=ports.get(remote.name),
                timeout=timeout,
                lock_wait_s=lock_wait_s,
                abort_token=dep.token,
                as_node=True,
                on_progress=on_progress if remote is remotes[0] else None,
            )
        except SglopsError as exc:
            res = RestartResult(
                host=remote.name,
                profile=str(getattr(profiles[remote.name], "name", "?")),
                ok=False,
                state="error",
                port=ports.get(remote.name) or 0,
                failure="error",
                failure_label=str(exc),
            )
        results[remote.name] = res
        if not res.ok and res.failure != "aborted":
            dep.fail(remote.name, res, lambda _name: None)

    threads = [threading.Thread(target=one, args=(r,), name=f"restart-{r.name}") for r in remotes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lead = results[names[0]]
    lead.deployment = [_outcome(n, results[n].node_rank, results[n]) for n in names]
    if dep.failed is None:
        return lead
    bad_host, bad = dep.failed
    # a node that came up is no server without the others: stop it again
    for remote in remotes:
        if results[remote.name].ok:
            server.stop(remote, grace_s=20)
    lead.ok, lead.state = False, bad.state
    lead.failure, lead.failure_label, lead.failure_detail = (
        bad.failure,
        (
            f"node {bad_host} (node_rank {bad.node_rank}) failed first: {bad.failure_label}; every node was"
            " stopped"
        ),
        bad.failure_detail,
    )
    lead.log_path, lead.log_tail, lead.hint = bad.log_path, bad.log_tail, bad.hint
    lead.waited_s = bad.waited_s
    return lead
