"""The trace family's operations: profile (on a host), analyze-trace and diff-trace (local files)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglops.core.console import Live
from sglops.core.op import DRY_RUN, JSON, TARGETS, Context, Op, Param
from sglops.core.values import MAX_TOKENS, Flag, Float, Int, Port, Str

if TYPE_CHECKING:
    from sglops.trace.analysis import TraceAnalysis
    from sglops.trace.diff import TraceDiff
    from sglops.trace.profile import ProfileResult


def profile(
    ctx: Context,
    steps: int,
    output_len: int,
    port: int | None,
    wait: float,
    activities: str | None = None,
    with_stack: bool = False,
    record_shapes: bool = False,
    by_stage: bool = False,
    chart: bool = True,
    vocab_size: int | None = None,
    stack: bool = False,
    probe: str | None = None,
) -> ProfileResult:
    """On the nodes of one server (--hosts n0,n1), node 0 profiles, every node pulls its own ranks' traces and
    the analysis covers every rank."""
    from sglops.core.meet import Meeting, one_server
    from sglops.trace.profile import run_profile

    kw = {
        "steps": steps,
        "output_len": output_len,
        "port": port,
        "wait_s": wait,
        "on_progress": ctx.event,
        "activities": activities,
        "with_stack": with_stack or stack,
        "record_shapes": record_shapes,
        "by_stage": by_stage,
        "chart": chart,
        "vocab_size": vocab_size,
        "run_id": ctx.own_run_id,
        "draw": ctx.draw,
        "probe": probe,
    }
    if not one_server(ctx.peers):
        return run_profile(ctx.remote, **kw)
    meeting = Meeting.of(ctx.run_id, "profile", [h.name for h in ctx.peers])
    first = ctx.remote.host.node_rank == 0
    node = {
        "profile_id": ctx.own_run_id,
        "output_dir": f"/tmp/sglops-profiles/{ctx.own_run_id}",
        **({"own_ranks_only": True} if first else {"collect_only": True}),
    }

    def together(mine: list[str]) -> list[str]:
        every = meeting.gather("traces", ctx.remote.name, mine, timeout=wait + 600)
        return sorted(p for paths in every.values() for p in paths) if first else mine

    try:
        return run_profile(ctx.remote, **kw, node=node, together=together)
    except BaseException:
        meeting.leave(ctx.remote.name)
        raise


def _profile_plan(ctx: Context, steps: int, output_len: int, **_: object) -> str:
    return (
        f"profile {steps} decode steps of a {output_len}-token single-stream request, pull the traces back"
        " and analyse them"
    )


def _profile_summary(doc: dict) -> str:
    analysis = doc.get("analysis") or {}
    findings = analysis.get("findings") or []
    cpu = (analysis.get("cpu") or {}).get("verdict") or []
    if findings:
        return findings[0]["message"]
    return f"CPU only: {cpu[0]}" if cpu and not analysis.get("gpu") else "no bottleneck rule fired"


def analyze_trace(
    ctx: Context,
    files: str,
    out: str | None = None,
    chart: bool = False,
    json: bool = False,
    probe: str | None = None,
) -> TraceAnalysis:
    from sglops.trace.analysis import analyze_to

    analysis, saved = analyze_to(
        files, out, markdown=not json, chart=chart, run_id=ctx.run_id, draw=ctx.draw, probe=probe
    )
    analysis.report = saved
    return analysis


def diff_trace(ctx: Context, a: str, b: str, top: int = 12) -> TraceDiff:
    from sglops.trace.diff import diff_specs

    return diff_specs(a, b)


PROBE = Param(
    "probe",
    Str(),
    "probe record to join source lines with: a probe.json, its folder or the run id of "
    "inv probe-backends (default: the host's newest one of the same SGLang version)",
    play=False,
)


def _off(name: str, help: str) -> Param:
    return Param(name, Flag(), help, flag=False, play=False)


OPS = [
    Op(
        "analyze-trace",
        analyze_trace,
        "GPU kernels / launching ops / steps / idle and the CPU side (scheduler phases, ops by self time).",
        (
            Param(
                "files",
                help="trace files: comma-separated, a folder, or a quoted glob (plain or .gz Chrome traces)",
                positional=True,
            ),
            Param(
                "out",
                help=(
                    "folder for analysis.json, report.md (and the chart) (default artifacts/local/<run-id>/)"
                ),
            ),
            JSON.again(help="print machine-readable JSON instead of tables (writes analysis.json only)"),
            _off("chart", "also draw a PNG bar chart (top kernels, or top CPU ops on a CPU-only trace)"),
            PROBE,
        ),
    ),
    Op(
        "diff-trace",
        diff_trace,
        "What changed between two profiles: per step, kernel, launching op and CPU phase, ranked by change.",
        (
            Param(
                "a",
                help=(
                    "baseline: a profile run id, a folder of traces, files (comma-separated) or a quoted glob"
                ),
                positional=True,
            ),
            Param("b", help="the other side, the same way", positional=True),
            JSON.again(help="print machine-readable JSON instead of tables"),
            Param("top", Int(1, 10_000, 12), "rows per table (default {default})"),
        ),
        view_options=("top",),
    ),
    Op(
        "profile",
        profile,
        "Torch-profile a decode on the host's SGLang, fetch every rank's trace, analyse GPU and CPU, "
        "record the run.",
        (
            TARGETS,
            JSON,
            Param(
                "steps",
                Int(1, 1000, 5),
                "forward steps to profile (the profiler stops itself after them; default {default})",
            ),
            Param(
                "output_len",
                Int(1, MAX_TOKENS, 64),
                "tokens the single decode stream generates (default {default})",
            ),
            Param("port", Port(), "server port (default: the launch state on the host, else 30000)"),
            Param("wait", Float(1, 86400, 120.0), "seconds to wait for complete trace files (default 120)"),
            Param("activities", help="CPU,GPU (default; CPU alone on a CPU server), MEM", play=False),
            _off("with_stack", "record Python stacks (off: they are most of a trace's events)"),
            _off("record_shapes", "record op input shapes"),
            _off("by_stage", "SGLang's profile_by_stage: one file per rank for EXTEND and one for DECODE"),
            _off("chart", "also draw the PNG chart"),
            Param(
                "vocab_size",
                Int(2, 1 << 24),
                "the model's vocabulary when the host has no config.json for it",
                play=False,
            ),
            Param(
                "stack",
                Flag(),
                "record Python stacks (SGLang's with_stack; same as --with-stack) to see the SGLang "
                "source line of each hot kernel",
                flag=False,
            ),
            PROBE,
            DRY_RUN.again(
                help="say what would be profiled (a play's dry run says the same); change and record nothing"
            ),
        ),
        step="profile",
        plan=_profile_plan,
        live=Live.PROFILE,
        step_summary=_profile_summary,
        record="profile.json",
        own_run=True,
        together=True,
    ),
]
