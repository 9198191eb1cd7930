"""`inv ab`: interleaved A/B rounds on one host, one verdict for speed, output identity and config.

Why interleaved: two benches an hour apart measure the change AND whatever drifted in that hour
(clocks, thermals, a neighbour's job). Rounds run A, B, A, B, ... with a restart (and the patch set
each side needs, applied or reverted and checked in the host ledger) before every bench, so drift
hits both sides; the ratio is taken within each round and bootstrapped over rounds (a paired
bootstrap, sglops.bench.stats.paired_ratio_ci). Each round is an ordinary bench run (`inv compare`,
`inv runs`, `inv report` work on it); the ab run folder references them. The host is left as it
was found (profile, port, patch set), also when a round fails.

Sides and the round plan: sglops.bench.ab_plan; the record and its verdict: sglops.bench.ab_result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sglops.bench import ab_journal, ab_signals
from sglops.bench.ab_plan import (
    Found,
    Side,
    SideSpec,
    Step,
    parse_side,
    parse_sides,
    plan_steps,
    restore_steps,
    sides_from,
)
from sglops.bench.ab_result import (
    MIN_ROUNDS,
    AbFailed,
    AbInterrupted,
    AbResult,
    Round,
    add_trace_diff,
    analyze,
)
from sglops.core.errors import ConfigError, SglopsError
from sglops.core.op import Context, Draw
from sglops.core.remote import Remote
from sglops.launch import server as launch

# the plan and the record live in sglops.bench.ab_plan and sglops.bench.ab_result; their names are used through here too
__all__ = ["MIN_ROUNDS", "AbFailed", "AbResult", "Found", "Round", "Side", "Step", "parse_side", "parse_sides",
           "plan_steps", "run_ab", "run_checked", "sides_from"]


# -- running it ---------------------------------------------------------------------------------------
def _found(remote: Remote) -> Found:
    from sglops.patch import apply as patches

    cur = launch.inspect(remote)["current"]
    srv = cur.get("server") or {}
    return Found(running=bool(cur.get("running")), profile=srv.get("profile"),
                 port=int(srv["port"]) if srv.get("port") else None,
                 patches=[e["patch"] for e in patches.applied(remote)])


def resolve_sides(specs: tuple[SideSpec, SideSpec], found: Found) -> tuple[Side, Side, list[str]]:
    """Sides with their profiles resolved (the current one for `+P`) and checked; the managed patches."""
    from sglops.launch.profiles import load_profile
    from sglops.patch import spec as patch_spec

    sides = []
    for spec in specs:
        prof = spec.profile
        if prof is None:
            if not found.running or not found.profile:
                raise ConfigError(f"side {spec.label} ({spec.text!r}) means the current profile, but no server "
                                  "started by sglops runs on the host: name the profile (PROFILE+PATCH)")
            prof = found.profile
        load_profile(prof)
        for p in spec.patches:
            patch_spec.load(p)
        sides.append(Side(spec.label, spec.text, prof, spec.patches))
    managed = list(dict.fromkeys([*sides[0].patches, *sides[1].patches]))
    return sides[0], sides[1], managed


def _ledger_check(remote: Remote, managed: list[str], want: set[str], when: str) -> list[str]:
    """The ledger must say exactly `want` of the managed patches, each file still as its patch left it."""
    from sglops.patch import apply as patches
    from sglops.patch import spec as patch_spec

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


def _precheck_patches(remote: Remote, managed: list[str], now: Found) -> None:
    """Each managed patch's own dry run (apply if absent, revert if applied): a conflict, an unmet requirement or
    drift refuses here, before round 1 changes anything."""
    from sglops.patch import apply as patches

    for p in managed:
        if p in now.patches:
            patches.revert_patch(remote, p, dry_run=True)
        else:
            patches.apply_patch(remote, p, dry_run=True)


RESTORE_LOCK_WAIT_S = 900.0  # an interrupted round's restart may still run on the host: the restore waits for it


def _restart(remote: Remote, profile: str, port: int | None, when: str, say: Callable[[str], None],
             lock_wait_s: float = 0) -> float:
    say(f"{when}: restart {profile}")
    t0 = time.monotonic()
    res = launch.restart(remote, profile, port=port, lock_wait_s=lock_wait_s)
    if not res.ok:
        raise AbFailed(res.failure_line(when))
    return time.monotonic() - t0


def run_ab(
    ctx: Context,
    sides: tuple[SideSpec, SideSpec],
    *,
    rounds: int = MIN_ROUNDS,
    bench: dict[str, Any] | None = None,
    profile_sides: bool = False,
    variable: list[str] | str | None = None,
    tolerance: Any = None,
) -> AbResult:
    """Run (or plan, in a dry run) the interleaved A/B on ctx's host; the host is restored in every case.

    sides: ab_plan.parse_sides(--a, --b, --patch), parsed once by the operation's prepare. bench: run_bench's
    options (runs per round, lengths, concurrency, api, ...). A failing round stops the rounds; the result then
    carries `failure` and check() exits non-zero. Each round's bench is a run of its own,
    recorded through the context; the ab's own record (ab.json) is the runner's. A Ctrl-C or SIGTERM stops the
    rounds and restores (signals deferred meanwhile: sglops.bench.ab_signals); the host's journal
    (sglops.bench.ab_journal) says what to restore until the restore is done.
    """
    remote = ctx.remote
    say = lambda text: ctx.event({"note": text})  # noqa: E731
    opts = {k: v for k, v in (bench or {}).items() if v is not None and k != "port"}
    rounds = int(rounds)
    if rounds < 1:
        raise ConfigError(f"--rounds must be at least 1 (got {rounds})")
    try:
        result = plan(remote, sides, rounds, opts, profile_sides, ctx.dry_run)
    except KeyboardInterrupt:  # only read so far: nothing to restore, but still one line and 130
        raise AbInterrupted(f"{remote.name}: ab interrupted (SIGINT) while reading the host; nothing was changed",
                            ab_signals.signal.SIGINT) from None
    if ctx.dry_run:
        return result
    t_start = time.monotonic()
    result.run_id, result.folder = ctx.own_run_id, str(ctx.own_folder)
    rounds_run = _Rounds(ctx, result, {"runs": 1, **opts}, say)
    with ab_signals.guarded_ab() as guard:
        def rounds() -> None:
            ab_journal.begin(remote, result.run_id, result.found, result.managed, result.earlier)
            rounds_run.run([s for s in result.plan if s.round])  # the plan the dry run prints, step by step

        def restore() -> None:
            _finish(remote, result, rounds_run, variable, tolerance, ctx.draw, say)
            result.wall_s = round(time.monotonic() - t_start, 1)

        guard.run_then_restore(rounds, restore, result, lambda: rounds_run.where)
    return result


def plan(remote: Remote, sides: tuple[SideSpec, SideSpec], rounds: int, opts: dict[str, Any], profile_sides: bool,
         dry_run: bool) -> AbResult:
    """Read the host (journal, server, ledger), resolve and check the sides, and plan every step: nothing changes.

    An earlier ab that was cut short (its journal still on the host) is taken over: the state to restore is the
    one IT found, and its managed patches are managed here too; one alive on this machine is refused."""
    earlier = ab_journal.read(remote)
    ab_journal.check_not_live(earlier, remote.name)
    now = _found(remote)
    found = earlier.found if earlier else now
    side_a, side_b, managed = resolve_sides(sides, found)
    managed += [p for p in (earlier.managed if earlier else []) if p not in managed]
    for prof in dict.fromkeys([side_a.profile, side_b.profile]):
        launch.render_for(remote, prof)  # a profile this host cannot run fails here, before anything changes
    _precheck_patches(remote, managed, now)
    from sglops.bench.params import DEFAULTS

    what = (f"{opts.get('runs', 1)} repeat(s), in {opts.get('input_len', DEFAULTS['input_len'])} / out "
            f"{opts.get('output_len', DEFAULTS['output_len'])}, concurrency {opts.get('concurrency', [1])}")
    steps = plan_steps(side_a, side_b, rounds, found, managed, profile_sides=profile_sides, bench_what=what,
                       now=now.patches)
    return AbResult(host=remote.name, a=side_a, b=side_b, rounds_asked=rounds, found=found, managed=managed,
                    plan=steps, bench=opts, dry_run=dry_run, earlier=earlier,
                    earlier_line=earlier.line() if earlier else None)


def _finish(remote: Remote, result: AbResult, rounds_run: _Rounds, variable: Any, tolerance: Any,
            draw: Draw | None, say: Callable[[str], None]) -> None:
    """The restore, the journal dropped once it holds, then the analysis (the rounds are kept whatever it says)."""
    result.restore = _restore(remote, result.found, result.managed, say)
    if result.restore.get("ok"):
        try:
            ab_journal.end(remote, result.run_id or "")
        except SglopsError as exc:
            result.restore["journal"] = f"not removed: {exc}"
    else:
        result.failure = "; ".join(x for x in (result.failure, "restore failed: " + str(result.restore.get("error")))
                                   if x)
        result.restore["journal"] = "kept on the host: the next `inv ab` restores the state it names"
    try:
        analyze(result, variable, tolerance, draw)
        if len(rounds_run.profiled) == 2:
            add_trace_diff(result, rounds_run.profiled, draw)
    except SglopsError as exc:
        result.identity_lines.append(f"analysis failed: {exc}")


@dataclass
class _Rounds:
    """Runs the rounds of an ab plan one step at a time: each kind of step is a method of the same name."""

    ctx: Context
    result: AbResult
    bench_opts: dict[str, Any]
    say: Callable[[str], None]
    profiled: dict[str, Any] = field(default_factory=dict)
    where: str | None = None  # the step in progress ("round 2/3 B: restart"), for an interruption's line

    @property
    def remote(self) -> Remote:
        return self.ctx.remote

    def run(self, steps: list[Step]) -> None:
        sides = {s.label: s for s in (self.result.a, self.result.b)}
        rnd: Round | None = None
        for step in steps:
            side = sides[step.side]
            if rnd is None or (rnd.round, rnd.side) != (step.round, step.side):
                rnd = Round(step.round, side.label, run_id=f"{self.result.run_id}-r{step.round}{side.label.lower()}")
                self.result.rounds.append(rnd)
            when = f"round {step.round}/{self.result.rounds_asked} {side.label}"
            self.where = f"{when}: {step.kind}"
            try:
                getattr(self, step.kind)(step, side, rnd, when)
            except SglopsError as exc:
                rnd.status = "failed" if rnd.status in ("not run", "ok") else rnd.status
                rnd.error = str(exc)
                raise

    def apply(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        from sglops.patch import apply as patches

        self.say(f"{when}: apply {step.what}")
        patches.apply_patch(self.remote, step.what)

    def revert(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        from sglops.patch import apply as patches

        self.say(f"{when}: revert {step.what}")
        patches.revert_patch(self.remote, step.what)

    def restart(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        _ledger_check(self.remote, self.result.managed, set(side.patches), when)
        rnd.restart_s = round(_restart(self.remote, side.profile, None, when, self.say), 1)

    def bench(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        from sglops.bench import run as bench_mod

        self.say(f"{when}: bench")
        t0 = time.monotonic()
        res = bench_mod.run_bench(self.remote, **self.bench_opts)
        res.run_id = rnd.run_id
        self.ctx.keep(res, "bench.json", task="bench", run_id=rnd.run_id)  # each round a bench run of its own
        rnd.bench_s = round(time.monotonic() - t0, 1)
        rnd.status = res.status
        head = res.headline()
        rnd.decode_tok_s = head["median"] if head else None
        rnd.patches = [p.get("patch") for p in res.patches]
        got = {p for p in rnd.patches if p in self.result.managed}
        if got != set(side.patches):
            raise AbFailed(f"{when}: the bench recorded patches {sorted(got)} of the managed ones, "
                           f"side {side.label} needs {sorted(side.patches)}")
        if res.status != "ok":
            problems = "; ".join(res.problems()) or "not a clean figure"
            if not res.outputs_whole:  # failed requests or another server: a finding, the rounds stop
                raise AbFailed(f"{when}: bench run {rnd.run_id} is {res.status}: {problems}")
            # every request answered but the timings are not clean: the outputs still count, the speed does not
            rnd.status, rnd.error = "partial", f"timings not clean, left out of the speed figure: {problems}"
            self.say(f"{when}: {rnd.error}")

    def profile(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        from sglops.trace.profile import run_profile

        self.say(f"{when}: profile")
        run_id = f"{self.result.run_id}-profile-{side.label.lower()}"
        try:
            self.profiled[side.label] = run_profile(self.remote, chart=True, draw=self.ctx.draw, run_id=run_id)
        except SglopsError as exc:  # traces that could not be analysed are still a run on record
            if exc.kept is not None:
                self.ctx.keep(exc.kept, "profile.json", task="profile", run_id=run_id)
            raise
        self.ctx.keep(self.profiled[side.label], "profile.json", task="profile", run_id=run_id)
        self.result.profiles[side.label] = self.profiled[side.label].run_id


def _restore(remote: Remote, found: Found, managed: list[str], say: Callable[[str], None]) -> dict:
    """The plan's last steps from wherever the rounds stopped (sglops.bench.ab_plan.restore_steps): the found patch
    set and server back. Never raises: its outcome is recorded and shown."""
    from sglops.patch import apply as patches

    want = {p for p in found.patches if p in managed}
    out: dict[str, Any] = {"ok": False, "patches": sorted(want)}
    try:
        have = {e["patch"] for e in patches.applied(remote)} & set(managed)
        for step in restore_steps(have, found, managed):
            if step.kind in ("apply", "revert"):
                say(step.line())
                (patches.apply_patch if step.kind == "apply" else patches.revert_patch)(remote, step.what)
                continue
            _ledger_check(remote, managed, want, "restore")
            if step.kind == "restart":
                _restart(remote, found.profile, found.port, "restore", say, RESTORE_LOCK_WAIT_S)
                out["server"] = f"{found.profile} on port {found.port}"
            else:
                say(step.line())
                launch.stop(remote, lock_wait_s=RESTORE_LOCK_WAIT_S)
                out["server"] = "stopped (none was running before)"
        out["ledger"] = [e["patch"] for e in patches.applied(remote)]
        out["ok"] = sorted(out["ledger"]) == sorted(found.patches)
        if not out["ok"]:
            out["error"] = f"ledger has {out['ledger']}, found {found.patches}"
    except (SglopsError, OSError) as exc:
        out["error"] = str(exc)
    return out


# -- the operation's way in (sglops.bench.ops) -------------------------------------------------------
def run_checked(ctx: Context, o: dict[str, Any]) -> AbResult:
    """run_ab with the checked options of the `ab` operation: the task's and the play step's way in."""
    from sglops.bench.identity import Tolerance
    from sglops.bench.params import BENCH

    bench = {p.name: o[p.name] for p in BENCH if p.name in o and p.name != "port"}
    return run_ab(ctx, o["sides"], rounds=o["rounds"], bench=bench,  # sides: parsed once, by the prepare
                  profile_sides=o.get("profile", False), variable=o.get("variable"),
                  tolerance=Tolerance.from_options(o.get("tolerance_logprob"), o.get("min_identical_share")))
