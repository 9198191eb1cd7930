"""What a play run leaves: each step's record and the play's result; what `inv report` wrote.

Data and JSON only, importing nothing of the runner or the steps, so the view layer (sglops.views.play,
registered in sglops.views.show) can name these classes without an import circle through the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core.result import Observation, Result


@dataclass
class StepRecord:
    id: str
    do: str
    # ok | failed | skipped (not reached) | reused (from the run being resumed)
    status: str
    seconds: float = 0.0
    summary: str = ""
    error: str | None = None
    result: Any = None
    run_dir: str | None = None

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "do": self.do,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "summary": self.summary,
            "error": self.error,
            "result": self.result,
            "run_dir": self.run_dir,
        }


@dataclass
class PlayResult(Result):
    play: str
    host: str
    run_id: str
    dry_run: bool
    steps: list[StepRecord] = field(default_factory=list)
    run_dir: str = ""

    @property
    def ok(self) -> bool:
        return all(s.status in ("ok", "reused") for s in self.steps)

    @property
    def failed(self) -> StepRecord | None:
        return next((s for s in self.steps if s.status == "failed"), None)

    @property
    def changed(self) -> bool:
        """Some step changed the host (its own result said so)."""
        return any(isinstance(s.result, dict) and bool(s.result.get("changed")) for s in self.steps)

    @property
    def plan(self) -> list[str]:
        """A dry run's steps, each with what it would do."""
        if not self.dry_run:
            return []
        return [
            f"{s.id}: {line}"
            for s in self.steps
            if isinstance(s.result, dict)
            for line in (s.result.get("plan") or [s.do])
        ]

    def payload(self) -> dict:
        return {
            "play": self.play,
            "host": self.host,
            "run_id": self.run_id,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "run_dir": self.run_dir,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass
class Written(Observation):
    """`inv report`'s answer: where the report page went (its view says so, and shows a sweep's table)."""

    path: Path

    def payload(self) -> dict:
        return {"path": str(self.path)}
