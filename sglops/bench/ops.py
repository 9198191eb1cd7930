"""The bench family's operations (bench, compare, ab, runs): each declared once, for `inv` and for plays."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglops.bench.params import (
    BENCH,
    COMPARE,
    LOADS,
)
from sglops.core.console import Live
from sglops.core.errors import ConfigError
from sglops.core.op import DRY_RUN, JSON, TARGETS, Context, Op, Param
from sglops.core.values import Flag, StrList

if TYPE_CHECKING:
    from sglops.bench.compare import Comparison, RunList
    from sglops.bench.plan import BenchPlan
    from sglops.bench.run import BenchResult


def _required(result: Any, o: dict) -> None:
    result.check(o["require_identical"], o["require_same_config"])


# -- bench ----------------------------------------------------------------------------------------------
def bench(ctx: Context, plan: BenchPlan | None = None, **flags: Any) -> BenchResult:
    """The flags arrive parsed, as the prepare's plan (sglops.bench.plan; the task and the play step run the
    prepare first); a caller that skipped it has its checked flags made into the plan here."""
    from sglops.bench import run
    from sglops.bench.plan import plan_bench

    plan = plan or plan_bench(flags, checked=True)

    if plan.max_rate:
        from sglops.bench.max_rate import run_max_rate

        def keep(res: Any, run_id: str) -> None:
            run.draw_telemetry(res, ctx.draw)
            ctx.keep(res, "bench.json", task="bench", run_id=run_id)

        result = run_max_rate(ctx.remote, plan, ctx.own_run_id, keep, on_progress=ctx.event)
    else:
        result = run.run_bench(ctx.remote, plan, on_progress=ctx.event)
    # recorded by the runner (record=, own_run=)
    result.run_id = ctx.own_run_id
    run.draw_sweep(result, ctx.draw)
    run.draw_max_rate(result, ctx.draw)
    run.draw_telemetry(result, ctx.draw)
    return result


def _bench_prepare(o: dict) -> dict:
    """Every bench flag parsed once, into the plan, before
    any host is touched (a bad one: one line, exit 2)."""
    from sglops.bench.plan import plan_bench

    return {**o, "plan": plan_bench(o, checked=True)}


def _bench_plan(ctx: Context, plan: BenchPlan, **_flags: Any) -> str:
    where = ", ".join(
        f"trace x{plan.trace_speed:g}"
        if lv.get("trace")
        else f"{lv['rate']:g} req/s"
        if lv["rate"]
        else f"C={lv['concurrency']}"
        for lv in plan.levels
    )
    if plan.max_rate:
        where = (
            f"a max-rate search from {plan.request_rate or 1:g} req/s (goodput >= {plan.goodput:.0%} within "
            f"{plan.slo}; at most 8 levels, each a run)"
        )
    per = f"{plan.requests} requests" if plan.requests else "one request per stream"
    api = plan.api or "the serving engine's"
    return (
        f"bench {plan.runs} repeats of {per}, {plan.describe()}, levels {where}, {api} API on "
        f"127.0.0.1:{plan.port or 'the running server'}; recorded as a run"
    )


def _bench_check(result: Any, _o: dict) -> None:
    """A run with failed requests exits 1; a max-rate search only when a level at or below its answer failed
    (past the answer, an overloaded level is what the search looks for)."""
    from sglops.bench import run

    answer = (result.max_rate or {}).get("answer_req_s")
    if result.max_rate:
        result = replace(result, levels=[lv for lv in result.levels if answer and lv.request_rate <= answer])
    run.check([result])


def _bench_summary(doc: dict) -> str:
    lv = (doc.get("levels") or [{}])[0]
    d = lv.get("decode_tok_s") or {}
    if not d:
        return doc.get("status", "")
    lo, hi = (d.get("ci95") or [None, None])[:2]
    ci = f" (95% CI {lo:.2f}-{hi:.2f})" if lo is not None else ""
    return f"decode {d['median']:.2f} tok/s{ci}"


# -- compare --------------------------------------------------------------------------------------------
def compare(
    ctx: Context,
    run_a: str | None = None,
    run_b: str | None = None,
    runs: list[str] | None = None,
    no_chart: bool = False,
    **required: Any,
) -> Comparison:
    """`inv compare A B,C` (run ids) or a play's compare step (its earlier bench steps, or run ids)."""
    from sglops.bench import compare as cmp

    if run_a is not None:
        return cmp.compare_with(
            [*run_a.split(","), *run_b.split(",")],
            required,
            chart=not no_chart,
            draw=ctx.draw,
            run_id=ctx.run_id,
        )
    return cmp.compare_with(_step_runs(ctx, runs), required, out_dir=ctx.folder, draw=ctx.draw)


def _step_runs(ctx: Context, runs: list[str] | None) -> list[Path]:
    from sglops.core import artifacts

    names = _step_names(ctx, runs)
    dirs: list[Path] = []
    for name in names:
        rec = ctx.records.get(name)
        if rec is not None and rec.get("run_dir"):
            dirs.append(Path(rec["run_dir"]))
        elif rec is not None and (rec.get("result") or {}).get("run_id"):
            dirs.append(artifacts.find_run(rec["result"]["run_id"]))
        elif rec is not None:
            raise ConfigError(f"step {ctx.step_id}: step {name} recorded no run to compare")
        else:
            dirs.append(artifacts.find_run(name))
    return dirs


def _step_names(ctx: Context, runs: list[str] | None) -> list[str]:
    names = runs or [sid for sid, rec in ctx.records.items() if rec["do"] == "bench"]
    if len(names) < 2:
        raise ConfigError(f"step {ctx.step_id}: compare needs at least two bench runs (got {names})")
    return names


def _compare_plan(ctx: Context, runs: list[str] | None = None, **_: Any) -> str:
    return f"compare decode tok/s of {', '.join(_step_names(ctx, runs))} (ratios, intervals, verdict, chart)"


def _compare_summary(doc: dict) -> str:
    parts = []
    for r in [r for r in doc.get("rows") or [] if r.get("metric") == "decode tok/s"]:
        ci = r.get("ratio_ci95")
        ci_s = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        parts.append(
            f"decode tok/s {r['base']:.2f} -> {r['other']:.2f} (x{r['ratio']:.3f}{ci_s}): {r['verdict']}"
        )
        ident = ((doc.get("identity") or {}).get(r["run"]) or {}).get("line")
        if ident:
            parts[-1] += f", {ident}"
    return "; ".join(parts)


# -- runs -----------------------------------------------------------------------------------------------
def runs(ctx: Context, host: str | None = None, task: str | None = None) -> RunList:
    from sglops.bench.compare import list_runs

    return list_runs(host, task)


OPS = [
    Op(
        "bench",
        bench,
        "Decode figures measured ON the host (TTFT, ITL, TPOT, decode tok/s, e2e), repeated, kept "
        "under artifacts/\nwith each request's output ids and logprobs (for `inv compare`'s identity check).",
        (
            TARGETS,
            JSON,
            *BENCH,
            *LOADS,
            DRY_RUN.again(
                help="say what would be measured (a play's dry run says the same); run and record nothing"
            ),
        ),
        step="bench",
        plan=_bench_plan,
        check=_bench_check,
        live=Live.BENCH,
        prepare=_bench_prepare,
        record="bench.json",
        own_run=True,
        step_summary=_bench_summary,
    ),
    Op(
        "compare",
        compare,
        "Recorded bench runs against RUN_A (`inv compare A B,C`): ratios, 95% intervals, verdict, "
        "output identity,\nconfig differences, PNG of decode tok/s.",
        (
            Param("run_a", help="baseline run id (or prefix, or folder)", positional=True, play=False),
            Param("run_b", help="run(s) to compare, comma-separated", positional=True, play=False),
            JSON.again(help="print machine-readable JSON"),
            Param("no_chart", Flag(), "skip the PNG chart", flag=False, play=False),
            Param("runs", StrList(), cli=False),
            *COMPARE,
        ),
        step="compare",
        plan=_compare_plan,
        check=_required,
        step_summary=_compare_summary,
        play_shows=True,
    ),
    Op(
        "runs",
        runs,
        "Recorded runs under artifacts/, with each bench's headline decode tok/s.",
        (
            Param("host", help="only this host's runs"),
            Param("task", help="only runs of this task (e.g. bench)"),
            JSON.again(help="JSON"),
        ),
    ),
]
