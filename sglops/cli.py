"""Glue between Invoke tasks and the library: target flags, per-host fan-out, errors, output.

Tasks in tasks.py stay a few lines each: they build `Targets` from their flags and call
`per_host` (or `guarded` for tasks that touch no host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from invoke.exceptions import Exit

from sglops import artifacts
from sglops.console import console, error_line, print_json  # noqa: F401 (error_line re-exported)
from sglops.errors import SglopsError
from sglops.hosts import Host, Inventory, load_inventory, resolve_targets
from sglops.parallel import on_hosts
from sglops.remote import Remote

TARGET_HELP = {
    "host": "a host from playbooks/hosts.yaml, an address (user@addr:port), or 'local'",
    "hosts": "several hosts, comma-separated (run in parallel)",
    "tag": "every inventory host with this tag",
    "sglang-root": "where SGLang lives on the host (checkout root, python/ or the package folder)",
    "accept-new-host-key": "trust and save an unknown host key (a changed key is always refused)",
    "json": "print machine-readable JSON instead of tables",
}


def help_with(**extra: str) -> dict[str, str]:
    return {**TARGET_HELP, **{k.rstrip("_").replace("_", "-"): v for k, v in extra.items()}}


@dataclass
class Targets:
    """The hosts a task acts on, from its common flags."""

    host: str | None = None
    hosts: str | None = None
    tag: str | None = None
    sglang_root: str | None = None
    accept_new_host_key: bool = False

    def resolve(self, inventory: Inventory | None = None) -> list[Host]:
        return resolve_targets(self.host, self.hosts, self.tag, self.sglang_root, inventory)


def fail(message: str, code: int = 2) -> None:
    error_line(message)
    raise Exit(code=code)


def guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call fn; a user error becomes one red line and a non-zero exit (no traceback)."""
    try:
        return fn(*args, **kwargs)
    except SglopsError as exc:
        fail(str(exc), exc.exit_code)


def per_host(
    task: str,
    targets: Targets,
    step: Callable[[Remote], Any],
    *,
    json: bool = False,
    artifact: str | None = None,
    show: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run step on every target in parallel, save and print each result, recap, exit non-zero on failure.

    A step returns an object with `to_json()` (and `table()` unless `show` is given).
    """
    try:
        inventory = load_inventory()
        hosts = targets.resolve(inventory)
    except SglopsError as exc:
        fail(str(exc), exc.exit_code)
    outcomes = on_hosts(hosts, step, accept_new_host_key=targets.accept_new_host_key, inventory=inventory)
    run_id = artifacts.new_run_id()
    documents = []
    for out in outcomes:
        if not out.ok:
            if not json:
                error_line(f"[{out.host.name}] {out.error}" if len(outcomes) > 1 else out.error)
            documents.append({"host": out.host.name, "ok": False, "error": out.error})
            continue
        doc = out.value.to_json()
        if artifact:
            path = artifacts.save(out.host.name, run_id, artifact, doc, task=task,
                                  extra={"seconds": round(out.seconds, 3)})
            doc = {**doc, "artifact": str(path)}
        documents.append({"host": out.host.name, "ok": True, **doc})
        if not json:
            (show or (lambda v: console.print(v.table())))(out.value)
    if json:
        print_json(documents if len(documents) > 1 else documents[0])
    failed = [o for o in outcomes if not o.ok]
    if len(outcomes) > 1 and not json:
        console.print(
            f"[bold]{task}[/]: {len(outcomes) - len(failed)} ok, {len(failed)} failed"
            + (f" ({', '.join(o.host.name for o in failed)})" if failed else "")
            + (f"; run {run_id}" if artifact else "")  # steps that record their own runs name them
        )
    if failed:
        raise Exit(code=1)
    return [o.value for o in outcomes]
