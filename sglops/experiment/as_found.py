"""The server as an experiment found it, and putting it back: found state, ledger checks, the restore.

ab and sweep change a server (patches, profiles, restarts) and promise to leave it as they found it. What they
found, how the ledger must look before each restart, and the restore itself are the same for both and live
here; every function takes the experiment's `ServerNodes` (one host, or every node of one server).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglops.core.errors import Failed, SglopsError
from sglops.core.remote import Remote
from sglops.experiment.ab_plan import Found, restore_steps, transitions
from sglops.experiment.server_nodes import ServerNodes
from sglops.launch import server as launch

# an interrupted round's restart may still run on the host: the restore waits for it
RESTORE_LOCK_WAIT_S = 900.0


class ExperimentFailed(Failed):
    """A step of an experiment (ab round, sweep candidate) could not be done; the restore still runs."""


def found(remote: Remote) -> Found:
    """One host as found now: the sglops server (profile, port) and the ledger's patches."""
    from sglops.patch import apply as patches

    cur = launch.inspect(remote)["current"]
    srv = cur.get("server") or {}
    return Found(
        running=bool(cur.get("running")),
        profile=srv.get("profile"),
        port=int(srv["port"]) if srv.get("port") else None,
        patches=[e["patch"] for e in patches.applied(remote)],
    )


def patch_files(names: list[str]) -> dict[str, list[str]]:
    """The managed patches, each with the files it touches: their specs loaded once per ab or sweep (the
    ledger checks and the restore read this map)."""
    from sglops.patch import spec as patch_spec

    return {p: patch_spec.load(p).files for p in names}


def ledger_check(nodes: ServerNodes, managed: dict[str, list[str]], want: set[str], when: str) -> list[str]:
    """Every node's ledger must say exactly `want` of the managed patches (`patch_files`), each file still as
    its patch left it."""
    return [p for r in nodes.remotes for p in _ledger_check_one(r, managed, want, when)]


def _ledger_check_one(remote: Remote, managed: dict[str, list[str]], want: set[str], when: str) -> list[str]:
    from sglops.patch import apply as patches

    files = sorted({f for names in managed.values() for f in names})
    state = patches.host_state(remote, files, contents=False)
    entries = {e["patch"]: e for e in state["ledger"].get("applied", [])}
    have = {p for p in managed if p in entries}
    if have != want:
        raise ExperimentFailed(
            f"{remote.name}: {when}: the host ledger has {sorted(have) or 'none'} of the managed "
            f"patches, this step needs {sorted(want) or 'none'}"
        )
    for p in want:
        drift = [
            rel
            for rel, h in entries[p]["files"].items()
            if state["files"].get(rel, {}).get("sha256") != h["after"]
        ]
        if drift:
            raise ExperimentFailed(
                f"{remote.name}: {when}: {p} is in the ledger but {', '.join(drift)} changed since "
                "it was applied"
            )
    return sorted(entries)


def precheck_patches(nodes: ServerNodes, managed: list[str], now: dict[str, Found]) -> None:
    """Each managed patch's own dry run on every node (apply if absent, revert if applied): a conflict, an
    unmet requirement or drift refuses here, before anything changes."""
    from sglops.patch import apply as patches

    for remote in nodes.remotes:
        for p in managed:
            if p in now[remote.name].patches:
                patches.revert_patch(remote, p, dry_run=True)
            else:
                patches.apply_patch(remote, p, dry_run=True)


def align(nodes: ServerNodes, managed: list[str], want: set[str], say: Callable[[str], None]) -> None:
    """Bring every node's managed patches to `want` (nodes
    an interrupted run left apart), each node on its own."""
    from sglops.patch import apply as patches

    for remote in nodes.remotes:
        have = {e["patch"] for e in patches.applied(remote)} & set(managed)
        for kind, p in transitions(have, want, managed):
            say(f"{remote.name}: {kind} {p} (the nodes were left apart)")
            (patches.apply_patch if kind == "apply" else patches.revert_patch)(remote, p)


def restart(
    nodes: ServerNodes,
    profile: Any,
    when: str,
    say: Callable[[str], None],
    *,
    ports: dict[str, int | None] | None = None,
    lock_wait_s: float = 0,
) -> Any:
    """Restart the server (every node together); a start
    that failed is the experiment's failure, in one line."""
    say(f"{when}: restart {getattr(profile, 'name', profile)}")
    res = nodes.restart(profile, ports=ports, lock_wait_s=lock_wait_s)
    if not res.ok:
        raise ExperimentFailed(res.failure_line(when))
    return res


def restore(
    nodes: ServerNodes,
    found_by_node: dict[str, Found],
    managed: dict[str, list[str]],
    say: Callable[[str], None],
) -> dict:
    """The found patch set back on every node (each from its own ledger, wherever the steps stopped), then the
    found server (every node together) or none. Never raises: its outcome is recorded and shown."""
    from sglops.patch import apply as patches

    lead = found_by_node[nodes.name]
    want = {p for p in lead.patches if p in managed}
    out: dict[str, Any] = {"ok": False, "patches": sorted(want)}
    if nodes.several:
        out["nodes"] = nodes.names()
    try:
        server_step = None
        for remote in nodes.remotes:
            mine = found_by_node.get(remote.name, lead)
            have = {e["patch"] for e in patches.applied(remote)} & set(managed)
            for step in restore_steps(have, mine, list(managed)):
                if step.kind in ("apply", "revert"):
                    say(f"{remote.name}: {step.line()}" if nodes.several else step.line())
                    (patches.apply_patch if step.kind == "apply" else patches.revert_patch)(remote, step.what)
                else:
                    server_step = step
        ledger_check(nodes, managed, want, "restore")
        if server_step is not None and server_step.kind == "restart":
            restart(
                nodes,
                lead.profile,
                "restore",
                say,
                ports={n: f.port for n, f in found_by_node.items()},
                lock_wait_s=RESTORE_LOCK_WAIT_S,
            )
            out["server"] = f"{lead.profile} on port {lead.port}"
        elif server_step is not None:
            say(server_step.line())
            nodes.stop(lock_wait_s=RESTORE_LOCK_WAIT_S)
            out["server"] = "stopped (none was running before)"
        ledgers = {r.name: [e["patch"] for e in patches.applied(r)] for r in nodes.remotes}
        out["ledger"] = ledgers[nodes.name]
        if nodes.several:
            out["ledgers"] = ledgers
        wrong = [n for n, got in ledgers.items() if sorted(got) != sorted(found_by_node.get(n, lead).patches)]
        out["ok"] = not wrong
        if wrong:
            out["error"] = "; ".join(
                f"{n}: ledger has {ledgers[n]}, found {found_by_node.get(n, lead).patches}" for n in wrong
            )
    except (SglopsError, OSError) as exc:
        out["error"] = str(exc)
    return out
