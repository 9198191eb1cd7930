"""The `inv play` task's body: load the play once, run it per host, print the recap."""

from __future__ import annotations

from typing import Any

from sglops.core import cli
from sglops.core.errors import ConfigError, Failed


def parse_vars(pairs: list[str] | None) -> dict[str, Any]:
    """`--var runs=3 --var profile=sandbox` -> {"runs": 3, "profile": "sandbox"} (YAML scalars)."""
    from sglops.core.yamlio import loads_yaml

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--var takes KEY=VALUE (got {pair!r})")
        out[key.strip()] = loads_yaml(value, f"--var {key}") if value else ""
    return out


def play_task(name: str, targets: cli.Targets, *, dry_run: bool, from_step: str | None, var: list[str] | None,
              json: bool) -> None:
    from sglops.play.run import PlayResult, run_play
    from sglops.play.spec import load_play

    play = cli.guarded(lambda: load_play(name, cli.guarded(parse_vars, var)))
    if from_step:
        cli.guarded(play.index, from_step)  # a step that is not in the play is refused before any host is touched
    # live per-step progress for one host; with several, rich can drive only one live display, so each
    # host's play runs quietly and its table is printed when it is done
    show = not json and len(cli.guarded(targets.resolve)) == 1

    def stopped(result: PlayResult) -> None:
        step = result.failed
        if step:
            raise Failed(f"{result.host}: play {result.play} stopped at step {step.id}: {step.error}; fix it, "
                         f"then resume: inv play {name} --host {result.host} --from {step.id}")

    cli.per_host("play", targets, lambda r: run_play(r, play, dry_run=dry_run, from_step=from_step, show=show),
                 json=json, check=stopped)
