"""`inv sweep`: start each candidate configuration on one
host, bench the same work on each, answer which to run.

Why: "which attention backend should this host run?" took the original investigation restarts by hand (a
backend that reads FP8 natively but is SM100-only, one that clashes with the sparse-attention path, one that
casts the whole pool). The probe already knows most of that: candidates it rules out are shown as "skipped:
why" before anything starts (sglops.experiment.sweep_plan). The rest are rendered, restarted (a crash named by
its class and log line), benched with the same work and optionally profiled; outputs are compared with the
first candidate that started. Each bench is an ordinary run (`inv compare`, `inv report`), recorded through
the runner's context like ab's rounds; the sweep itself is the runner's record (sweep.json). The host goes
back to what it ran before (sglops.experiment.as_found: the found server and the ledger's patch set), also
when a step fails, on Ctrl-C, and after a SIGKILL: the sweep keeps the same journal on the host as ab does, so
the next ab or sweep restores what this one found. On a server over several nodes every candidate restarts
every node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglops.core.errors import SglopsError
from sglops.core.op import Context, Draw
from sglops.experiment import ab_signals, as_found
from sglops.experiment.ab import begin_journals, end_journals, found_state
from sglops.experiment.ab_plan import transitions
from sglops.experiment.server_nodes import ServerNodes
from sglops.experiment.sweep_plan import Candidate, screen
from sglops.experiment.sweep_result import FailedStart, Row, SweepInterrupted, SweepResult


def candidate_profile(base: Any, c: Candidate, host: str) -> Any:
    """The base profile with the candidate's settings (checked
    as a profile's fields are), named for the record."""
    from sglops.launch.profiles import Profile

    over = {**base.per_host.get(host, {}), **dict(c.settings)}
    p = Profile(**{**base.__dict__, "per_host": {host: over}}).for_host(host)
    return Profile(**{**p.__dict__, "name": f"{base.name}@{c.label}", "per_host": {}})


def top_cost(analysis: Any) -> str | None:
    """The trace's largest cost in one phrase: the top GPU
    kernel's share, or on a CPU server the top CPU op's."""
    if analysis.has_gpu and analysis.gpu_us > 0:
        top = analysis.top_kernels(1)
        if top:
            name, us, calls = top[0]
            return f"{name[:70]} {us / analysis.gpu_us:.1%} of GPU time ({calls} calls)"
    cpu = analysis.cpu
    if cpu is not None and cpu.self_total_us > 0:
        # not a record_function range
        ops = [r for r in cpu.top_self(20) if not r[4]]
        if ops:
            name, us, calls, _, _ = ops[0]
            return f"{name[:70]} {us / cpu.self_total_us:.1%} of CPU self time ({calls} calls)"
    return None


def plan_lines(
    rows: list[Row], base: str, managed: list[str], found_line: str, profile_trace: bool, bench_what: str
) -> list[str]:
    """What the sweep would do, in order (a dry run prints this, the real run follows it)."""
    out = []
    for r in rows:
        c = r.candidate
        if r.status == "skipped":
            out.append(f"candidate {c.index} {c.label}: skip ({'; '.join(r.reasons)})")
            continue
        forced = f" (forced past: {'; '.join(r.reasons)})" if r.reasons else ""
        patches = f", patches {'+'.join(c.patches) or 'none'} of {'+'.join(managed)}" if managed else ""
        out.append(
            f"candidate {c.index} {c.label}: restart {base}@{c.label}{patches}, bench {bench_what}"
            + (", profile" if profile_trace else "")
            + forced
        )
    out.append(f"restore: {found_line}")
    return out


def run_sweep(
    ctx: Context,
    profile: str,
    cands: list[Candidate],
    *,
    force: bool = False,
    profile_trace: bool = False,
    bench: dict[str, Any] | None = None,
    tolerance: Any = None,
    nodes: ServerNodes | None = None,
) -> SweepResult:
    """Screen the candidates against the probe facts, then (unless a dry run) run each and restore the host.

    The sweep is a run of its own (`ctx.own_run_id`, recorded by the runner as sweep.json: `Op(record=...,
    own_run=True)`); each candidate's bench, failed start and profile is recorded through `ctx.keep` as a run
    of its own (`<sweep-run>-c<N>`, `<sweep-run>-c<N>-profile`). A dry run records nothing. Ctrl-C or SIGTERM
    stops the candidates and the restore runs to its end (signals deferred meanwhile, as in ab); check() then
    exits 128+N."""
    from sglops.bench.params import DEFAULTS

    say = lambda text: ctx.event({"note": text})  # noqa: E731
    t_start = time.monotonic()
    nodes = nodes or ServerNodes([ctx.remote])
    opts = {k: v for k, v in (bench or {}).items() if v is not None and k != "port"}
    try:
        result, base = plan(
            nodes, profile, cands, force=force, profile_trace=profile_trace, opts=opts, dry_run=ctx.dry_run
        )
    # only read so far: nothing to restore, but still one line and 130
    except KeyboardInterrupt:
        raise SweepInterrupted(
            f"{ctx.host}: sweep interrupted (SIGINT) while reading the host; nothing was changed",
            ab_signals.signal.SIGINT,
        ) from None
    if ctx.dry_run:
        return result
    result.run_id, result.folder = ctx.own_run_id, str(ctx.own_folder)
    begin_journals(nodes, result.run_id, result.managed, result.earlier_by_node, "sweep")
    steps = _Steps(ctx, nodes, result, base, {"runs": opts.get("runs", DEFAULTS["runs"]), **opts}, say)
    with ab_signals.guarded_ab(who="the sweep") as guard:
        guard.run_then_restore(
            steps.run_all,
            lambda: _finish(nodes, result, tolerance, ctx.draw, say, t_start),
            result,
            lambda: steps.where,
        )
    return result


def plan(
    nodes: ServerNodes,
    profile: str,
    cands: list[Candidate],
    *,
    force: bool,
    profile_trace: bool,
    opts: dict[str, Any],
    dry_run: bool,
) -> tuple[SweepResult, Any]:
    """Read the host (journal, server, ledger, facts, one probe scan), screen and render every candidate, and
    plan: nothing changes. Returns the result (its rows and plan) and the base profile. An earlier ab or sweep
    cut short is taken over as ab does: the state to restore is the one it found."""
    from sglops.bench.params import DEFAULTS
    from sglops.core.errors import ConfigError
    from sglops.engine import get as get_engine
    from sglops.launch import server as launch
    from sglops.launch.profiles import load_profile
    from sglops.probe.facts import gather
    from sglops.probe.scan import scan
    from sglops.probe.spec import load_probe_set

    remote = nodes.lead
    base = load_profile(profile)
    nodes.check_profile(base, "sweep")
    if profile_trace and nodes.several:
        raise ConfigError(
            f"{nodes.name}: --profile-trace on a server over several nodes: profile the candidate you "
            f"pick on its own (`inv profile --hosts {','.join(nodes.names())}`)"
        )
    earlier_by, now_by = found_state(nodes)
    found = nodes.found_by_node[nodes.name]
    host_facts = gather(remote)
    probe_set = load_probe_set()
    # the probe facts screen SGLang's flags and backends; another engine's candidates are checked by rendering
    # them against its own tree (below: a flag or choice its release lacks is refused before anything starts)
    probe = scan(remote, probe_set) if get_engine(base.engine).launch_path_rules else None
    facts = probe.facts if probe else {}
    managed = list(
        dict.fromkeys(
            [
                *(p for c in cands for p in c.patches),
                *(p for j in earlier_by.values() if j for p in j.managed),
            ]
        )
    )
    files = as_found.patch_files(managed)
    base_args = base.for_host(remote.name).args
    rows = []
    for c in cands:
        s = screen(c, base_args, facts, probe_set.aliases, host_facts.compute_capability, files)
        row = Row(c, reasons=s.reasons, notes=s.notes, q_quantised=s.q_quantised)
        if s.reasons and not force:
            row.status = "skipped"
        row.forced = bool(s.reasons) and force
        rows.append(row)
    release = facts.get("sglang_version")
    # a candidate this host cannot render is refused here, before anything changes
    for row in rows:
        if row.status == "planned":
            try:
                done = nodes.each(
                    lambda r, c=row.candidate: launch.render_for(r, candidate_profile(base, c, r.name))
                )
                release = release or next(
                    (d.sglang_version for d in done or [] if getattr(d, "sglang_version", None)), None
                )
            except SglopsError as exc:
                row.status, row.reasons = "skipped", [*row.reasons, f"refused before start: {exc}"]
    as_found.precheck_patches(nodes, managed, now_by)
    what = (
        f"{opts.get('runs', DEFAULTS['runs'])} repeat(s), in {opts.get('input_len', DEFAULTS['input_len'])} /"
        f" out {opts.get('output_len', DEFAULTS['output_len'])}, concurrency {opts.get('concurrency', [1])}"
    )
    srv = (
        f"restart {found.profile} (port {found.port})"
        if found.running
        else "stop the server (none ran before)"
    )
    found_line = f"patches back to {'+'.join(found.patches) or 'none'}, {srv}"
    result = SweepResult(
        host=remote.name,
        profile=base.name,
        sglang_version=release,
        compute_capability=host_facts.compute_capability,
        found=found,
        rows=rows,
        bench=opts,
        managed=managed,
        force=force,
        profile_trace=profile_trace,
        dry_run=dry_run,
        nodes=nodes.describe() if nodes.several else [],
        earlier_by_node=earlier_by,
        now_patches={n: f.patches for n, f in now_by.items()},
        patch_files=files,
    )
    earlier = next((j for j in earlier_by.values() if j), None)
    if earlier is not None:
        result.earlier_line = earlier.line()
    result.plan = plan_lines(rows, base.name, managed, found_line, profile_trace, what)
    return result, base


def _finish(
    nodes: ServerNodes,
    result: SweepResult,
    tolerance: Any,
    draw: Draw | None,
    say: Callable[[str], None],
    t_start: float,
) -> None:
    """The restore (never raises), the output comparison, the
    wall-time split: the rows are kept whatever happens."""
    t0 = time.monotonic()
    result.restore = as_found.restore(nodes, nodes.found_by_node, result.patch_files, say)
    restore_s = time.monotonic() - t0
    if result.restore.get("ok"):
        end_journals(nodes, result.run_id or "", result.restore)
    else:
        result.restore["journal"] = (
            "kept on the host: the next `inv ab` or `inv sweep` restores the state it names"
        )
        result.failure = "; ".join(
            x for x in (result.failure, f"restore failed: {result.restore.get('error')}") if x
        )
    try:
        compare_outputs(result, tolerance, draw)
    # the rows are recorded whatever the comparison says
    except SglopsError as exc:
        result.failure = result.failure or f"output comparison failed: {exc}"
    result.wall_s = round(time.monotonic() - t_start, 1)
    restarts = sum(r.restart_s or 0 for r in result.rows) + restore_s
    benches = sum(r.bench_s or 0 for r in result.rows)
    profiles = sum(r.profile_s or 0 for r in result.rows)
    result.split = {
        "restarts": round(restarts, 1),
        "benches": round(benches, 1),
        "profiles": round(profiles, 1),
        "tool": round(result.wall_s - restarts - benches - profiles, 1),
    }


class _Steps:
    """Runs the planned candidates one at a time: patches, restart, bench, optional profile. Each candidate's
    runs are recorded through the context (the runner's keep), as ab records its rounds."""

    def __init__(
        self,
        ctx: Context,
        nodes: ServerNodes,
        result: SweepResult,
        base: Any,
        bench_opts: dict[str, Any],
        say: Callable[[str], None],
    ) -> None:
        self.ctx, self.nodes, self.remote, self.result, self.base, self.bench_opts, self.say = (
            ctx,
            nodes,
            nodes.lead,
            result,
            base,
            bench_opts,
            say,
        )
        # the step in progress, for an interruption's line
        self.where: str | None = None

    def run_all(self) -> None:
        managed = self.result.managed
        lead_now = set(self.result.now_patches.get(self.nodes.name, self.result.found.patches))
        have = {p for p in lead_now if p in managed}
        if len({repr(sorted(set(v) & set(managed))) for v in self.result.now_patches.values()}) > 1:
            have = {p for p in self.result.found.patches if p in managed}
            as_found.align(self.nodes, managed, have, self.say)
        todo = [r for r in self.result.rows if r.status == "planned"]
        for n, row in enumerate(todo, 1):
            c = row.candidate
            when = f"candidate {c.index} ({n}/{len(todo)}) {c.label}"
            row.run_id = f"{self.result.run_id}-c{c.index}"
            for kind, p in transitions(have, set(c.patches), managed):
                self.where = f"{when}: {kind} {p}"
                ab_signals.check_interrupt()
                self.say(self.where)
                (self.nodes.apply if kind == "apply" else self.nodes.revert)(p)
            have = set(c.patches)
            ab_signals.check_interrupt()
            as_found.ledger_check(self.nodes, self.result.patch_files, have, when)
            if self.restart(row, when):
                self.bench(row, when)
                if self.result.profile_trace and row.status == "started":
                    self.profile(row, when)

    def restart(self, row: Row, when: str) -> bool:
        self.where = f"{when}: restart"
        self.say(self.where)
        t0 = time.monotonic()
        res = self.nodes.restart(
            None, profile_for=lambda name: candidate_profile(self.base, row.candidate, name)
        )
        row.restart_s = round(time.monotonic() - t0, 1)
        if res.ok:
            row.status = "started"
            # what /server_info says instead of a setting the candidate made
            asked = dict(row.candidate.settings)
            row.served_as = {k: m["effective"] for k, m in res.mismatches.items() if k in asked}
            if row.served_as:
                self.say(f"{when}: the server replaced {', '.join(sorted(row.served_as))}")
            return True
        row.status, row.crash, row.crash_label = "crashed", res.failure, res.failure_label
        row.crash_line = res.failure_detail or (res.log_tail[-1] if res.log_tail else None)
        self.ctx.keep(
            FailedStart(res, self.result.run_id or ""), "restart.json", task="restart", run_id=row.run_id
        )
        self.say(f"{when}: crashed: {res.failure_label}")
        return False

    def bench(self, row: Row, when: str) -> None:
        from sglops.bench import run as bench_mod

        self.where = f"{when}: bench"
        ab_signals.check_interrupt()
        self.say(self.where)
        t0 = time.monotonic()
        try:
            res = bench_mod.run_bench(self.remote, **self.bench_opts)
        except SglopsError as exc:
            row.status, row.error = "bench failed", str(exc)
            return
        finally:
            row.bench_s = round(time.monotonic() - t0, 1)
        res.run_id = row.run_id
        # an ordinary bench run of its own
        self.ctx.keep(res, "bench.json", task="bench", run_id=row.run_id)
        head = res.headline()
        if head:
            row.decode_tok_s, row.ci95 = head["median"], head.get("ci95")
        if res.status != "ok":
            row.status, row.error = "bench failed", "; ".join(res.problems()) or f"bench {res.status}"

    def profile(self, row: Row, when: str) -> None:
        from sglops.trace.profile import run_profile

        self.where = f"{when}: profile"
        self.say(self.where)
        run_id = f"{row.run_id}-profile"
        t0 = time.monotonic()

        def work() -> Any:
            return run_profile(
                self.remote, run_id=run_id, chart=self.ctx.draw is not None, draw=self.ctx.draw
            )

        # traces that could not be analysed are still a run on record
        def kept(_result: Any) -> None:
            row.profile_run = run_id

        try:
            prof = self.ctx.keep_run(work, "profile.json", task="profile", run_id=run_id, on_kept=kept)
        except SglopsError as exc:
            row.top_cost = f"profile failed: {exc}"
            return
        finally:
            row.profile_s = round(time.monotonic() - t0, 1)
        row.profile_run, row.top_cost = prof.run_id, top_cost(prof.analysis)


def compare_outputs(result: SweepResult, tolerance: Any, draw: Draw | None) -> None:
    """Each benched candidate's outputs against the baseline
    (the first candidate that started and benched)."""
    from sglops.bench import compare as cmp

    runs = [r for r in result.rows if r.run_id and r.decode_tok_s is not None]
    if not runs:
        return
    base, others = runs[0], runs[1:]
    result.baseline, base.identity = base.run_id, "baseline"
    if not others:
        return
    varied = sorted({k for r in result.rows for k, _ in r.candidate.settings})
    comp = cmp.compare(
        [base.run_id, *[r.run_id for r in others]],
        out_dir=Path(result.folder or "."),
        tolerance=tolerance,
        variable=varied,
        draw=draw,
        labels={r.run_id: r.candidate.label for r in runs},
    )
    result.comparison, result.chart, result.pareto = comp.saved, comp.chart, comp.pareto
    for r in others:
        v = comp.identities.get(r.run_id)
        if v is None or v.status == "not_compared":
            r.identity, r.identity_line = "not compared", v.line() if v else "outputs not recorded"
            continue
        r.identity_line = v.line()
        if v.within_tolerance:
            r.identity = "identical" if v.identical else "within tolerance"
            continue
        by_design = r.q_quantised != base.q_quantised
        r.identity = "differs by design" if by_design else "differs"
        if v.first_divergence is not None:
            r.first_token = v.first_divergence.token_index
        r.max_dlogprob = v.max_logprob_diff or None


def run_checked(ctx: Context, o: dict[str, Any], nodes: ServerNodes | None = None) -> SweepResult:
    """run_sweep with the checked options of the `sweep` operation: the task's and the play step's way in."""
    from sglops.bench.identity import Tolerance
    from sglops.bench.params import BENCH

    bench = {p.name: o[p.name] for p in BENCH if p.name in o and p.name != "port"}
    # cands: parsed by the operation's prepare
    return run_sweep(
        ctx,
        o["profile"],
        o["cands"],
        force=o.get("force", False),
        profile_trace=o.get("profile_trace", False),
        bench=bench,
        tolerance=Tolerance.from_options(o.get("tolerance_logprob"), o.get("min_identical_share")),
        nodes=nodes,
    )
