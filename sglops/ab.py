"""`inv ab`: interleaved A/B rounds on one host, one verdict for speed, output identity and config.

Why interleaved: two benches an hour apart measure the change AND whatever drifted in that hour
(clocks, thermals, a neighbour's job). Rounds run A, B, A, B, ... with a restart (and the patch set
each side needs, applied or reverted and checked in the host ledger) before every bench, so drift
hits both sides; the ratio is taken within each round and bootstrapped over rounds (a paired
bootstrap, sglops.stats.paired_ratio_ci). Each round is an ordinary bench run (`inv compare`,
`inv runs`, `inv report` work on it); the ab run folder references them. The host is left as it
was found (profile, port, patch set), also when a round fails.

A side is `PROFILE`, `PROFILE+PATCH[+PATCH...]`, or `+PATCH...` (the profile the host's sglops
server runs now). Patches named on either side are the ones ab manages: each side gets exactly its
own; patches found applied and named on neither side stay as they are throughout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sglops import artifacts, stats
from sglops.errors import ConfigError, Failed, OutputsDiffer, SglopsError
from sglops.remote import Remote

MIN_ROUNDS = 3  # a paired interval over fewer rounds is the two ratios seen: no speed verdict
SIDES = ("A", "B")


class AbFailed(Failed):
    """A round (or the restore) failed: what was measured is kept, the line says where and how the host was left."""


# -- sides and the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    """One side of the A/B: a profile and the patches (of those ab manages) it runs with."""

    label: str
    spec: str
    profile: str
    patches: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.profile + "".join(f"+{p}" for p in self.patches)

    def to_json(self) -> dict:
        return {"label": self.label, "spec": self.spec, "profile": self.profile, "patches": list(self.patches)}


def parse_side(text: str) -> tuple[str | None, tuple[str, ...]]:
    """`PROFILE[+PATCH...]` or `+PATCH...` -> (profile or None for the current one, patches)."""
    from sglops.values import Name

    raw = (text or "").strip()
    if raw == "+":  # the current profile, no patch of its own (`--patch P` without --a)
        return None, ()
    if not raw:
        raise ConfigError("a side is PROFILE, PROFILE+PATCH[+PATCH...] or +PATCH (empty side given)")
    profile, *patches = raw.split("+")
    profile = profile.strip() or None
    names = tuple(p.strip() for p in patches)
    if any(not p for p in names):
        raise ConfigError(f"side {text!r}: an empty patch name (write PROFILE+PATCH or +PATCH)")
    if len(set(names)) != len(names):
        raise ConfigError(f"side {text!r} names a patch twice")
    for p in names:
        Name("patch").parse(p, f"side {text!r}: patch")
    if profile is not None:
        Name("profile").parse(profile, f"side {text!r}: profile")
    return profile, names


def sides_from(a: str | None, b: str | None, patch: str | None) -> tuple[str, str]:
    """The two side specs from --a/--b/--patch: `--patch P` is B = A plus P (A default: the current profile)."""
    if patch:
        if b:
            raise ConfigError("--patch P means B = A plus P: give --a (optional) and --patch, not --b")
        base = (a or "").strip()
        return base or "+", f"{base}+{patch}"
    if not a or not b:
        raise ConfigError("give both sides (--a SIDE --b SIDE) or --patch P (this profile without vs with P)")
    return a, b


@dataclass
class Found:
    """The host as ab found it: the sglops server (profile, port) and the ledger's patches."""

    running: bool
    profile: str | None
    port: int | None
    patches: list[str]

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Step:
    """One entry of the round plan: what is done to the host, for which round and side."""

    kind: str  # revert | apply | restart | bench | profile | stop
    what: str
    round: int | None = None  # 1-based; None for the restore
    side: str | None = None

    def line(self) -> str:
        where = f"round {self.round} {self.side}" if self.round else "restore"
        return f"{where}: {self.kind} {self.what}".rstrip()


def _transitions(have: set[str], want: set[str], managed: list[str]) -> list[tuple[str, str]]:
    """Reverts first (an unwanted patch may touch the files a wanted one needs), then applies."""
    return ([("revert", p) for p in managed if p in have and p not in want]
            + [("apply", p) for p in managed if p in want and p not in have])


def plan_steps(a: Side, b: Side, rounds: int, found: Found, managed: list[str], *, profile_sides: bool,
               bench_what: str) -> list[Step]:
    """Every step in order: per round A then B (patches, restart, bench, [profile]), then the restore."""
    steps: list[Step] = []
    have = {p for p in found.patches if p in managed}
    for r in range(1, rounds + 1):
        for side in (a, b):
            for kind, p in _transitions(have, set(side.patches), managed):
                steps.append(Step(kind, p, r, side.label))
            have = set(side.patches)
            steps.append(Step("restart", side.profile, r, side.label))
            steps.append(Step("bench", bench_what, r, side.label))
            if profile_sides and r == 1:
                steps.append(Step("profile", "one single-stream decode (torch profiler)", r, side.label))
    for kind, p in _transitions(have, {p for p in found.patches if p in managed}, managed):
        steps.append(Step(kind, p))
    if found.running:
        steps.append(Step("restart", f"{found.profile} (port {found.port}): the server the host ran before"))
    else:
        steps.append(Step("stop", "the server (none was running before)"))
    return steps


# -- the result ---------------------------------------------------------------------------------------
@dataclass
class Round:
    round: int
    side: str
    run_id: str | None = None
    status: str = "not run"
    decode_tok_s: float | None = None
    patches: list[str] = field(default_factory=list)  # the ledger's, as the bench recorded it
    restart_s: float | None = None
    bench_s: float | None = None
    error: str | None = None

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class AbResult:
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
    identity: dict | None = None  # B's first round vs A's first round (sglops.identity), or None
    identity_lines: list[str] = field(default_factory=list)
    identical: bool | None = None
    a_self_identical: bool | None = None  # A's rounds agree with each other (the server is deterministic)
    config: dict | None = None  # B vs A (sglops.runconfig), unintended differences flagged
    unintended: list[str] = field(default_factory=list)
    variable: list[str] = field(default_factory=list)
    comparison: str | None = None  # comparison.json of every round against A's first
    chart: str | None = None
    profiles: dict[str, str] = field(default_factory=dict)  # side -> profile run id
    trace_diff: dict | None = None
    restore: dict = field(default_factory=dict)  # {"ok", "steps", "error"?, "ledger"}
    failure: str | None = None
    wall_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and all(r.status == "ok" for r in self.rounds)

    def verdict(self) -> str:
        """The one line: speed (paired), outputs, config."""
        if self.dry_run:
            return f"dry run: {len(self.plan)} steps planned, nothing changed or recorded"
        n = sum(1 for r in self.rounds if r.side == "B" and r.status == "ok")
        if self.ratio is not None:
            ci = f" [{self.ratio_ci[0]:.3f}, {self.ratio_ci[1]:.3f}]" if self.ratio_ci else ""
            speed = f"B {self.speed_verdict} than A" if self.speed_verdict in ("faster", "slower") else \
                self.speed_verdict
            speed = f"{speed} (decode tok/s x{self.ratio:.3f}{ci}, paired over {n} round{'s' * (n != 1)})"
        else:
            speed = self.speed_verdict
        parts = [speed, *(self.identity_lines or ["outputs not compared"])]
        if self.config is not None:
            parts.append(self.config.get("line") or "")
        out = "; ".join(p for p in parts if p)
        if self.failure:
            out = f"FAILED: {self.failure}; " + out
        return out

    def to_json(self) -> dict:
        return {"kind": "sglops.ab", "version": 1, "host": self.host, "run_id": self.run_id, "folder": self.folder,
                "dry_run": self.dry_run, "ok": self.ok, "verdict": self.verdict(),
                "a": self.a.to_json(), "b": self.b.to_json(), "rounds_asked": self.rounds_asked,
                "order": "ABAB... (a restart before every bench)", "found": self.found.to_json(),
                "managed_patches": self.managed, "plan": [s.line() for s in self.plan], "bench": self.bench,
                "rounds": [r.to_json() for r in self.rounds],
                "speed": {"metric": "decode tok/s (each round's median at the lowest concurrency)",
                          "ratio": self.ratio, "ratio_ci95": list(self.ratio_ci) if self.ratio_ci else None,
                          "method": "median of per-round B/A ratios, paired bootstrap over rounds (2000, seeded)",
                          "verdict": self.speed_verdict, "min_rounds": MIN_ROUNDS},
                "identity": self.identity, "identity_lines": self.identity_lines, "identical": self.identical,
                "a_self_identical": self.a_self_identical, "config": self.config, "unintended": self.unintended,
                "variable": self.variable, "comparison": self.comparison, "chart": self.chart,
                "profiles": self.profiles, "trace_diff": self.trace_diff, "restore": self.restore,
                "failure": self.failure, "wall_s": self.wall_s}

    def table(self) -> Group:
        title = (f"ab on {self.host}: A = {self.a.name}, B = {self.b.name}, {self.rounds_asked} round(s) ABAB"
                 + (f"  run {self.run_id}" if self.run_id else ""))
        if self.dry_run:
            t = Table(title=title + " (dry run)", title_justify="left", show_header=False, box=None)
            for s in self.plan:
                t.add_row(Text("would", style="dim"), Text(s.line()))
            return Group(t, Text(f"found: {self._found_line()}", style="dim"), Text(self.verdict(), style="bold"))
        t = Table(title=title, title_justify="left")
        for col in ("round", "side", "run", "status", "decode tok/s", "patches (ledger)"):
            t.add_column(col, justify="right" if col in ("round", "decode tok/s") else "left")
        for r in self.rounds:
            t.add_row(str(r.round), r.side, r.run_id or "-", Text(r.status, style="green" if r.status == "ok" else
                                                                    "bold red"),
                      f"{r.decode_tok_s:.2f}" if r.decode_tok_s else "-", "+".join(r.patches) or "none")
        good = self.ok and self.identical is not False and not self.unintended
        lines: list[Any] = [t, Text(self.verdict(), style="bold green" if good else "bold red")]
        if self.trace_diff:
            lines.append(Text(f"trace diff (A -> B): {self.trace_diff.get('headline')}"))
        restore = self.restore or {}
        if restore:
            lines.append(Text(("host restored: " if restore.get("ok") else "HOST NOT RESTORED: ")
                              + (restore.get("error") or self._found_line()),
                              style="dim" if restore.get("ok") else "bold red"))
        if self.folder:
            lines.append(Text(f"saved {self.folder}/ab.json" + (f", chart {self.chart}" if self.chart else ""),
                              style="dim"))
        return Group(*lines)

    def _found_line(self) -> str:
        f = self.found
        srv = f"server {f.profile} on port {f.port}" if f.running else "no sglops server running"
        return f"{srv}, patches {'+'.join(f.patches) or 'none'}"

    def check(self, require_identical: bool = False, require_same_config: bool = False) -> None:
        """Exit non-zero: a failed round or restore (1), or a required identity/sameness that does not hold (8)."""
        if self.dry_run:
            return
        if not self.ok:
            raise AbFailed(f"{self.host}: ab {self.run_id}: {self.failure or 'a round is not a clean bench'}; "
                           f"measured rounds kept in {self.folder}")
        bad = []
        if require_identical and not self.identical:
            bad.append("; ".join(self.identity_lines) or "outputs not recorded")
        if require_same_config and self.unintended:
            bad.append((self.config or {}).get("line") or "config differs")
        if bad:
            raise OutputsDiffer(f"{self.host}: ab {self.run_id}: " + "; ".join(bad))


# -- running it ---------------------------------------------------------------------------------------
def _found(remote: Remote) -> Found:
    from sglops import launch, patches

    cur = launch.inspect(remote)["current"]
    srv = cur.get("server") or {}
    return Found(running=bool(cur.get("running")), profile=srv.get("profile"),
                 port=int(srv["port"]) if srv.get("port") else None,
                 patches=[e["patch"] for e in patches.applied(remote)])


def resolve_sides(a_spec: str, b_spec: str, found: Found) -> tuple[Side, Side, list[str]]:
    """Sides with their profiles resolved (the current one for `+P`) and checked; the managed patches."""
    from sglops import patch_spec
    from sglops.launch_profiles import load_profile

    sides = []
    for label, spec in zip(SIDES, (a_spec, b_spec), strict=True):
        prof, names = parse_side(spec)
        if prof is None:
            if not found.running or not found.profile:
                raise ConfigError(f"side {label} ({spec!r}) means the current profile, but no server started by "
                                  "sglops runs on the host: name the profile (PROFILE+PATCH)")
            prof = found.profile
        load_profile(prof)
        for p in names:
            patch_spec.load(p)
        sides.append(Side(label, spec, prof, names))
    managed = list(dict.fromkeys([*sides[0].patches, *sides[1].patches]))
    return sides[0], sides[1], managed


def _ledger_check(remote: Remote, managed: list[str], want: set[str], when: str) -> list[str]:
    """The ledger must say exactly `want` of the managed patches, each file still as its patch left it."""
    from sglops import patch_spec, patches

    files = sorted({f for p in managed for f in patch_spec.load(p).files})
    state = patches.host_state(remote, files, contents=False)
    entries = {e["patch"]: e for e in state["ledger"].get("applied", [])}
    have = {p for p in managed if p in entries}
    if have != want:
        raise AbFailed(f"{remote.name}: {when}: the host ledger has {sorted(have) or 'none'} of the managed patches, "
                       f"this step needs {sorted(want) or 'none'}")
    for p in want:
        drift = [rel for rel, h in entries[p]["files"].items() if state["files"].get(rel, {}).get("sha256") != h["after"]]
        if drift:
            raise AbFailed(f"{remote.name}: {when}: {p} is in the ledger but {', '.join(drift)} changed since it "
                           "was applied")
    return sorted(entries)


def _precheck_patches(remote: Remote, managed: list[str], found: Found) -> None:
    """Each managed patch's own dry run (apply if absent, revert if applied): a conflict, an unmet requirement or
    drift refuses here, before round 1 changes anything."""
    from sglops import patches

    for p in managed:
        if p in found.patches:
            patches.revert_patch(remote, p, dry_run=True)
        else:
            patches.apply_patch(remote, p, dry_run=True)


def _converge(remote: Remote, managed: list[str], want: set[str], when: str, say: Callable[[str], None]) -> None:
    """Apply/revert managed patches until the ledger says `want`, then check it says so."""
    from sglops import patches

    have = {e["patch"] for e in patches.applied(remote)}
    for kind, p in _transitions(have, want, managed):
        say(f"{when}: {kind} {p}")
        if kind == "apply":
            patches.apply_patch(remote, p)
        else:
            patches.revert_patch(remote, p)
    _ledger_check(remote, managed, want, when)


def _restart(remote: Remote, profile: str, port: int | None, when: str, say: Callable[[str], None]) -> float:
    from sglops import launch

    say(f"{when}: restart {profile}")
    t0 = time.monotonic()
    res = launch.restart(remote, profile, port=port)
    if not res.ok:
        raise AbFailed(res.failure_line(when))
    return time.monotonic() - t0


def run_ab(
    remote: Remote,
    a: str | None,
    b: str | None,
    *,
    patch: str | None = None,
    rounds: int = MIN_ROUNDS,
    bench: dict[str, Any] | None = None,
    profile_sides: bool = False,
    variable: list[str] | str | None = None,
    tolerance: Any = None,
    dry_run: bool = False,
    say: Callable[[str], None] | None = None,
) -> AbResult:
    """Run (or plan, with dry_run) the interleaved A/B on one host; the host is restored in every case.

    bench: run_bench's options (runs per round, lengths, concurrency, api, ...). A failing round stops the
    rounds; the result then carries `failure` and check() exits non-zero, after everything measured is
    recorded and the host restored.
    """
    from sglops import bench as bench_mod
    from sglops import launch

    say = say or (lambda _text: None)
    opts = {k: v for k, v in (bench or {}).items() if v is not None and k != "port"}
    a_spec, b_spec = sides_from(a, b, patch)
    rounds = int(rounds)
    if rounds < 1:
        raise ConfigError(f"--rounds must be at least 1 (got {rounds})")
    found = _found(remote)
    side_a, side_b, managed = resolve_sides(a_spec, b_spec, found)
    for prof in dict.fromkeys([side_a.profile, side_b.profile]):
        launch.render_for(remote, prof)  # a profile this host cannot run fails here, before anything changes
    _precheck_patches(remote, managed, found)
    what = (f"{opts.get('runs', 1)} repeat(s), in {opts.get('input_len', 128)} / out {opts.get('output_len', 256)}, "
            f"concurrency {opts.get('concurrency', [1])}")
    steps = plan_steps(side_a, side_b, rounds, found, managed, profile_sides=profile_sides, bench_what=what)
    result = AbResult(host=remote.name, a=side_a, b=side_b, rounds_asked=rounds, found=found, managed=managed,
                      plan=steps, bench=opts, dry_run=dry_run)
    if dry_run:
        return result
    t_start = time.monotonic()
    result.run_id = artifacts.new_run_id()
    result.folder = str(artifacts.run_dir(remote.name, result.run_id))
    prof_results: dict[str, Any] = {}
    try:
        for r in range(1, rounds + 1):
            for side in (side_a, side_b):
                when = f"round {r}/{rounds} {side.label}"
                rnd = Round(r, side.label, run_id=f"{result.run_id}-r{r}{side.label.lower()}")
                result.rounds.append(rnd)
                try:
                    _converge(remote, managed, set(side.patches), when, say)
                    rnd.restart_s = round(_restart(remote, side.profile, None, when, say), 1)
                    say(f"{when}: bench")
                    t0 = time.monotonic()
                    res = bench_mod.run_bench(remote, **{"runs": 1, **opts})
                    bench_mod.record(res, run_id=rnd.run_id)
                    rnd.bench_s = round(time.monotonic() - t0, 1)
                    rnd.status = res.status
                    head = res.headline()
                    rnd.decode_tok_s = head["median"] if head else None
                    rnd.patches = [p.get("patch") for p in res.patches]
                    got = {p for p in rnd.patches if p in managed}
                    if got != set(side.patches):
                        raise AbFailed(f"{when}: the bench recorded patches {sorted(got)} of the managed ones, "
                                       f"side {side.label} needs {sorted(side.patches)}")
                    if res.status != "ok":
                        raise AbFailed(f"{when}: bench run {rnd.run_id} is {res.status}: "
                                       + ("; ".join(res.problems()) or "not a clean figure"))
                    if profile_sides and r == 1:
                        from sglops.profile import run_profile

                        say(f"{when}: profile")
                        prof_results[side.label] = run_profile(remote, show_progress=False, chart=True,
                                                               run_id=f"{result.run_id}-profile-{side.label.lower()}")
                        result.profiles[side.label] = prof_results[side.label].run_id
                except SglopsError as exc:
                    rnd.status = "failed" if rnd.status in ("not run", "ok") else rnd.status
                    rnd.error = str(exc)
                    raise
    except SglopsError as exc:
        result.failure = str(exc)
    finally:  # also on Ctrl-C: the host goes back to how it was found
        result.restore = _restore(remote, found, managed, say)
        if not result.restore.get("ok"):
            result.failure = "; ".join(x for x in (result.failure, "restore failed: " + str(result.restore.get("error")))
                                       if x)
        result.wall_s = round(time.monotonic() - t_start, 1)
        try:
            _analyse(result, variable, tolerance)
            if len(prof_results) == 2:
                _trace_diff(result, prof_results)
        except SglopsError as exc:  # the rounds are recorded whatever the analysis says
            result.identity_lines.append(f"analysis failed: {exc}")
        artifacts.save(remote.name, result.run_id, "ab.json", result.to_json(), task="ab",
                       extra={"status": "ok" if result.ok else "failed", "ab": {
                           "a": side_a.name, "b": side_b.name, "rounds": [x.run_id for x in result.rounds],
                           "verdict": result.verdict()}})
    return result


def _restore(remote: Remote, found: Found, managed: list[str], say: Callable[[str], None]) -> dict:
    """Put the found patch set and server back; never raises (its outcome is recorded and shown)."""
    from sglops import launch, patches

    want = {p for p in found.patches if p in managed}
    out: dict[str, Any] = {"ok": False, "patches": sorted(want)}
    try:
        _converge(remote, managed, want, "restore", say)
        if found.running and found.profile:
            _restart(remote, found.profile, found.port, "restore", say)
            out["server"] = f"{found.profile} on port {found.port}"
        else:
            say("restore: stop the server (none was running before)")
            launch.stop(remote)
            out["server"] = "stopped (none was running before)"
        out["ledger"] = [e["patch"] for e in patches.applied(remote)]
        out["ok"] = sorted(out["ledger"]) == sorted(found.patches)
        if not out["ok"]:
            out["error"] = f"ledger has {out['ledger']}, found {found.patches}"
    except (SglopsError, OSError) as exc:
        out["error"] = str(exc)
    return out


def _analyse(result: AbResult, variable: list[str] | str | None, tolerance: Any) -> None:
    """Paired speed figure, then identity and config of every round against A's first (sglops.compare)."""
    from sglops import compare as cmp
    from sglops.runconfig import normalise_variable

    result.variable = normalise_variable(variable)
    pairs = [(x, y) for x, y in zip([r for r in result.rounds if r.side == "A"],
                                    [r for r in result.rounds if r.side == "B"], strict=False)
             if x.status == y.status == "ok" and x.decode_tok_s and y.decode_tok_s]
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
    comp = cmp.compare([a_runs[0], *a_runs[1:], *b_runs], out_dir=Path(result.folder or "."),
                       tolerance=tolerance, variable=result.variable)
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
            result.identity_lines.append("A's own rounds differ from each other: the server is not deterministic "
                                         "here, so a B difference may not be the change")
    cfg = comp.configs.get(b_runs[0])
    if cfg is not None:
        result.config = cfg.to_json()
        result.unintended = [d.key for d in cfg.unintended]
    a_cfg = [comp.configs.get(x) for x in a_runs[1:]]
    drift = sorted({d.key for c in a_cfg if c for d in c.differences})
    if drift:
        result.identity_lines.append(f"A's rounds served different configs ({', '.join(drift)})")


def _trace_diff(result: AbResult, prof: dict[str, Any]) -> None:
    """The diff-trace ranking of A's profile against B's, kept in ab.json (and its markdown beside it)."""
    from sglops.trace.diff import diff
    from sglops.trace.diff_report import markdown

    try:
        d = diff(prof["A"].analysis, prof["B"].analysis, labels=(f"A {result.a.name}", f"B {result.b.name}"))
    except SglopsError as exc:
        result.trace_diff = {"error": str(exc)}
        return
    md = markdown(d)
    path = Path(result.folder or ".") / "trace-diff.md"
    path.write_text(md)
    result.trace_diff = {"headline": d.headline(), "markdown": str(path), "a": result.profiles.get("A"),
                         "b": result.profiles.get("B"), "diff": d.to_json()}


# -- the task's glue ----------------------------------------------------------------------------------
def spec() -> dict:
    """`inv ab` / play step `ab` parameters: the sides, rounds, the bench's own options (1 repeat per round by
    default: the rounds are the repeats), --profile, and what the comparison requires (values.COMPARE)."""
    from sglops import values as v

    bench = {k: val for k, val in v.BENCH.items() if k != "port"}  # each round benches the server it started
    return {"a": v.Str(), "b": v.Str(), "patch": v.Name("patch"), "rounds": v.Int(1, 100, MIN_ROUNDS),
            **bench, "runs": v.Int(1, 1000, 1), "profile": v.Flag(), **v.COMPARE}


def run_checked(remote: Remote, o: dict[str, Any], *, dry_run: bool = False,
                say: Callable[[str], None] | None = None) -> AbResult:
    """run_ab with checked options (spec()): the task's and the play step's way in."""
    from sglops import values as v
    from sglops.identity import Tolerance

    bench = {k: o[k] for k in v.BENCH if k in o and k != "port"}
    return run_ab(remote, o.get("a"), o.get("b"), patch=o.get("patch"), rounds=o["rounds"], bench=bench,
                  profile_sides=o.get("profile", False), variable=o.get("variable"),
                  tolerance=Tolerance.from_options(o.get("tolerance_logprob"), o.get("min_identical_share")),
                  dry_run=dry_run, say=say)


def step(o: dict[str, Any], *, dry_run: bool = False, progress: bool = True) -> Callable[[Remote], AbResult]:
    """The per-host step `inv ab` runs: sides are checked before any host is touched; progress lines on stderr."""
    for s in sides_from(o.get("a"), o.get("b"), o.get("patch")):
        parse_side(s)

    def run(remote: Remote) -> AbResult:
        from sglops.console import note

        return run_checked(remote, o, dry_run=dry_run, say=(lambda text: note(f"{remote.name}: {text}"))
                           if progress else None)

    return run
