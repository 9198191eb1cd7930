"""`inv ab`: interleaved A/B rounds on one host, one verdict for speed, output identity and config.

Why interleaved: two benches an hour apart measure the change AND whatever drifted in that hour
(clocks, thermals, a neighbour's job). Rounds run A, B, A, B, ... with a restart (and the patch set
each side needs, applied or reverted and checked in the host ledger) before every bench, so drift
hits both sides; the ratio is taken within each round and bootstrapped over rounds (a paired
bootstrap, sglops.bench.stats.paired_ratio_ci). Each round is an ordinary bench run (`inv compare`,
`inv runs`, `inv report` work on it); the ab run folder references them. The host is left as it
was found (profile, port, patch set), also when a round fails.

Sides and the round plan: sglops.experiment.ab_plan; the record and its verdict: sglops.experiment.ab_result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sglops.core.errors import ConfigError, SglopsError
from sglops.core.op import Context, Draw
from sglops.experiment import ab_journal, ab_signals, as_found
from sglops.experiment.ab_plan import Found, Side, SideSpec, Step, plan_steps
from sglops.experiment.ab_result import (
    MIN_ROUNDS,
    AbFailed,
    AbInterrupted,
    AbResult,
    Round,
    add_trace_diff,
    analyze,
)
from sglops.experiment.server_nodes import ServerNodes
from sglops.launch import server as launch


# -- running it ---------------------------------------------------------------------------------------
def resolve_sides(specs: tuple[SideSpec, SideSpec], found: Found) -> tuple[Side, Side, list[str]]:
    """Sides with their profiles resolved (the current one for `+P`) and checked; the managed patches (their
    specs were loaded by the operation's prepare)."""
    from sglops.launch.profiles import load_profile

    sides = []
    for spec in specs:
        prof = spec.profile
        if prof is None:
            if not found.running or not found.profile:
                raise ConfigError(
                    f"side {spec.label} ({spec.text!r}) means the current profile, but no server "
                    "started by sglops runs on the host: name the profile (PROFILE+PATCH)"
                )
            prof = found.profile
        load_profile(prof)
        sides.append(Side(spec.label, spec.text, prof, spec.patches))
    managed = list(dict.fromkeys([*sides[0].patches, *sides[1].patches]))
    return sides[0], sides[1], managed


def run_ab(
    ctx: Context,
    sides: tuple[SideSpec, SideSpec],
    *,
    nodes: ServerNodes | None = None,
    rounds: int = MIN_ROUNDS,
    bench: dict[str, Any] | None = None,
    profile_sides: bool = False,
    variable: list[str] | str | None = None,
    tolerance: Any = None,
    patch_files: dict[str, list[str]] | None = None,
) -> AbResult:
    """Run (or plan, in a dry run) the interleaved A/B on ctx's host; the host is restored in every case.

    sides: ab_plan.parse_sides(--a, --b, --patch), parsed once by the operation's prepare, which also loaded
    their patches' specs (patch_files: as_found.patch_files; an earlier run's managed patches are added).
    bench: run_bench's
    options (runs per round, lengths, concurrency, api, ...). A failing round stops the rounds; the result
    then carries `failure` and check() exits non-zero. Each round's bench is a run of its own,
    recorded through the context; the ab's own record (ab.json) is the runner's. A Ctrl-C or SIGTERM stops the
    rounds and restores (signals deferred meanwhile: sglops.experiment.ab_signals); the host's journal
    (sglops.experiment.ab_journal) says what to restore until the restore is done. nodes: every node of the
    server when it runs over several hosts (each round restarts every node; node 0 serves the benches).
    """
    nodes = nodes or ServerNodes([ctx.remote])
    remote = nodes.lead
    say = lambda text: ctx.event({"note": text})  # noqa: E731
    opts = {k: v for k, v in (bench or {}).items() if v is not None}
    try:
        result = plan(nodes, sides, rounds, opts, profile_sides, ctx.dry_run, patch_files or {})
    # only read so far: nothing to restore, but still one line and 130
    except KeyboardInterrupt:
        raise AbInterrupted(
            f"{remote.name}: ab interrupted (SIGINT) while reading the host; nothing was changed",
            ab_signals.signal.SIGINT,
        ) from None
    if ctx.dry_run:
        return result
    t_start = time.monotonic()
    result.run_id, result.folder = ctx.own_run_id, str(ctx.own_folder)
    begin_journals(nodes, result.run_id, result.managed, result.earlier_by_node, "ab")
    rounds_run = _Rounds(ctx, nodes, result, {"runs": 1, **opts}, say)
    with ab_signals.guarded_ab() as guard:

        def run_rounds() -> None:
            if result.apart:
                as_found.align(nodes, result.managed, set(result.found.patches) & set(result.managed), say)
            # the plan the dry run prints, step by step
            rounds_run.run([s for s in result.plan if s.round])

        def restore() -> None:
            _finish(nodes, result, rounds_run, variable, tolerance, ctx.draw, say)
            result.wall_s = round(time.monotonic() - t_start, 1)

        guard.run_then_restore(run_rounds, restore, result, lambda: rounds_run.where)
    return result


def read_journals(nodes: ServerNodes) -> dict[str, ab_journal.Journal | None]:
    """Every node's journal; one of a run alive on this machine is refused (sglops.experiment.ab_journal)."""
    earlier = {r.name: ab_journal.read(r) for r in nodes.remotes}
    for name, j in earlier.items():
        ab_journal.check_not_live(j, name)
    return earlier


def begin_journals(
    nodes: ServerNodes,
    run_id: str,
    managed: list[str],
    earlier: dict[str, ab_journal.Journal | None],
    what: str,
) -> None:
    """Every node's journal written before the first change (each its own found state, each naming every
    node); a node where another run began meanwhile refuses, and the journals already written are taken
    back."""
    done = []
    for r in nodes.remotes:
        try:
            ab_journal.begin(
                r,
                run_id,
                nodes.found_by_node[r.name],
                managed,
                earlier.get(r.name),
                what=what,
                nodes=nodes.describe() if nodes.several else [],
            )
        except SglopsError:
            for other in done:
                ab_journal.end(other, run_id)
                other.experiment = None
            raise
        # this connection's changes are the run's own (sglops.core.owner.honoured)
        r.experiment = run_id
        done.append(r)


def found_state(nodes: ServerNodes) -> tuple[dict[str, ab_journal.Journal | None], dict[str, Found]]:
    """(every node's earlier journal, every node's state now); the state to restore (`nodes.found_by_node`) is
    each node's journal's where an earlier run was cut short there, else the state now."""
    earlier = read_journals(nodes)
    now = {r.name: as_found.found(r) for r in nodes.remotes}
    nodes.found(lambda r: earlier[r.name].found if earlier[r.name] else now[r.name])
    return earlier, now


def plan(
    nodes: ServerNodes,
    sides: tuple[SideSpec, SideSpec],
    rounds: int,
    opts: dict[str, Any],
    profile_sides: bool,
    dry_run: bool,
    patch_files: dict[str, list[str]],
) -> AbResult:
    """Read the host (journal, server, ledger), resolve and
    check the sides, and plan every step: nothing changes.

    An earlier ab that was cut short (its journal still on the host) is taken over: the state to restore is
    the one IT found, and its managed patches are managed here too; one alive on this machine is refused."""
    if profile_sides and nodes.several:
        raise ConfigError(
            f"{nodes.name}: --profile on a server over several nodes: profile it on its own "
            f"(`inv profile --hosts {','.join(nodes.names())}`) before or after the ab"
        )
    earlier_by, now_by = found_state(nodes)
    earlier = next((j for j in earlier_by.values() if j), None)
    found = nodes.found_by_node[nodes.name]
    now = now_by[nodes.name]
    side_a, side_b, managed = resolve_sides(sides, found)
    managed += [p for j in earlier_by.values() if j for p in j.managed if p not in managed]
    files = {**patch_files, **as_found.patch_files([p for p in managed if p not in patch_files])}
    for prof in dict.fromkeys([side_a.profile, side_b.profile]):
        nodes.check_profile(prof, "ab")
        # a profile a node cannot run fails here
        nodes.each(lambda r, prof=prof: launch.render_for(r, prof))
    as_found.precheck_patches(nodes, managed, now_by)
    apart = len({repr(sorted(set(f.patches) & set(managed))) for f in now_by.values()}) > 1
    from sglops.bench.params import DEFAULTS

    what = (
        f"{opts.get('runs', 1)} repeat(s), in {opts.get('input_len', DEFAULTS['input_len'])} / out "
        f"{opts.get('output_len', DEFAULTS['output_len'])}, concurrency {opts.get('concurrency', [1])}"
    )
    steps = plan_steps(
        side_a,
        side_b,
        rounds,
        found,
        managed,
        profile_sides=profile_sides,
        bench_what=what,
        now=found.patches if apart else now.patches,
    )
    return AbResult(
        host=nodes.name,
        a=side_a,
        b=side_b,
        rounds_asked=rounds,
        found=found,
        managed=managed,
        patch_files=files,
        plan=steps,
        bench=opts,
        dry_run=dry_run,
        earlier=earlier,
        earlier_line=earlier.line() if earlier else None,
        nodes=nodes.describe() if nodes.several else [],
        earlier_by_node=earlier_by,
        apart=apart,
    )


def _finish(
    nodes: ServerNodes,
    result: AbResult,
    rounds_run: _Rounds,
    variable: Any,
    tolerance: Any,
    draw: Draw | None,
    say: Callable[[str], None],
) -> None:
    """The restore, the journal dropped once it holds, then
    the analysis (the rounds are kept whatever it says)."""
    result.restore = as_found.restore(nodes, nodes.found_by_node, result.patch_files, say)
    if result.restore.get("ok"):
        end_journals(nodes, result.run_id or "", result.restore)
    else:
        result.failure = "; ".join(
            x for x in (result.failure, "restore failed: " + str(result.restore.get("error"))) if x
        )
        result.restore["journal"] = "kept on the host: the next `inv ab` restores the state it names"
    try:
        analyze(result, variable, tolerance, draw)
        if len(rounds_run.profiled) == 2:
            add_trace_diff(result, rounds_run.profiled, draw)
    except SglopsError as exc:
        result.identity_lines.append(f"analysis failed: {exc}")


def end_journals(nodes: ServerNodes, run_id: str, restore: dict) -> None:
    """Every node's journal dropped once the found state
    is back (a failure to drop one is said, not raised)."""
    for r in nodes.remotes:
        try:
            ab_journal.end(r, run_id)
            r.experiment = None
        except SglopsError as exc:
            restore["journal"] = f"not removed on {r.name}: {exc}"


@dataclass
class _Rounds:
    """Runs the rounds of an ab plan one step at a time: each kind of step is a method of the same name."""

    ctx: Context
    nodes: ServerNodes
    result: AbResult
    bench_opts: dict[str, Any]
    say: Callable[[str], None]
    profiled: dict[str, Any] = field(default_factory=dict)
    # the step in progress ("round 2/3 B: restart"), for an interruption's line
    where: str | None = None

    @property
    def remote(self) -> Any:
        """Node 0: where the benches and profiles go."""
        return self.nodes.lead

    def run(self, steps: list[Step]) -> None:
        sides = {s.label: s for s in (self.result.a, self.result.b)}
        rnd: Round | None = None
        for step in steps:
            side = sides[step.side]
            if rnd is None or (rnd.round, rnd.side) != (step.round, step.side):
                rnd = Round(
                    step.round, side.label, run_id=f"{self.result.run_id}-r{step.round}{side.label.lower()}"
                )
                self.result.rounds.append(rnd)
            when = f"round {step.round}/{self.result.rounds_asked} {side.label}"
            self.where = f"{when}: {step.kind}"
            ab_signals.check_interrupt()
            try:
                getattr(self, step.kind)(step, side, rnd, when)
            except SglopsError as exc:
                rnd.status = "failed" if rnd.status in ("not run", "ok") else rnd.status
                rnd.error = str(exc)
                raise

    def apply(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        self.say(f"{when}: apply {step.what}")
        self.nodes.apply(step.what)

    def revert(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        self.say(f"{when}: revert {step.what}")
        self.nodes.revert(step.what)

    def restart(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        as_found.ledger_check(self.nodes, self.result.patch_files, set(side.patches), when)
        t0 = time.monotonic()
        as_found.restart(self.nodes, side.profile, when, self.say)
        rnd.restart_s = round(time.monotonic() - t0, 1)

    def bench(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        from sglops.bench import run as bench_mod

        self.say(f"{when}: bench")
        t0 = time.monotonic()
        res = bench_mod.run_bench(self.remote, **self.bench_opts)
        res.run_id = rnd.run_id
        # each round a bench run of its own
        self.ctx.keep(res, "bench.json", task="bench", run_id=rnd.run_id)
        rnd.bench_s = round(time.monotonic() - t0, 1)
        rnd.status = res.status
        head = res.headline()
        rnd.decode_tok_s = head["median"] if head else None
        rnd.patches = [p.get("patch") for p in res.patches]
        got = {p for p in rnd.patches if p in self.result.managed}
        if got != set(side.patches):
            raise AbFailed(
                f"{when}: the bench recorded patches {sorted(got)} of the managed ones, "
                f"side {side.label} needs {sorted(side.patches)}"
            )
        if res.status != "ok":
            problems = "; ".join(res.problems()) or "not a clean figure"
            # failed requests or another server: a finding, the rounds stop
            if not res.outputs_whole:
                raise AbFailed(f"{when}: bench run {rnd.run_id} is {res.status}: {problems}")
            # every request answered but the timings are not
            # clean: the outputs still count, the speed does not
            rnd.status, rnd.error = "partial", f"timings not clean, left out of the speed figure: {problems}"
            self.say(f"{when}: {rnd.error}")

    def profile(self, step: Step, side: Side, rnd: Round, when: str) -> None:
        from sglops.trace.profile import run_profile

        self.say(f"{when}: profile")
        run_id = f"{self.result.run_id}-profile-{side.label.lower()}"
        # traces that could not be analysed are a run on record too
        self.profiled[side.label] = self.ctx.keep_run(
            lambda: run_profile(self.remote, chart=True, draw=self.ctx.draw, run_id=run_id),
            "profile.json",
            task="profile",
            run_id=run_id,
        )
        self.result.profiles[side.label] = self.profiled[side.label].run_id


# -- the operation's way in (sglops.bench.ops) -------------------------------------------------------
def run_checked(ctx: Context, o: dict[str, Any], nodes: ServerNodes | None = None) -> AbResult:
    """run_ab with the checked options of the `ab` operation: the task's and the play step's way in."""
    from sglops.bench.identity import Tolerance
    from sglops.bench.params import BENCH

    bench = {p.name: o[p.name] for p in BENCH if p.name in o and p.name != "port"}
    return run_ab(
        ctx,
        o["sides"],
        nodes=nodes,
        rounds=o["rounds"],
        bench=bench,
        patch_files=o["patch_files"],
        profile_sides=o.get("profile", False),
        variable=o.get("variable"),
        tolerance=Tolerance.from_options(o.get("tolerance_logprob"), o.get("min_identical_share")),
    )
