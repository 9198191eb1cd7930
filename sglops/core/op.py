"""An operation declared once, and the run context it is handed.

Each domain keeps its operations in its own `ops.py` (`OPS = [Op(...), ...]`): the task name, which hosts it
takes, its parameters (kind, default and help together), the function (its return annotation is the result
type: the view follows from it), what a dry run does, what is recorded and a one-line summary. The runners
read those declarations: `tasks.py` (the Invoke tasks, sglops.cli.tasks) and the play engine
(sglops.play.steps), and run an operation through `perform`. Nothing here knows Invoke or a terminal.

    Op("bench", bench_op, "Decode figures measured ON the host ...",
       (TARGETS, JSON, Param("runs", Int(1, 1000, 5), "repeats (default {default})"), ...),
       step="bench", plan=bench_plan, live=Live.BENCH)

    def bench_op(ctx: Context, **options) -> BenchResult: ...

An operation's function is `fn(ctx, **params) -> Result` (a function that also takes `json` is told whether
the task prints JSON: analyze-trace then writes no report.md): `ctx` (a `Context`) names the host, the run,
the folder and whether it is a dry run; the function emits progress through `ctx.event()` and returns its
result; the runner draws progress and records results.
"""

from __future__ import annotations

import ast
import inspect
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from sglops.core import artifacts
from sglops.core.console import Live
from sglops.core.errors import SglopsError
from sglops.core.result import Planned
from sglops.core.values import Flag, Value


@dataclass(frozen=True)
class Param:
    """One parameter of an operation: a task flag (or positional argument) and a play step's `with:` key.

    `help` may use `{default}`, filled from the kind's default. `flag` is what Invoke sees as the default:
    None for value flags (Invoke hands over the string, `kind` checks it), False for switches, or a typed
    default Invoke parses itself."""

    name: str
    # None: passed through as given (checked by the operation itself)
    kind: Value | None = None
    help: str = ""
    flag: Any = None
    positional: bool = False
    # a flag of the task
    cli: bool = True
    # a `with:` key of the play step
    play: bool = True

    def help_text(self) -> str:
        default = getattr(self.kind, "default", None)
        return self.help.replace("{default}", str(default)) if self.help else ""

    def again(self, **changes: Any) -> Param:
        return replace(self, **changes)


@dataclass(frozen=True)
class Marker:
    """Where a group of runner-owned flags sits among a
    task's flags (the order gives Invoke's short flags)."""

    name: str


# --host --hosts --tag --sglang-root --accept-new-host-key --container
TARGETS = Marker("targets")
# one host: --host --sglang-root --accept-new-host-key --container
TARGET = Marker("target")
JSON = Param("json", Flag(), "print machine-readable JSON instead of tables", flag=False, play=False)
# a play's dry run is the play's
DRY_RUN = Param("dry_run", Flag(), "change nothing", flag=False, play=False)


@dataclass(frozen=True)
class Op:
    """One operation: everything a runner needs to offer it as a task and as a play step."""

    # the task: `inv NAME`
    name: str
    # run(ctx, **params) -> Result
    run: Callable[..., Any]
    # one line (the task's docstring)
    summary: str
    params: tuple[Param | Marker, ...] = ()
    # its play step kind, when a play can run it
    step: str | None = None
    # a play's dry run: (ctx, **params) -> what it would do (else it runs)
    plan: Callable[..., str] | None = None
    # the runner saves the result as this file of the run
    record: str | None = None
    # the result is a run of its own (bench, profile, ab): a play step records it too,
    own_run: bool = False
    #                        as `<run-id>-<step>` (sglops.core.artifacts.keep:
    #                        its run_files(), run_manifest())
    # parameters handed to the result's view (show_hits, top)
    view_options: tuple[str, ...] = ()
    # the live display the task draws from ctx.event()
    live: Live | None = None
    # checks before any host is touched; may add options
    prepare: Callable[[dict], dict | None] | None = None
    # raises for a kept result that still fails (exit code)
    check: Callable[[Any, dict], None] | None = None
    # result JSON -> the play's one-line recap
    step_summary: Callable[[dict], str] | None = None
    # without --host it runs here, on no host (render: the script, not checked)
    hostless: bool = False
    # every host's step runs at once (the nodes of one server meet: sglops.launch.deployment)
    together: bool = False
    # Invoke's own task options (auto_shortflags, iterable)
    task: dict = field(default_factory=dict)
    # a play prints the step's result under its line (a comparison, a patch's files)
    play_shows: bool = False
    # (step id, result JSON) -> a play manifest's entries
    manifest: Callable[[str, dict], dict] | None = None

    def prepared(self, params: dict) -> dict:
        """The parameters after the operation's `prepare` (checks before any host is touched; it may add
        options)."""
        return (self.prepare(params) or params) if self.prepare is not None else params

    def checked(self, result: Any, params: dict) -> None:
        """Its `check` on a result (a kept one that still fails raises); a dry run's plan has nothing to
        check."""
        if self.check is not None and not isinstance(result, Planned):
            self.check(result, params)

    def arguments(self, params: dict, json: bool = False) -> dict:
        """The parameters the function takes (a view's options stay with the runner), `json` where it asks."""
        wants = inspect.signature(self.run).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in wants.values())
        args = {k: v for k, v in params.items() if k in wants or takes_any}
        return {**args, "json": json} if "json" in wants else args

    def result_type(self) -> type | None:
        """What its function returns, read from the return annotation (None: it prints its own lines)."""
        return returned_type(self.run)

    @property
    def targets(self) -> str:
        marks = [p.name for p in self.params if isinstance(p, Marker)]
        return marks[0] if marks else "none"

    def fields(self, where: str) -> list[Param]:
        """Its parameters for a runner: "cli" (task flags) or "play" (step keys)."""
        return [p for p in self.params if isinstance(p, Param) and getattr(p, where)]

    def spec(self, where: str) -> dict[str, Value]:
        """The checked parameters (sglops.core.values) of the task or the step."""
        return {p.name: p.kind for p in self.fields(where) if p.kind is not None}


@dataclass(frozen=True)
class Page:
    """A report page (markdown) of a result: its view writes it (a trace's analysis, a trace diff)."""

    of: Any


@dataclass(frozen=True)
class Chart:
    """A chart of a result (a trace's top kernels or CPU ops)."""

    of: Any


@dataclass(frozen=True)
class Curves:
    """Runs drawn as curves: decode tok/s per level (a comparison), or a sweep's levels (`sweep`)."""

    runs: list[dict]
    title: str
    sweep: bool = False


@dataclass(frozen=True)
class RateSearch:
    """A max-rate search (sglops.bench.max_rate): goodput per probed rate and latency against the SLOs."""

    data: dict


@dataclass(frozen=True)
class Frontier:
    """Configurations x load levels on tokens/s per user vs per GPU, the Pareto frontier marked."""

    data: dict


@dataclass(frozen=True)
class Telemetry:
    """GPU telemetry samples over a run, each level's measuring window shaded."""

    data: dict


# How domain code keeps a report file it cannot draw itself (views): draw(figure, path) -> the path written,
# the view found by the figure's type (Page, Chart, Curves, RateSearch, Frontier, Telemetry) and what it is
# of. Runners hand sglops.views.files.draw down; None draws nothing.
Draw = Callable[[Any, Path], Path]


@dataclass
class Context:
    """What an operation is handed: the host, the run it belongs to, dry-run or not, an event sink, save()."""

    # sglops.core.remote.Remote, or None for a local operation
    remote: Any
    run_id: str
    dry_run: bool = False
    # a play step's id: its own runs are `<run-id>-<step>`
    step_id: str | None = None
    # a play's earlier steps: id -> {"do", "result", "run_dir"}
    records: dict[str, dict] = field(default_factory=dict)
    on_event: Callable[[dict], None] | None = None
    # this host is the invocation's only one and a terminal shows it (a play's step lines)
    live: bool = False
    # report files (markdown, charts), drawn by the runner's views
    draw: Draw | None = None
    # every host of this invocation (sglops.core.hosts.Host), this one included
    peers: tuple = ()

    @property
    def host(self) -> str:
        return self.remote.name if self.remote is not None else "local"

    @property
    def own_run_id(self) -> str:
        """The run id of a run this operation records itself
        (a bench, a profile): a play's step gets its own."""
        return f"{self.run_id}-{self.step_id}" if self.step_id else self.run_id

    @property
    def folder(self) -> Path:
        return artifacts.run_dir(self.host, self.run_id)

    @property
    def own_folder(self) -> Path:
        """The folder of `own_run_id` (where a run of its own downloads what it fetches: traces)."""
        return artifacts.run_dir(self.host, self.own_run_id)

    def event(self, ev: dict) -> None:
        if self.on_event is not None:
            self.on_event(ev)

    def save(self, name: str, doc: Any, *, task: str, extra: dict | None = None) -> Path:
        return artifacts.save(self.host, self.run_id, name, doc, task=task, extra=extra)

    def keep(self, result: Any, name: str, *, task: str, run_id: str | None = None) -> Path:
        """Record `result` as a run of its own (default `own_run_id`; ab's rounds name theirs): the runner's
        recording, handed down so an operation made of runs (ab) records each one the same way."""
        return artifacts.keep(self.host, run_id or self.own_run_id, name, result, task=task)

    def keep_run(
        self,
        work: Callable[[], Any],
        name: str,
        *,
        task: str,
        run_id: str | None = None,
        on_kept: Callable[[Any], None] | None = None,
    ) -> Any:
        """`work()`'s result recorded as a run (`keep`, with its seconds); a failure that carries a result
        still worth its record (`exc.kept`: a crashed start, traces not analysed) is recorded and handed to
        `on_kept`, then raised naming the record. The one place a kept failure is read, for every runner."""
        began = time.monotonic()
        try:
            result = work()
        except SglopsError as exc:
            if exc.kept is None:
                raise
            path = artifacts.keep(
                self.host,
                run_id or self.own_run_id,
                name,
                exc.kept,
                task=task,
                extra={"seconds": round(time.monotonic() - began, 3)},
            )
            if on_kept is not None:
                on_kept(exc.kept)
            raise exc.recorded(path) from None
        # a result that only planned records nothing
        if not getattr(result, "dry_run", False):
            artifacts.keep(
                self.host,
                run_id or self.own_run_id,
                name,
                result,
                task=task,
                extra={"seconds": round(time.monotonic() - began, 3)},
            )
        return result


def perform(
    op: Op,
    ctx: Context,
    params: dict,
    *,
    keep: bool,
    check: bool = True,
    json: bool = False,
    on_kept: Callable[[Any], None] | None = None,
) -> Any:
    """THE way an operation runs, for a task's host and a play's step alike (params already `prepared`): a
    dry run of an operation with a `plan` answers that plan, else the function runs; a result the runner
    keeps (`keep`: a task keeps every `record=`, a play the runs of their own) is recorded, a failure still
    worth its record too (`Context.keep_run`); then its `check` (a task checks after printing every host's
    result)."""
    if ctx.dry_run and op.plan is not None:
        return Planned(op.plan(ctx, **params))
    args = op.arguments(params, json)

    def work() -> Any:
        return op.run(ctx, **args)

    # a dry run records nothing
    recorded = keep and op.record is not None and not ctx.dry_run
    result = ctx.keep_run(work, op.record, task=op.name, on_kept=on_kept) if recorded else work()
    if check:
        op.checked(result, params)
    return result


def returned_type(fn: Callable[..., Any]) -> type | None:
    """The class `fn`'s return annotation names. A catalogue module imports its result classes only under
    TYPE_CHECKING (`inv --list` loads no domain module): those imports are run here, when a type is asked
    for."""
    hint = inspect.get_annotations(fn).get("return")
    if hint is None or hint == "None":
        return None
    if not isinstance(hint, str):
        return hint
    module = sys.modules[fn.__module__]
    return eval(hint, {**vars(module), **_type_checking_names(module)})


def _type_checking_names(module: ModuleType) -> dict[str, Any]:
    """The names `module` imports under `if TYPE_CHECKING:`, imported now."""
    tree = ast.parse(inspect.getsource(module))
    body = [
        node
        for top in tree.body
        if isinstance(top, ast.If) and ast.unparse(top.test) == "TYPE_CHECKING"
        for node in top.body
    ]
    names: dict[str, Any] = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), module.__file__ or "<catalogue>", "exec"), names)
    return names


def handed_down(run_id: str | None) -> str:
    """The run id a runner's context handed down: library code never mints one (a call with neither a run id
    nor a folder of its own is a bug, said here rather than hidden behind a second run id)."""
    if not run_id:
        raise TypeError(
            "no run id handed down: a runner mints it (sglops.core.op.new_run_id) and passes it on"
        )
    return run_id


def new_run_id(dry_run: bool = False) -> str:
    """THE place a run id is minted: one per invocation (every host of it, every step of a play)."""
    return artifacts.new_run_id() + ("-dry" if dry_run else "")
