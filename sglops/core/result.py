"""The one contract every step of a task or play answers with: did it change the host, was it a dry run, what
would it do.

Ansible's modules answer `changed` and, in check mode, a diff; sglops' steps do the same, so a play, a recap
or a script can tell a run that changed a host from one that only looked, without knowing each result class.
A result class mixes in `Result`, keeps its own fields in `payload()`, and has (as a field or a property):

- `changed`: the step changed the host (a server started or stopped, a patch applied, a kernel installed);
  always False for a dry run and for steps that only measure or read;
- `dry_run`: the step only planned;
- `plan`: what a dry run would do, one line per action (empty when nothing is planned).

`to_json()` is the payload with those three keys on top. A result that is a run of its own (bench, profile,
ab, a kernel build) is recorded by the runner, never by the domain (sglops.core.artifacts.keep):
`run_manifest()` adds to its run's manifest.json and `run_files()` names the other files of the run (outputs,
logs) with their contents. The error side of the contract is sglops.core.errors: every failure is a
SglopsError subclass with its own `exit_code`.
"""

from __future__ import annotations

from typing import Any


class Result:
    """Mixin for a step's result; see the module doc. No defaults here: a dataclass field of the same name
    in a subclass must not inherit one."""

    changed: bool
    dry_run: bool
    plan: Any

    def payload(self) -> dict[str, Any]:
        """The result's own fields, as JSON."""
        raise NotImplementedError

    def run_manifest(self) -> dict[str, Any]:
        """What the run's manifest.json carries besides the
        file list (status, what ran): the runner writes it."""
        return {}

    def run_files(self) -> dict[str, Any]:
        """Other files of the run, name -> content (bytes or str as they are, anything else as JSON)."""
        return {}

    def plan_lines(self) -> list[str]:
        """`plan` as lines of text (a class whose plan holds objects says how they read)."""
        return [str(p) for p in self.plan or []]

    def contract(self) -> dict[str, Any]:
        return {"changed": bool(self.changed), "dry_run": bool(self.dry_run), "plan": self.plan_lines()}

    def to_json(self) -> dict[str, Any]:
        return {**self.payload(), **self.contract()}


class Observation(Result):
    """A result that only reads or measures: it never changes the host and has nothing to plan."""

    @property
    def changed(self) -> bool:  # type: ignore[override]
        return False

    @property
    def dry_run(self) -> bool:  # type: ignore[override]
        return False

    @property
    def plan(self) -> list[str]:  # type: ignore[override]
        return []


class Planned(Result):
    """A dry run's answer for an operation that has a plan (it would only measure): what would happen, nothing
    changed. The task's --dry-run and a play's dry run answer with the same one (sglops.core.op.perform)."""

    changed = False
    dry_run = True

    def __init__(self, what: str) -> None:
        self.what = what

    @property
    def plan(self) -> list[str]:  # type: ignore[override]
        return [self.what]

    def payload(self) -> dict[str, Any]:
        return {}
