"""The record of an `inv ab` run and its verdict: rounds,
paired speed figure, output identity, config, restore.

Speed: each round gives one figure per side (the median decode tok/s at the lowest concurrency); the ratio is
the median of the per-round B/A ratios with a paired bootstrap interval (sglops.bench.stats.paired_ratio_ci),
the verdict by `inv compare`'s rule and only from MIN_ROUNDS complete rounds. Outputs and config: every round
against A's first, through sglops.bench.compare (sglops.bench.identity, sglops.bench.runconfig).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.bench import stats
from sglops.core.errors import Failed, Interrupted, OutputsDiffer, SglopsError
from sglops.core.op import Draw, Page
from sglops.core.result import Result
from sglops.experiment.ab_plan import Found, Side, Step

# a paired interval over fewer rounds is the two ratios seen: no speed verdict
MIN_ROUNDS = 3


class AbFailed(Failed):
    """A round (or the restore) failed: what was measured is
    kept, the line says where and how the host was left."""


class AbInterrupted(Interrupted):
    """Ctrl-C / SIGTERM: the rounds stopped, the restore
    ran to its end; the line says how the host was left."""


@dataclass
class Round:
    round: int
    side: str
    run_id: str | None = None
    status: str = "not run"
    decode_tok_s: float | None = None
    # the ledger's, as the bench recorded it
    patches: list[str] = field(default_factory=list)
    restart_s: float | None = None
    bench_s: float | None = None
    error: str | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class AbResult(Result):
    """The ab run: plan, rounds, paired speed figure, output identity, config differences, restore."""

    host: str
    a: Side
    b: Side
    rounds_asked: int
    found: Found
    managed: list[str]
    plan: list[Step]
    bench: dict[str, Any]
    dry_run: bool = False
    run_id: str | None = None
    folder: str | None = None
    rounds: list[Round] = field(default_factory=list)
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    speed_verdict: str = "not measured"
    # B's first round vs A's first round (sglops.bench.identity), or None
    identity: dict | None = None
    identity_lines: list[str] = field(default_factory=list)
    identical: bool | None = None
    # A's rounds agree with each other (the server is deterministic)
    a_self_identical: bool | None = None
    # B vs A (sglops.bench.runconfig), unintended differences flagged
    config: dict | None = None
    unintended: list[str] = field(default_factory=list)
    variable: list[str] = field(default_factory=list)
    # comparison.json of every round against A's first
    comparison: str | None = None
    chart: str | None = None
    # side -> profile run id
    profiles: dict[str, str] = field(default_factory=dict)
    trace_diff: dict | None = None
    # {"ok", "steps", "error"?, "ledger"}
    restore: dict = field(default_factory=dict)
    failure: str | None = None
    # managed patch -> its files
    patch_files: dict[str, list[str]] = field(default_factory=dict)
    wall_s: float | None = None
    # the signal that stopped it (SIGINT, SIGTERM), also one deferred by the restore
    interrupted: str | None = None
    # the journal of an earlier ab cut short (sglops.experiment.ab_journal.Journal): taken over
    earlier: Any = None
    earlier_line: str | None = None
    # every node of the server ({host, node_rank}) when several
    nodes: list[dict] = field(default_factory=list)
    # each node's journal of an earlier run, or None
    earlier_by_node: dict[str, Any] = field(default_factory=dict)
    # the nodes' managed patches differed as found (an earlier run cut short between nodes)
    apart: bool = False

    @property
    def ok(self) -> bool:
        """Every round ran and the host was restored; a round whose timings were not clean ("partial": every
        request answered, its outputs compared, its speed left out) does not fail the ab."""
        return (
            self.failure is None
            and self.interrupted is None
            and all(r.status in ("ok", "partial") for r in self.rounds)
        )

    @property
    def unclean(self) -> list[Round]:
        return [r for r in self.rounds if r.status == "partial"]

    def run_manifest(self) -> dict:
        status = (
            "interrupted"
            if self.interrupted
            else ("failed" if not self.ok else "partial" if self.unclean else "ok")
        )
        return {
            "status": status,
            "ab": {
                "a": self.a.name,
                "b": self.b.name,
                "rounds": [x.run_id for x in self.rounds],
                "verdict": self.verdict(),
            },
        }

    def restore_line(self) -> str:
        """How the host was left: restored to what ab found,
        or not (and what the journal on the host says)."""
        if self.restore.get("ok"):
            return f"host restored ({self.found_line()})"
        return (
            f"HOST NOT RESTORED ({self.restore.get('error') or 'restore did not run'}); the journal on the"
            f" host keeps the state to restore ({self.found_line()}): the next `inv ab` restores it"
        )

    def verdict(self) -> str:
        """The one line: speed (paired), outputs, config."""
        if self.dry_run:
            return f"dry run: {len(self.plan)} steps planned, nothing changed or recorded"
        n = sum(1 for r in self.rounds if r.side == "B" and r.status == "ok")
        if self.ratio is not None:
            ci = f" [{self.ratio_ci[0]:.3f}, {self.ratio_ci[1]:.3f}]" if self.ratio_ci else ""
            speed = (
                f"B {self.speed_verdict} than A"
                if self.speed_verdict in ("faster", "slower")
                else self.speed_verdict
            )
            speed = f"{speed} (decode tok/s x{self.ratio:.3f}{ci}, paired over {n} round{'s' * (n != 1)})"
        else:
            speed = self.speed_verdict
        parts = [
            speed,
            *(f"round {r.round} {r.side}: {r.error}" for r in self.unclean),
            *(self.identity_lines or ["outputs not compared"]),
        ]
        if self.config is not None:
            parts.append(self.config.get("line") or "")
        out = "; ".join(p for p in parts if p)
        if self.failure:
            out = f"FAILED: {self.failure}; " + out
        return out

    @property
    def changed(self) -> bool:
        """Servers were restarted (and patches applied, then restored) for the rounds."""
        return not self.dry_run and bool(self.rounds)

    def plan_lines(self) -> list[str]:
        return [s.line() for s in self.plan]

    def payload(self) -> dict:
        return {
            "kind": "sglops-ab",
            "version": 1,
            "host": self.host,
            "run_id": self.run_id,
            "folder": self.folder,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "verdict": self.verdict(),
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "rounds_asked": self.rounds_asked,
            "order": "ABAB... (a restart before every bench)",
            "found": self.found.to_json(),
            "managed_patches": self.managed,
            "plan": [s.line() for s in self.plan],
            "bench": self.bench,
            "rounds": [r.to_json() for r in self.rounds],
            "speed": {
                "metric": "decode tok/s (each round's median at the lowest concurrency)",
                "ratio": self.ratio,
                "ratio_ci95": list(self.ratio_ci) if self.ratio_ci else None,
                "method": "median of per-round B/A ratios, paired bootstrap over rounds (2000, seeded)",
                "verdict": self.speed_verdict,
                "min_rounds": MIN_ROUNDS,
            },
            "identity": self.identity,
            "identity_lines": self.identity_lines,
            "identical": self.identical,
            "a_self_identical": self.a_self_identical,
            "config": self.config,
            "unintended": self.unintended,
            "variable": self.variable,
            "comparison": self.comparison,
            "chart": self.chart,
            "profiles": self.profiles,
            "trace_diff": self.trace_diff,
            "restore": self.restore,
            "failure": self.failure,
            "wall_s": self.wall_s,
            "interrupted": self.interrupted,
            "took_over": self.earlier.to_json() if self.earlier else None,
            "nodes": self.nodes,
        }

    def found_line(self) -> str:
        """What the host ran when the A/B began (and what restore brings back)."""
        f = self.found
        srv = f"server {f.profile} on port {f.port}" if f.running else "no sglops server running"
        return f"{srv}, patches {'+'.join(f.patches) or 'none'}"

    def check(self, require_identical: bool = False, require_same_config: bool = False) -> None:
        """Exit non-zero: a failed round or restore (1), or a
        required identity/sameness that does not hold (8)."""
        if self.dry_run:
            return
        if self.interrupted:
            import signal

            raise AbInterrupted(
                f"{self.host}: ab {self.run_id} interrupted ({self.interrupted}):"
                f" {self.failure or 'the signal came during the restore, which ran to its end'};"
                f" {self.restore_line()}; measured rounds kept in {self.folder}",
                int(signal.Signals[self.interrupted]),
            )
        if not self.ok:
            raise AbFailed(
                f"{self.host}: ab {self.run_id}: {self.failure or 'a round is not a clean bench'}; "
                f"measured rounds kept in {self.folder}"
            )
        bad = []
        if require_identical and not self.identical:
            bad.append("; ".join(self.identity_lines) or "outputs not recorded")
        if require_same_config and self.unintended:
            bad.append((self.config or {}).get("line") or "config differs")
        if bad:
            raise OutputsDiffer(f"{self.host}: ab {self.run_id}: " + "; ".join(bad))


def analyze(
    result: AbResult, variable: list[str] | str | None, tolerance: Any, draw: Draw | None = None
) -> None:
    """Paired speed figure, then identity and config of
    every round against A's first (sglops.bench.compare)."""
    from sglops.bench import compare as cmp
    from sglops.bench.runconfig import normalise_variable

    result.variable = normalise_variable(variable)
    pairs = [
        (x, y)
        for x, y in zip(
            [r for r in result.rounds if r.side == "A"],
            [r for r in result.rounds if r.side == "B"],
            strict=False,
        )
        if x.status == y.status == "ok" and x.decode_tok_s and y.decode_tok_s
    ]
    paired = stats.paired_ratio_ci([x.decode_tok_s for x, _ in pairs], [y.decode_tok_s for _, y in pairs])
    if paired:
        result.ratio, result.ratio_ci = paired
    if result.ratio is None:
        result.speed_verdict = "no speed figure (no complete round)"
    elif len(pairs) < MIN_ROUNDS:
        result.speed_verdict = f"too few rounds for a speed verdict ({len(pairs)} < {MIN_ROUNDS})"
    else:
        result.speed_verdict = cmp.verdict(result.ratio, result.ratio_ci, True, result.ok)
    runs = [r for r in result.rounds if r.status in ("ok", "partial") and r.run_id]
    a_runs = [r.run_id for r in runs if r.side == "A"]
    b_runs = [r.run_id for r in runs if r.side == "B"]
    if not a_runs or not b_runs:
        return
    comp = cmp.compare(
        [a_runs[0], *a_runs[1:], *b_runs],
        out_dir=Path(result.folder or "."),
        tolerance=tolerance,
        variable=result.variable,
        draw=draw,
    )
    result.comparison, result.chart = comp.saved, comp.chart
    b_ids = [comp.identities.get(x) for x in b_runs]
    a_ids = [comp.identities.get(x) for x in a_runs[1:]]
    if any(v is None for v in b_ids):
        result.identity_lines = ["outputs not recorded (this bench keeps no outputs)"]
    else:
        first_bad = next((v for v in b_ids if not v.within_tolerance), None)
        shown = first_bad or b_ids[0]
        result.identity = shown.to_json()
        result.identical = first_bad is None
        where = "B vs A" + (f", {len(b_ids)} rounds" if len(b_ids) > 1 else "")
        result.identity_lines = [f"{shown.line()} ({where})"]
        if first_bad is not None and first_bad.first_divergence:
            result.identity_lines.append(f"first divergence: {first_bad.first_divergence.describe()}")
    if a_ids and all(v is not None for v in a_ids):
        result.a_self_identical = all(v.within_tolerance for v in a_ids)
        if not result.a_self_identical:
            result.identity_lines.append(
                "A's own rounds differ from each other: the server is not deterministic "
                "here, so a B difference may not be the change"
            )
    cfg = comp.configs.get(b_runs[0])
    if cfg is not None:
        result.config = cfg.to_json()
        result.unintended = [d.key for d in cfg.unintended]
    a_cfg = [comp.configs.get(x) for x in a_runs[1:]]
    drift = sorted({d.key for c in a_cfg if c for d in c.differences})
    if drift:
        result.identity_lines.append(f"A's rounds served different configs ({', '.join(drift)})")


def add_trace_diff(result: AbResult, prof: dict[str, Any], draw: Draw | None = None) -> None:
    """The diff-trace ranking of A's profile against B's, kept in ab.json (and its markdown beside it, drawn
    by `draw`, the views a runner hands down)."""
    from sglops.trace.diff import diff

    try:
        d = diff(prof["A"].analysis, prof["B"].analysis, labels=(f"A {result.a.name}", f"B {result.b.name}"))
    except SglopsError as exc:
        result.trace_diff = {"error": str(exc)}
        return
    path = draw(Page(d), Path(result.folder or ".") / "trace-diff.md") if draw else None
    result.trace_diff = {
        "headline": d.headline(),
        "markdown": str(path) if path else None,
        "a": result.profiles.get("A"),
        "b": result.profiles.get("B"),
        "diff": d.to_json(),
    }
