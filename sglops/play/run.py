"""`inv play`: run a play's steps in order on one host, stop at the first failure, resume with --from.

Every run is on record in artifacts/<host>/<run-id>/: play.json (each step's result), a manifest
(host facts, SGLang commit, applied patches with hashes, launch script and arguments, timings), and
the runs that steps made themselves (bench and profile steps record `<run-id>-<step>` runs, so
`inv compare` and `inv report` work on them later).
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text

from sglops.core import artifacts
from sglops.core.console import console, styled
from sglops.core.errors import ConfigError, SglopsError
from sglops.core.op import Context, new_run_id
from sglops.core.remote import Remote
from sglops.play.result import PlayResult, StepRecord
from sglops.play.spec import Play
from sglops.play.steps import STEPS, run_step
from sglops.views.files import draw


def _summary(kind: str, doc: dict) -> str:
    """The step's one line: a planned (dry-run) step says what it would do, never a measured step's summary
    of a result it does not have."""
    plan = doc.get("plan")
    if STEPS[kind].plan is not None and doc.get("dry_run") and isinstance(plan, list) and plan:
        return "; ".join(str(p) for p in plan)
    fn = STEPS[kind].step_summary
    if fn:
        try:
            return fn(doc)
        except (KeyError, TypeError, ValueError, IndexError):
            return ""
    for key in ("summary", "verdict", "message", "plan", "state", "status"):
        if isinstance(doc.get(key), str):
            return doc[key]
    return ""


def _previous(host: str, play: str) -> dict:
    """The last real run of play on host: a dry run changed nothing and measured nothing, so its
    placeholders are never reused as results."""
    runs = [r for r in artifacts.list_runs(host) if r.get("task") == "play" and r.get("play") == play]
    real = [r for r in runs if not r.get("dry_run") and not str(r.get("run_id", "")).endswith("-dry")]
    if not real:
        only_dry = " (only dry runs, which have nothing to resume)" if runs else ""
        raise ConfigError(
            f"nothing to resume: no earlier run of play {play} on {host}{only_dry}; run it without --from"
        )
    return real[-1]


def run_play(
    remote: Remote,
    play: Play,
    *,
    dry_run: bool = False,
    from_step: str | None = None,
    show: bool = True,
    run_id: str | None = None,
) -> PlayResult:
    """Run the play on remote; each step's outcome is recorded as it finishes. run_id: the invocation's
    (a dry run's gets `-dry`); a real resumption continues the run it resumes."""
    start_at = play.index(from_step) if from_step else 0
    records: dict[str, dict] = {}
    if from_step:
        prev = _previous(remote.name, play.name)
        old = {s["id"]: s for s in artifacts.read_json(Path(prev["path"]) / "play.json")["steps"]}
        for step in play.steps[:start_at]:
            if old.get(step.id, {}).get("status") not in ("ok", "reused"):
                raise ConfigError(
                    f"cannot resume run {prev['run_id']} from {from_step}: step {step.id} did not "
                    "succeed there"
                )
        # a dry run of the resumption is a run of its own: it never writes into the real run it plans from
        run_id = (run_id or new_run_id()) + "-dry" if dry_run else prev["run_id"]
    else:
        run_id = (run_id or new_run_id()) + ("-dry" if dry_run else "")
        old = {}
    folder = artifacts.run_dir(remote.name, run_id)
    result = PlayResult(play.name, remote.name, run_id, dry_run, run_dir=str(folder))
    for i, step in enumerate(play.steps):
        if i < start_at:
            prev = old[step.id]
            result.steps.append(
                StepRecord(
                    step.id,
                    step.do,
                    "reused",
                    0,
                    prev.get("summary", ""),
                    None,
                    prev.get("result"),
                    prev.get("run_dir"),
                )
            )
            records[step.id] = {"do": step.do, "result": prev.get("result"), "run_dir": prev.get("run_dir")}
            continue
        label = f"[{i + 1}/{len(play.steps)}] {step.id} ({step.do})"
        ctx = Context(remote, run_id, dry_run, step.id, records, draw=draw)
        began = time.monotonic()
        try:
            if show:
                from sglops.views.live import play_line

                with console.status(Text(f"{label} ...")) as status:
                    ctx.on_event = lambda ev, _s=status, _l=label: _s.update(
                        Text(f"{_l} ... {play_line(ev)}")
                    )
                    value = run_step(STEPS[step.do], ctx, step.params)
            else:
                value = run_step(STEPS[step.do], ctx, step.params)
        except Exception as exc:
            bug = not isinstance(exc, SglopsError)
            error = f"internal error (a bug in sglops): {type(exc).__name__}: {exc}" if bug else str(exc)
            result.steps.append(StepRecord(step.id, step.do, "failed", time.monotonic() - began, error=error))
            if show:
                console.print(styled(label, " ", ("failed", "bold red"), f": {error}"))
            for later in play.steps[i + 1 :]:
                result.steps.append(StepRecord(later.id, later.do, "skipped"))
            # on record (so --from can resume), then the host's outcome is the bug with its traceback
            if bug:
                _record(remote, play, result, folder)
                raise
            break
        doc = value.to_json()
        artifact = getattr(value, "artifact", None) or doc.get("artifact")
        run_dir = (
            doc.get("run_dir") or doc.get("folder") or (str(Path(artifact).parent) if artifact else None)
        )
        rec = StepRecord(
            step.id, step.do, "ok", time.monotonic() - began, _summary(step.do, doc), None, doc, run_dir
        )
        result.steps.append(rec)
        records[step.id] = {"do": step.do, "result": doc, "run_dir": run_dir}
        if show:
            console.print(
                styled(
                    label,
                    " ",
                    ("ok", "green"),
                    f" ({rec.seconds:.1f}s){': ' + rec.summary if rec.summary else ''}",
                )
            )
            if STEPS[step.do].play_shows:
                from sglops.views.show import show as show_result

                show_result(value)
    _record(remote, play, result, folder)
    return result


def _manifest(result: PlayResult) -> dict:
    """What the steps' operations put in the play's manifest (`Op.manifest`: the host's facts, each launch):
    a list gathers every step's entries, any other value is the first step's."""
    out: dict = {"facts": None, "sglang": None, "launch": []}
    for s in result.steps:
        entries = STEPS[s.do].manifest(s.id, s.result) if STEPS[s.do].manifest and s.result else {}
        for key, value in entries.items():
            if isinstance(value, list):
                out[key] = [*(out.get(key) or []), *value]
            elif out.get(key) is None:
                out[key] = value
    return out


def _record(remote: Remote, play: Play, result: PlayResult, folder: Path) -> None:
    """play.json plus the manifest: what ran, on what, with which patches and launch arguments."""
    steps = {s.id: s for s in result.steps}
    patches_applied = None
    if not result.dry_run:
        try:
            from sglops.patch import apply as patches

            patches_applied = patches.applied(remote)
        except SglopsError as exc:
            patches_applied = {"error": str(exc)}
    artifacts.save(
        remote.name,
        result.run_id,
        "play.json",
        result.to_json(),
        task="play",
        extra={
            "play": play.name,
            "play_file": str(play.path),
            "vars": play.vars,
            "dry_run": result.dry_run,
            "ok": result.ok,
            "failed_step": result.failed.id if result.failed else None,
            "status": "dry-run"
            if result.dry_run
            else ("ok" if result.ok else f"failed at {result.failed.id}"),
            **_manifest(result),
            "patches": patches_applied,
            "timings": {sid: round(s.seconds, 3) for sid, s in steps.items()},
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
