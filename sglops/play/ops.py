"""The play family's operations: play (a YAML play of the other operations), report, demo."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglops.core.errors import ConfigError, Failed
from sglops.core.op import DRY_RUN, JSON, TARGETS, Context, Op, Param
from sglops.core.values import Flag

if TYPE_CHECKING:
    from sglops.play.result import PlayResult, Written


def parse_vars(pairs: list[str] | None) -> dict[str, Any]:
    """`--var runs=3 --var profile=sandbox` -> {"runs": 3, "profile": "sandbox"} (YAML scalars)."""
    from sglops.core.values import one_line
    from sglops.core.yamlio import loads_yaml

    out: dict[str, Any] = {}
    for pair in pairs or []:
        one_line(pair, "--var")
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--var takes KEY=VALUE (got {pair!r})")
        loaded = loads_yaml(value, f"--var {key}") if value else ""
        out[key.strip()] = one_line(loaded, f"--var {key.strip()}")
    return out


def _load(o: dict) -> dict:
    """The play, loaded and checked once before any host
    is touched (so is a --from step that is not in it)."""
    from sglops.play.spec import load_play

    play = load_play(o["name"], parse_vars(o["var"]))
    if o["from_"]:
        play.index(o["from_"])
    return {**o, "loaded": play}


def play(
    ctx: Context, name: str, from_: str | None = None, var: list[str] | None = None, loaded: Any = None
) -> PlayResult:
    from sglops.play.run import run_play

    play = loaded or _load({"name": name, "from_": from_, "var": var})["loaded"]
    return run_play(ctx.remote, play, dry_run=ctx.dry_run, from_step=from_, show=ctx.live, run_id=ctx.run_id)


def _stopped(result: Any, o: dict) -> None:
    step = result.failed
    if step:
        raise Failed(
            f"{result.host}: play {result.play} stopped at step {step.id}: {step.error}; fix it, then resume:"
            f" inv play {o['name']} --host {result.host} --from {step.id}"
        )


def report(ctx: Context, run: str, output: str | None = None, html: bool = False) -> Written:
    from sglops.play.result import Written

    if html:
        from sglops.views.html_report import write_html

        return Written(write_html(run, output))
    from sglops.views.report import write_report

    return Written(write_report(run, output))


def demo(ctx: Context, keep: bool = False) -> None:
    from sglops.play.demo import run_demo

    if run_demo(keep=keep):
        raise Failed("demo failed")


OPS = [
    Op(
        "play",
        play,
        "Run a play (playbooks/NAME.yaml): its steps in order, stop at the first failure, --from resumes.",
        (
            Param("name", help="", positional=True),
            TARGETS,
            DRY_RUN.again(help="print the plan and the changes each step would make"),
            Param("from_", help="resume the last run of this play at this step"),
            Param("var", help="override a play variable: --var profile=sandbox (repeatable)"),
            JSON,
        ),
        prepare=_load,
        check=_stopped,
        task={"iterable": ["var"]},
    ),
    Op(
        "report",
        report,
        "Write a markdown report of a recorded run (a play, bench, profile...) with its charts.",
        (
            Param("run", help="a run id (or unique prefix, or its folder)", positional=True),
            Param("output", help="where to write (default RUN/run-report.md, or .html)"),
            Param(
                "html",
                Flag(),
                "one self-contained HTML page instead (inline SVG charts, stand-in rows marked, trace "
                "links; opens with no network)",
                flag=False,
            ),
        ),
    ),
    Op(
        "demo",
        demo,
        "The README's main job: a local sandbox GPU host, the fp8-kv-decode investigation end to end, "
        "torn down.",
        (Param("keep", Flag(), "leave the sandbox running afterwards", flag=False),),
    ),
]
