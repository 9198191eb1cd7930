"""A play's step kinds, generated from the operation catalogue (sglops.ops): no step is written by hand.

A step kind is an operation with `step=` set: its `with:` keys are the operation's play parameters, checked
when the play is loaded (before any host is touched), and it runs as the task does (sglops.core.op.perform),
handed a run context for the play's run and the step. In a dry run an operation with a `plan` says what it
would do (bench, profile, compare), exactly as its task's --dry-run; every other one runs as its task's
--dry-run does (patches, restart, build-kernel, ab ask the host for their own plan; facts and probe only
read).
"""

from __future__ import annotations

from typing import Any

from sglops.core.op import Context, Op, perform
from sglops.ops import STEP_KINDS


def run_step(op: Op, ctx: Context, params: dict[str, Any]) -> Any:
    """The step's result; a run of its own is recorded as `<run-id>-<step>`; a kept result that fails its
    check fails the step."""
    return perform(op, ctx, op.prepared(params), keep=op.own_run)


STEPS: dict[str, Op] = STEP_KINDS
