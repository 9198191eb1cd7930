"""A recorded bench run read back (bench.json and its manifest): what compare, identity and runconfig read.

Kept apart from sglops.bench.run (which measures and writes) and sglops.bench.compare (which judges) so that
the readers of a run import neither: no import circle in the bench family.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglops.core import artifacts
from sglops.core.errors import ConfigError

STANDIN_MARK = "SET BY THE STAND-IN"
STANDIN_NOTE = (
    "figures SET BY THE STAND-IN server (sglops' sandbox server said so in /server_info), not measured"
)


def standin(doc: dict | None) -> bool:
    """Were a run's figures set by sglops' stand-in server? The server said so itself: its /server_info
    answers `standin: true` (a real SGLang has no such key); a record keeps that answer as `launch_args`, and
    bench.json and its manifest carry it as `standin`. Never guessed from a host's name."""
    doc = doc or {}
    if "standin" in doc:
        return bool(doc["standin"])
    return (doc.get("launch_args") or {}).get("standin") is True


@dataclass
class Run:
    """A recorded bench run: its bench.json and manifest."""

    run_id: str
    host: str
    path: Path
    doc: dict

    @property
    def label(self) -> str:
        names = [p.get("patch") for p in self.doc.get("patches") or []]
        return f"{self.run_id}\n{'+'.join(names) if names else 'no patches'}"

    @property
    def standin(self) -> bool:
        return standin(self.doc)

    @property
    def ok(self) -> bool:
        return self.doc.get("status") == "ok"

    def level(self, concurrency: int, rate: float | None = None) -> dict | None:
        """The level at that concurrency (closed loop) or, with `rate`, the open-loop level at that rate."""
        return next(
            (
                lv
                for lv in self.doc["levels"]
                if lv["concurrency"] == concurrency and lv.get("request_rate") == rate
            ),
            None,
        )

    @property
    def sweep(self) -> dict | None:
        """A --sweep run's curve and knee (bench.json's `sweep`), None for a plain bench."""
        return self.doc.get("sweep")


def load(run_dir: str | Path) -> dict:
    """A recorded bench.json (for compare and re-analysis)."""
    path = Path(run_dir) / "bench.json"
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no bench.json (not a bench run?)")
    return artifacts.read_json(path)


def load_run(ref: str | Path) -> Run:
    path = artifacts.find_run(str(ref))
    doc = load(path)
    return Run(
        run_id=doc.get("run_id") or path.name, host=doc.get("host") or path.parent.name, path=path, doc=doc
    )
