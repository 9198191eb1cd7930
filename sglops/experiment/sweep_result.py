"""The record of an `inv sweep`: one row per candidate,
the recommendation, the wall-time split and the restore.

A row is what happened to one candidate: skipped (and why, from the probe facts), forced past that, started or
crashed (the crash class and the log line that shows it), its bench's decode tok/s with the 95% interval, its
outputs against the baseline candidate's (the first that started) and, when profiled, the trace's top cost.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, fields
from typing import Any

from sglops.core.errors import Failed, Interrupted
from sglops.core.result import Result
from sglops.experiment.ab_plan import Found
from sglops.experiment.sweep_plan import Candidate


class SweepFailed(Failed):
    """The sweep could not finish (or the host could not be restored): what was measured is kept."""


class SweepInterrupted(Interrupted):
    """Ctrl-C or SIGTERM stopped the candidates; the host was restored first and what was measured is kept."""


def _known(cls: type, doc: dict) -> dict:
    """The fields of dataclass `cls` that a recorded JSON document carries (a record from an older sglops may
    lack some; extra keys such as `outcome` are derived, not stored)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in doc.items() if k in names}


@dataclass
class Row:
    """One candidate's outcome."""

    candidate: Candidate
    # planned | skipped | started | crashed | bench failed | not run
    status: str = "planned"
    # why the probe facts rule it out (skipped, or forced past)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    forced: bool = False
    q_quantised: bool = False
    # its bench run (or its failed start's record)
    run_id: str | None = None
    # the failure class (sglops.launch: invalid argument, import failed, ...)
    crash: str | None = None
    crash_label: str | None = None
    # the log line that shows it
    crash_line: str | None = None
    # a candidate setting the server replaced: key -> effective
    served_as: dict[str, Any] = field(default_factory=dict)
    decode_tok_s: float | None = None
    ci95: list[float] | None = None
    # identical | differs | differs by design | baseline | not compared
    identity: str | None = None
    identity_line: str | None = None
    # the first differing token's index
    first_token: int | None = None
    max_dlogprob: float | None = None
    top_cost: str | None = None
    profile_run: str | None = None
    restart_s: float | None = None
    bench_s: float | None = None
    profile_s: float | None = None
    error: str | None = None

    def outcome(self) -> str:
        """The second column: skipped with why, started, or the crash class with its log line."""
        if self.status == "skipped":
            return "skipped: " + "; ".join(self.reasons)
        if self.status == "crashed":
            return f"crashed: {self.crash_label or self.crash}" + (
                f": {self.crash_line}" if self.crash_line else ""
            )
        fell = ", ".join(
            f"{k}={v} (asked {dict(self.candidate.settings)[k]})" for k, v in self.served_as.items()
        )
        started = f"started, but the server runs {fell}: not the candidate asked for" if fell else "started"
        if self.status == "bench failed":
            return f"{started}; bench failed: {self.error}"
        return started if self.status == "started" else self.status

    def speed(self) -> str:
        if self.decode_tok_s is None:
            return "-"
        ci = f" [{self.ci95[0]:.1f}, {self.ci95[1]:.1f}]" if self.ci95 and None not in self.ci95 else ""
        return f"{self.decode_tok_s:.1f}{ci}"

    def outputs(self) -> str:
        if self.identity is None:
            return "-"
        if self.identity in ("differs", "differs by design") and self.first_token is not None:
            lp = f", max |dlogprob| {self.max_dlogprob:.3g}" if self.max_dlogprob else ""
            return f"{self.identity} at token {self.first_token}{lp}"
        return self.identity

    def to_json(self) -> dict:
        return {
            **{k: v for k, v in self.__dict__.items() if k != "candidate"},
            "candidate": self.candidate.to_json(),
            "outcome": self.outcome(),
        }

    @classmethod
    def from_json(cls, doc: dict) -> Row:
        """A row back from sweep.json (`inv report` draws the
        recorded table with the same code as `inv sweep`)."""
        c = doc.get("candidate") or {}
        cand = Candidate(
            int(c.get("index") or 0), tuple((c.get("settings") or {}).items()), tuple(c.get("patches") or ())
        )
        return cls(**{**_known(cls, doc), "candidate": cand})


@dataclass
class SweepResult(Result):
    """The sweep: its plan, one row per candidate, the recommendation, the wall-time split and the restore."""

    host: str
    profile: str
    sglang_version: str | None
    compute_capability: str | None
    found: Found
    rows: list[Row]
    bench: dict[str, Any]
    managed: list[str]
    force: bool = False
    profile_trace: bool = False
    dry_run: bool = False
    plan: list[str] = field(default_factory=list)
    run_id: str | None = None
    folder: str | None = None
    # the baseline candidate's run id
    baseline: str | None = None
    comparison: str | None = None
    # the comparison's decode tok/s chart (the sweep's folder)
    chart: str | None = None
    # candidates x load levels: tokens/s per user vs per GPU, the frontier (bench.pareto)
    pareto: dict | None = None
    restore: dict = field(default_factory=dict)
    failure: str | None = None
    wall_s: float | None = None
    # restarts / benches / profiles / tool
    split: dict[str, float] = field(default_factory=dict)
    # the signal that stopped the candidates (SIGINT, SIGTERM), or one the restore deferred
    interrupted: str | None = None
    # every node of the server ({host, node_rank}) when several
    nodes: list[dict] = field(default_factory=list)
    # an earlier ab or sweep cut short on the host, taken over (its found state)
    earlier_line: str | None = None
    # each node's journal of that run, or None
    earlier_by_node: dict[str, Any] = field(default_factory=dict)
    # each node's ledger as the sweep began
    now_patches: dict[str, list[str]] = field(default_factory=dict)
    # managed patch -> its files
    patch_files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return not self.dry_run and any(r.status not in ("planned", "skipped") for r in self.rows)

    @property
    def ok(self) -> bool:
        return (
            self.failure is None and self.interrupted is None and bool(self.restore.get("ok", self.dry_run))
        )

    def run_manifest(self) -> dict:
        """Beside sweep.json (recorded by the runner): how it ended and each candidate's own run."""
        return {
            "status": "interrupted" if self.interrupted else ("ok" if self.ok else "failed"),
            "sweep": {
                "candidates": [r.candidate.label for r in self.rows],
                "runs": [r.run_id for r in self.rows if r.run_id],
                "recommendation": self.recommendation(),
            },
        }

    @classmethod
    def from_json(cls, doc: dict) -> SweepResult:
        """The result back from a recorded sweep.json (its views
        draw a recorded sweep as they drew the live one)."""
        found = doc.get("found") or {}
        kw = _known(cls, {**doc, "managed": doc.get("managed_patches") or []})
        return cls(
            **{
                **kw,
                "found": Found(
                    bool(found.get("running")),
                    found.get("profile"),
                    found.get("port"),
                    list(found.get("patches") or []),
                ),
                "rows": [Row.from_json(r) for r in doc.get("rows") or []],
                "bench": doc.get("bench") or {},
                "plan": list(doc.get("plan") or []),
            }
        )

    def measured(self) -> list[Row]:
        return [r for r in self.rows if r.decode_tok_s is not None]

    def recommendation(self) -> str:
        """Fastest candidate whose outputs are identical to the baseline's, and the fastest overall."""
        if self.dry_run:
            n = sum(1 for r in self.rows if r.status == "planned")
            return f"dry run: {n} of {len(self.rows)} candidate(s) would run; nothing changed or recorded"
        rows = self.measured()
        if not rows:
            return "no recommendation: no candidate started and benched"
        # a fallback is some other candidate's configuration
        rows = [r for r in rows if not r.served_as] or rows
        fastest = max(rows, key=lambda r: r.decode_tok_s or 0)
        same = [r for r in rows if r.identity in ("identical", "baseline") and not r.served_as]
        best = max(same, key=lambda r: r.decode_tok_s or 0) if same else None
        parts = [
            (
                f"fastest with outputs identical to the baseline: {best.candidate.label} ({best.speed()}"
                " tok/s)"
                if best
                else "no candidate's outputs are identical to the baseline's"
            )
        ]
        if best is not fastest:
            parts.append(
                f"fastest overall: {fastest.candidate.label} ({fastest.speed()} tok/s, outputs "
                f"{fastest.outputs()})"
            )
        else:
            parts.append("it is also the fastest overall")
        return "; ".join(parts)

    def split_line(self) -> str:
        if not self.split:
            return ""
        s = self.split
        return (
            f"wall {self.wall_s:.1f} s: restarts {s.get('restarts', 0):.1f} s, benches"
            f" {s.get('benches', 0):.1f} s, profiles {s.get('profiles', 0):.1f} s, the tool's own steps"
            f" {s.get('tool', 0):.1f} s"
        )

    def restore_line(self) -> str:
        """How the host was left: restored to what the sweep found, or not (and why)."""
        r = self.restore or {}
        if r.get("ok"):
            return f"host restored: {r.get('server') or 'as found'}"
        return f"HOST NOT RESTORED: {r.get('error') or 'the restore did not run'}"

    def skipped(self) -> list[Row]:
        """Candidates the probe facts (or the render) ruled out before anything started."""
        return [r for r in self.rows if r.status == "skipped"]

    def payload(self) -> dict:
        return {
            "kind": "sglops-sweep",
            "version": 1,
            "host": self.host,
            "profile": self.profile,
            "sglang_version": self.sglang_version,
            "compute_capability": self.compute_capability,
            "found": self.found.to_json(),
            "managed_patches": self.managed,
            "bench": self.bench,
            "force": self.force,
            "profile_trace": self.profile_trace,
            "run_id": self.run_id,
            "folder": self.folder,
            "baseline": self.baseline,
            "rows": [r.to_json() for r in self.rows],
            "recommendation": self.recommendation(),
            "comparison": self.comparison,
            "chart": self.chart,
            "pareto": self.pareto,
            "restore": self.restore,
            "failure": self.failure,
            "wall_s": self.wall_s,
            "split": self.split,
            "interrupted": self.interrupted,
            "ok": self.ok,
            "nodes": self.nodes,
            "earlier_line": self.earlier_line,
        }

    def check(self) -> None:
        """Exit non-zero when the sweep failed or the host
        was not restored (skips and crashes are results)."""
        if self.dry_run:
            return
        if self.interrupted:
            raise SweepInterrupted(
                f"{self.host}: sweep {self.run_id} interrupted ({self.interrupted}): "
                f"{self.failure or 'the signal came during the restore, which ran to its end'}; "
                f"{self.restore_line()}; kept in {self.folder}",
                int(signal.Signals[self.interrupted]),
            )
        if not self.ok:
            raise SweepFailed(
                f"{self.host}: sweep {self.run_id}: "
                f"{self.failure or 'restore failed: ' + str(self.restore.get('error'))}; "
                f"kept in {self.folder}"
            )


@dataclass
class FailedStart:
    """A candidate that did not come up, as a run of its own (`<sweep-run>-c<N>/restart.json`): the restart's
    record, its manifest naming the sweep; the runner's keep() records it as it records every run."""

    # sglops.launch.results.RestartResult
    restart: Any
    sweep_run: str

    def to_json(self) -> dict:
        return self.restart.to_json()

    def run_manifest(self) -> dict:
        return {"status": "failed", "sweep": self.sweep_run}
