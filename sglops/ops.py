"""The operation catalogue: every operation sglops offers, each declared once in its domain's `ops.py`.

`tasks.py` (sglops.cli.tasks) and the play steps (sglops.play.steps) are generated from it. The play family's
own operations (play, report, demo: runners of these) are in sglops.play.ops, which the task runner adds.
"""

from __future__ import annotations

from sglops.bench import ops as bench
from sglops.core.op import Op
from sglops.experiment import duel_ops
from sglops.experiment import ops as experiment
from sglops.kernel import ops as kernel
from sglops.launch import ops as launch
from sglops.patch import ops as patch
from sglops.probe import ops as probe
from sglops.sandbox import ops as sandbox
from sglops.trace import ops as trace

OPS: list[Op] = [
    *probe.OPS,
    *patch.OPS,
    *trace.OPS,
    *bench.OPS,
    *experiment.OPS,
    *duel_ops.OPS,
    *launch.OPS,
    *kernel.OPS,
    *sandbox.OPS,
]
STEP_KINDS: dict[str, Op] = {op.step: op for op in OPS if op.step}
