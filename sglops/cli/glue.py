"""Glue between Invoke and the library: target flags, per-host fan-out, errors, output.

sglops.cli.tasks builds every task from the operation catalogue and calls `per_host` (or `guarded` for
operations that touch no host); this is the only place besides it that knows Invoke.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from invoke.exceptions import Exit
from rich.text import Text

from sglops.core import artifacts
from sglops.core.console import console, err_console, error_line, print_json, styled
from sglops.core.container import ContainerTarget
from sglops.core.errors import SglopsError, combined_exit
from sglops.core.hosts import Host, Inventory, resolve_targets
from sglops.core.parallel import Outcome, guard, on_hosts
from sglops.core.remote import Remote

# the target flags every host operation takes (the one-host ones leave out hosts and tag), in this order
TARGET_FLAGS = {
    "host": "a host from playbooks/hosts.yaml, an address (user@addr:port), or 'local'",
    "hosts": "several hosts, comma-separated (run in parallel)",
    "tag": "every inventory host with this tag",
    "sglang_root": "where SGLang lives on the host (checkout root, python/ or the package folder)",
    "accept_new_host_key": "trust and save an unknown host key (a changed key is always refused)",
    "container": "SGLang lives in this container on the host: every step runs through docker exec",
}
ONE_HOST_FLAGS = {k: v for k, v in TARGET_FLAGS.items() if k not in ("hosts", "tag")}


@dataclass
class Targets:
    """The hosts a task acts on, from its common flags."""

    host: str | None = None
    hosts: str | None = None
    tag: str | None = None
    sglang_root: str | None = None
    accept_new_host_key: bool = False
    container: str | None = None

    def resolve(self, inventory: Inventory | None = None) -> list[Host]:
        if self.container:
            # a bad name is one line before any host is touched
            ContainerTarget(self.container)
        return resolve_targets(
            self.host, self.hosts, self.tag, self.sglang_root, inventory, container=self.container
        )


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
    hosts: tuple[Inventory, list[Host]],
    step: Callable[[Remote], Any],
    *,
    accept_new_host_key: bool = False,
    run_id: str,
    json: bool = False,
    artifact: str | None = None,
    show: Callable[[Any], None] | None = None,
    check: Callable[[Any], None] | None = None,
    max_workers: int | None = None,
    lay_out: Callable[[Any], str | None] | None = None,
    alike: Callable[[Any], Any] | None = None,
) -> list[Any]:
    """Run step on every target in parallel, save and print each result, recap, exit with the failures' class.

    A step returns an object with `to_json()` (recorded by the step itself as `artifact` of the run: a dry run
    passes none), printed by `show`. `check(value)` raises
    for a result that counts as a failure though it is kept and shown (a partial bench, a stopped play).
    Whatever goes wrong on one host (a user error, an unreachable host, a bug) is that host's outcome: the
    others' results are still saved and printed, and the exit code follows errors.combined_exit.
    `lay_out(value)`: the text `show` would print (None: show prints it); with several hosts each host's
    result is then checked and laid out in its own worker as soon as it is there, while the other hosts still
    work, and only written here, in the hosts' order.
    `alike(value)`: the result split into a key, a heading and a body (sglops.views.alike.Alike, or None);
    with several hosts, the hosts whose keys are equal print the body once, laid out by the first of them to
    answer, under a heading naming them all, where the first of them stands; a line then says which hosts
    gave which answer. JSON stays one document per host.
    """
    inventory, targets = hosts
    many = len(targets) > 1
    # id(host) -> checked, JSON, text, shown, answer
    early: dict[int, tuple[Outcome, dict | None, str | None, bool, Any]] = {}
    # an answer's key -> its body's text (None: not laid out, or its view broke)
    bodies: dict[Any, str | None] = {}
    lock = threading.Lock()

    def step_and_lay_out(remote: Remote) -> Any:
        value = step(remote)
        out = Outcome(remote.host, value)
        doc = _result_document(out, run_id, artifact, check)
        text, shown, answer = None, False, None
        if doc is not None and not json:
            split = guard(out.host, lambda: alike(value)) if alike else None
            answer = split.value if split is not None and split.ok else None
            if split is not None and not split.ok:
                # a split that broke is this host's bug, as a view that broke
                drawn, shown = split, True
            elif answer is not None:
                with lock:
                    first = answer.key not in bodies
                    bodies.setdefault(answer.key, None)
                drawn = guard(out.host, answer.body_text) if first else None
                if drawn is not None and drawn.ok:
                    bodies[answer.key] = drawn.value
            else:
                drawn = guard(out.host, lambda: lay_out(value))
                text = drawn.value if drawn.ok else None
                # a view that broke is this host's bug, not shown again
                shown = text is not None or not drawn.ok
            if drawn is not None and not drawn.ok and out.ok:
                out.fail_from(drawn)
        early[id(remote.host)] = (out, doc, text, shown, answer)
        return value

    early_work = many and lay_out is not None
    outcomes = on_hosts(
        targets,
        step_and_lay_out if early_work else step,
        accept_new_host_key=accept_new_host_key,
        inventory=inventory,
        **({"max_workers": max_workers} if max_workers else {}),
    )
    groups = _answers(outcomes, early, bodies)
    heads = {key: _group_head(early[id(group[0].host)][4], group) for key, group in groups.items()}
    # a heading that broke: each host of that answer prints its own view
    groups = {key: group for key, group in groups.items() if heads[key] is not None}
    documents = []
    for out in outcomes:
        done = early.get(id(out.host)) if out.ok else None
        text, shown = None, False
        if done is not None:
            checked, doc, text, shown, answer = done
            if not checked.ok:
                out.fail_from(checked)
            group = groups.get(answer.key) if answer is not None and out.ok else None
            if group is not None:
                shown = True
                if group[0] is out:
                    text = heads[answer.key] + bodies[answer.key]
        else:
            doc = _result_document(out, run_id, artifact, check) if out.ok else None
        if text is not None:
            console.file.write(text)
            console.file.flush()
        elif doc is not None and not json and not shown:
            printed = guard(out.host, lambda v=out.value: show(v) if show else None)
            if not printed.ok and out.ok:
                out.fail_from(printed)
        if not out.ok and not json:
            error_line(f"[{out.host.name}] {out.error}" if many else out.error)
            if out.traceback:
                err_console.print(Text(out.traceback.rstrip(), style="dim"), soft_wrap=True)
        documents.append(
            {"host": out.host.name, "ok": out.ok, **(doc or {}), **({} if out.ok else out.to_json())}
        )
    if json:
        print_json(documents if many else documents[0])
    failed = [o for o in outcomes if not o.ok]
    if groups:
        console.print(_answers_line(task, list(groups.values())))
    if many and not json:
        console.print(
            styled((task, "bold"), f": {len(outcomes) - len(failed)} ok, {len(failed)} failed")
            + Text(f" ({', '.join(f'{o.host.name}: {o.kind}' for o in failed)})" if failed else "")
            # steps that record their own runs name them
            + Text(f"; run {run_id}" if artifact else "")
        )
    code = combined_exit(o.exit_code for o in outcomes)
    if code:
        raise Exit(code=code)
    return [o.value for o in outcomes]


def _answers(
    outcomes: list[Outcome], early: dict[int, tuple], bodies: dict[Any, str | None]
) -> dict[Any, list[Outcome]]:
    """The hosts that succeeded, grouped by answer, in the hosts' order (an answer whose body could not be
    laid out is left to each host's own view)."""
    groups: dict[Any, list[Outcome]] = {}
    for out in outcomes:
        done = early.get(id(out.host)) if out.ok else None
        answer = done[4] if done is not None and done[0].ok else None
        if answer is not None and bodies.get(answer.key) is not None:
            groups.setdefault(answer.key, []).append(out)
    return groups


def _group_head(answer: Any, group: list[Outcome]) -> str | None:
    """The heading naming a group's hosts; None where it broke."""
    head = guard(group[0].host, lambda: answer.head_text([o.value for o in group]))
    return head.value if head.ok else None


def _answers_line(task: str, groups: list[list[Outcome]]) -> Text:
    """Which hosts gave which answer, one line: a group of many by its first host and its size."""

    def named(group: list[Outcome]) -> str:
        names = [o.host.name for o in group]
        return ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} others"

    total = sum(len(g) for g in groups)
    if len(groups) == 1:
        return styled((task, "bold"), f": one answer from {'both' if total == 2 else f'all {total}'} hosts")
    return styled(
        (task, "bold"),
        f": {len(groups)} different answers from {total} hosts: " + "; ".join(map(named, groups)),
    )


def _result_document(
    out: Outcome, run_id: str, artifact: str | None, check: Callable[[Any], None] | None
) -> dict | None:
    """The host's result as JSON (naming its record when the task keeps one); a failing check or a bug in the
    result's own code turns the outcome into a failure, keeping what could be rendered."""
    doc: dict | None = None

    def render() -> None:
        nonlocal doc
        doc = out.value.to_json()
        # recorded by the step (sglops.core.op.perform)
        if artifact and not out.value.dry_run:
            doc["artifact"] = str(artifacts.run_path(out.host.name, run_id) / artifact)
        if check:
            check(out.value)

    checked = guard(out.host, render)
    if not checked.ok:
        out.fail_from(checked)
    return doc
