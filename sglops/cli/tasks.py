"""Every `inv` task, generated from the operation catalogue (sglops.ops).

An operation's parameters become the task's signature (`__signature__`, in declared order: Invoke gives short
flags in that order), their help its help; the body checks the flags (sglops.core.values, one line and exit 2
for a bad one), runs the operation's `prepare`, then the operation on every target host with a run context
(one run id for the whole invocation), draws its live display, records and prints each host's result.
"""

from __future__ import annotations

import inspect
from typing import Any

from invoke import Task, task

from sglops.cli.glue import ONE_HOST_FLAGS, TARGET_FLAGS, Targets, fail, guarded, per_host
from sglops.cli.helpfmt import LIST_FLAGS, CatalogueTask, is_switch, list_line, placeholder, short_flags
from sglops.core.errors import SglopsError
from sglops.core.op import Context, Marker, Op, new_run_id, perform
from sglops.core.values import check
from sglops.views.files import draw

_P = inspect.Parameter.POSITIONAL_OR_KEYWORD
_TARGET_DEFAULTS = {"accept_new_host_key": False}


def _flags(op: Op) -> list[tuple[str, Any, str, bool]]:
    """(name, Invoke default, help, positional) of every flag, in the task's order."""
    out = []
    for p in op.params:
        if isinstance(p, Marker):
            out += [
                (k, _TARGET_DEFAULTS.get(k), v, False)
                for k, v in (TARGET_FLAGS if p.name == "targets" else ONE_HOST_FLAGS).items()
            ]
        elif p.cli:
            out.append((p.name, p.flag, p.help_text(), p.positional))
    return out


def _metavars(op: Op) -> dict[str, str]:
    """dashed flag -> the placeholder its help shows (switches: none)."""
    out = {}
    for p in op.params:
        if isinstance(p, Marker):
            names = TARGET_FLAGS if p.name == "targets" else ONE_HOST_FLAGS
            out.update(
                {k: "LIST" if k in LIST_FLAGS else "STRING" for k in names if k != "accept_new_host_key"}
            )
        elif p.cli and not is_switch(p.kind) and not isinstance(p.flag, bool):
            out[p.name] = placeholder(p.kind, p.name in op.task.get("iterable", ()))
    return {k.replace("_", "-"): v for k, v in out.items()}


def _dashed(op: Op) -> tuple[list[str], bool]:
    return [n.replace("_", "-") for n, *_ in _flags(op)], op.task.get("auto_shortflags", True)


def make_task(op: Op, shorts: dict[str, str] | None = None) -> Task:
    """op as an Invoke task; shorts: the catalogue-wide short flags (helpfmt.short_flags), else op's own."""
    flags = _flags(op)
    params = [inspect.Parameter("c", _P)] + [
        inspect.Parameter(name, _P, **({} if positional else {"default": default}))
        for name, default, _help, positional in flags
    ]

    def body(c: Any, **kw: Any) -> None:
        run_task(op, kw)

    body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    body.__name__ = op.name.replace("-", "_")
    body.__doc__ = list_line(op.summary)
    helps = {name.rstrip("_").replace("_", "-"): text for name, _d, text, _p in flags if text}
    options = {**op.task, "auto_shortflags": False}
    return task(
        body,
        name=op.name,
        help=helps,
        klass=CatalogueTask,
        **options,
        shorts=short_flags([_dashed(op)]) if shorts is None else shorts,
        metavars=_metavars(op),
    )


def tasks() -> dict[str, Task]:
    """name -> Task for tasks.py's namespace."""
    from sglops.ops import OPS
    from sglops.play.ops import OPS as PLAY_OPS

    ops = [*OPS, *PLAY_OPS]
    shorts = short_flags(_dashed(op) for op in ops)
    return {op.name.replace("-", "_"): make_task(op, shorts) for op in ops}


def run_task(op: Op, kw: dict[str, Any]) -> None:
    json = kw.pop("json", False)
    dry_run = kw.pop("dry_run", False)
    targets = Targets(**{k: kw.pop(k) for k in TARGET_FLAGS if k in kw}) if op.targets != "none" else None
    # those two are the runner's
    spec = {k: v for k, v in op.spec("cli").items() if k not in ("json", "dry_run")}
    opts = guarded(op.prepared, {**kw, **guarded(check, spec, {k: v for k, v in kw.items() if k in spec})})
    run_id = new_run_id()
    if targets is None or (op.hostless and targets.host is None):
        ctx = Context(None, run_id, dry_run, draw=draw)
        result = guarded(perform, op, ctx, opts, keep=True, check=False, json=json)
        if json and result is not None:
            from sglops.core.console import print_json

            print_json(result.to_json())
        elif result is not None:
            _show(op, opts)(result)
        guarded(op.checked, result, opts)
        return
    _on_hosts(op, targets, run_id, dry_run, json, opts)


def _on_hosts(op: Op, targets: Targets, run_id: str, dry_run: bool, json: bool, opts: dict) -> None:
    from sglops.core.hosts import load_inventory
    from sglops.views.live import display

    try:
        inventory = load_inventory()
        hosts = targets.resolve(inventory)
    except SglopsError as exc:
        fail(str(exc), exc.exit_code)
    # rich drives one live display: with several hosts, each runs quietly
    live = not json and len(hosts) == 1
    show = _show(op, opts)

    with display(op.live, json, len(hosts)) as watch:

        def step(remote: Any) -> Any:
            # the one run id of this invocation, also for the host answers it keeps
            remote.run_id = run_id
            with watch(remote.name) as sink:
                ctx = Context(
                    remote, run_id, dry_run, on_event=sink, live=live, draw=draw, peers=tuple(hosts)
                )
                return perform(
                    op, ctx, opts, keep=True, check=False, json=json, on_kept=None if json else show
                )

        try:
            # no live display to share rich with
            per_host(
                op.name,
                (inventory, hosts),
                step,
                accept_new_host_key=targets.accept_new_host_key,
                run_id=run_id,
                json=json,
                artifact=None if dry_run else op.record,
                show=show,
                check=lambda r: op.checked(r, opts),
                max_workers=len(hosts) if op.together else None,
                lay_out=_lay_out(op, opts) if op.live is None else None,
                alike=_alike(op, opts) if op.live is None else None,
            )
        finally:
            from sglops.core import meet

            meet.forget(run_id)


def _lay_out(op: Op, opts: dict) -> Any:
    """The text the task's view prints for a result
    (sglops.views.show.laid_out), None where it prints otherwise."""
    options = {k: opts[k] for k in op.view_options}

    def lay_out(result: Any) -> str | None:
        from sglops.views.show import laid_out

        return laid_out(result, **options)

    return lay_out


def _alike(op: Op, opts: dict) -> Any:
    """The task's result split for a fan-out (sglops.views.show.alike): hosts of one answer print it once."""
    options = {k: opts[k] for k in op.view_options}

    def alike(result: Any) -> Any:
        from sglops.views.show import alike

        return alike(result, **options)

    return alike


def _show(op: Op, opts: dict) -> Any:
    """How the task prints a result: the view of its type (sglops.views.show), with the operation's view
    options."""
    options = {k: opts[k] for k in op.view_options}

    def show(result: Any) -> None:
        from sglops.views.show import show

        show(result, **options)

    return show
