"""A play's step kinds, generated from the operation catalogue (sglops.ops): no step is written by hand.

A step kind is an operation with `step=` set: its `with:` keys are the operation's play parameters, checked
when the play is loaded (before any host is touched), and it runs the same function as the task, handed a run
context for the play's run and the step. In a dry run an operation with a `plan` says what it would do
(bench, profile, compare); every other one runs as its task's --dry-run does (patches, restart, build-kernel,
ab ask the host for their own plan; facts and probe only read).
"""

from __future__ import annotations

from typing import Any

from sglops.core.errors import SglopsError
from sglops.core.op import Context, Op
from sglops.ops import STEP_KINDS
from sglops.play.result import Planned


def run_step(op: Op, ctx: Context, params: dict[str, Any]) -> Any:
    """The step's result (a plan in a dry run when the operation has one); a kept result that fails its
    check fails the step."""
    if op.prepare is not None:
        params = op.prepare(params) or params
    if ctx.dry_run and op.plan is not None:
        return Planned(op.plan(ctx, **params))
    keeps = op.own_run and op.record and not ctx.dry_run  # a run of its own: `<run-id>-<step>`, recorded here
    try:
        result = op.run(ctx, **params)
    except SglopsError as exc:  # a failed run that is still worth its record (traces not analysed, a failed build)
        if keeps and exc.kept is not None:
            ctx.keep(exc.kept, op.record, task=op.name)
        raise
    if keeps:
        ctx.keep(result, op.record, task=op.name)
    if op.check is not None:
        op.check(result, params)
    return result


STEPS: dict[str, Op] = STEP_KINDS
