"""sglops tasks: `inv --list`. Generated from the operation
catalogue (sglops/ops.py, each domain's ops.py)."""

from sglops.cli.tasks import tasks

globals().update(tasks())
