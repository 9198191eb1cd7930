"""Plays: an investigation as YAML (playbooks/<name>.yaml), checked whole before anything runs.

    name: fp8-kv-decode
    description: ...
    vars: {runs: 5, output_len: 256}
    steps:
      - id: baseline-bench
        do: bench
        with: {runs: "{{ runs }}", output_len: "{{ output_len }}"}

`with` values may use `{{ var }}` (Jinja2, StrictUndefined) over `vars` and `--var k=v` overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, TemplateError, Undefined, UndefinedError, nodes
from jinja2.nativetypes import NativeEnvironment
from jinja2.sandbox import ImmutableSandboxedEnvironment

from sglops.core import paths, redact
from sglops.core.errors import ConfigError
from sglops.core.yamlio import check_fields, load_yaml

PLAYBOOKS = paths.shipped("playbooks")


class _PlayEnvironment(ImmutableSandboxedEnvironment, NativeEnvironment):
    """Jinja2's immutable sandbox (no attribute walks to
    `__globals__`, no mutation) rendering native types."""


_env = _PlayEnvironment(undefined=StrictUndefined)
# no range, lipsum, cycler, joiner, namespace: a value sees the play's variables only
_env.globals.clear()
# A play is data that gets shared: a value may name a variable (`{{ runs }}`, `{{ cfg.port }}`, `{{ xs[0] }}`)
# and nothing else. No calls, filters, operators, loops or blocks: `{{ 'a' * 10**10 }}` would need no
# attribute walk to take the machine down, so the sandbox alone is not enough.
_DATA_NODES = (
    nodes.Template,
    nodes.Output,
    nodes.TemplateData,
    nodes.Name,
    nodes.Const,
    nodes.Getattr,
    nodes.Getitem,
)


def _only_names(value: str, where: str) -> None:
    """Refuse a template that is more than variable references (checked before anything renders)."""
    tree = _env.parse(value)
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, _DATA_NODES) or (
            isinstance(node, nodes.Getattr) and node.attr.startswith("_")
        ):
            what = type(node).__name__.lower()
            raise ConfigError(
                f"{where}: {value!r:.80}: a play value may only name variables ({{{{ name }}}}); "
                f"no code ({what}) runs from a play"
            )


@dataclass
class Step:
    """One step: which function (`do`), its parameters (`with`), where it was written."""

    id: str
    do: str
    params: dict[str, Any]
    where: str
    description: str = ""


@dataclass
class Play:
    name: str
    description: str
    steps: list[Step]
    vars: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def index(self, step_id: str) -> int:
        for i, step in enumerate(self.steps):
            if step.id == step_id:
                return i
        raise ConfigError(
            f"play {self.name} has no step {step_id!r}; steps: {', '.join(s.id for s in self.steps)}"
        )


def play_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = paths.find("playbooks", f"{name}.yaml")
    if candidate.exists():
        return candidate
    known = [p.stem for p in paths.listing("playbooks", "*.yaml") if _is_play(p)]
    raise ConfigError(f"no play {name!r}; plays in {PLAYBOOKS}: {', '.join(known) or 'none'}")


def _is_play(path: Path) -> bool:
    try:
        doc = load_yaml(path)
    except ConfigError:
        return False
    return isinstance(doc, dict) and "steps" in doc


def render_value(value: Any, variables: dict[str, Any], where: str) -> Any:
    """`{{ var }}` in strings (recursively), keeping native types: "{{ runs }}" -> 5."""
    if isinstance(value, str) and "{{" in value:
        try:
            _only_names(value, where)
            out = _env.from_string(value).render(**variables)
            # a lone "{{ name }}" renders natively to the Undefined itself
            if isinstance(out, Undefined):
                out._fail_with_undefined_error()
            return out
        except UndefinedError as exc:
            raise ConfigError(f"{where}: {exc.message} (define it under vars: or pass --var)") from None
        except TemplateError as exc:
            raise ConfigError(f"{where}: bad template {value!r}: {exc.message or exc}") from None
    if isinstance(value, dict):
        return {k: render_value(v, variables, where) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, variables, where) for v in value]
    return value


def load_play(name: str, overrides: dict[str, Any] | None = None) -> Play:
    """Read and check a play: known step kinds, known parameters, unique ids, defined vars."""
    path = play_path(name)
    doc = load_yaml(path)
    check_fields(doc, {"name", "description", "vars", "steps"}, "play", required={"steps"}, within=str(path))
    where = getattr(doc, "where", str(path))
    for key in ("name", "description"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise ConfigError(f"{where}: {key} must be text (got {doc[key]!r})")
    if not isinstance(doc.get("vars") or {}, dict):
        raise ConfigError(f"{where}: vars must be a mapping of name: value (got {doc['vars']!r})")
    if not isinstance(doc["steps"] or [], list):
        raise ConfigError(f"{where}: steps must be a list of steps (got {doc['steps']!r})")
    variables = {**(doc.get("vars") or {}), **(overrides or {})}
    # a play's `hf_token:` (or --var hf_token=...) is never shown
    redact.register_named(variables)
    steps = [_step(raw, path, variables) for raw in doc["steps"] or []]
    seen: set[str] = set()
    for step in steps:
        if step.id in seen:
            raise ConfigError(f"{step.where}: step id {step.id!r} is used twice (give each an id:)")
        seen.add(step.id)
    if not steps:
        raise ConfigError(f"{path}: the play has no steps")
    return Play(doc.get("name") or path.stem, doc.get("description") or "", steps, variables, path)


def _step(raw: Any, path: Path, variables: dict[str, Any]) -> Step:
    """One `steps:` entry, its kind known and its `with:` values checked like the task's flags."""
    from sglops.core import values
    from sglops.play.steps import STEPS

    check_fields(raw, {"id", "do", "with", "description"}, "step", required={"do"}, within=str(path))
    where = getattr(raw, "where", str(path))
    kind = raw["do"]
    if not isinstance(kind, str) or kind not in STEPS:
        raise ConfigError(f"{where}: unknown step {kind!r}; steps are: {', '.join(sorted(STEPS))}")
    step_id = raw.get("id") or kind
    if not isinstance(step_id, str | int) or isinstance(step_id, bool):
        raise ConfigError(f"{where}: id must be a name (got {step_id!r})")
    step_id = str(step_id)
    given = raw.get("with") or {}
    if not isinstance(given, dict):
        raise ConfigError(f"{where}: with must be a mapping of parameter: value (got {given!r})")
    params = render_value(dict(given), variables, where)
    accepted = STEPS[kind].spec("play")
    unknown = sorted(str(k) for k in set(params) - set(accepted))
    if unknown:
        raise ConfigError(
            f"{where}: step {step_id} ({kind}) has no parameter {unknown[0]!r}; "
            f"it takes: {', '.join(sorted(accepted)) or 'none'}"
        )
    params = values.check(accepted, params, label=lambda p: f"{where}: step {step_id} ({kind}): {p}")
    return Step(step_id, kind, params, where, str(raw.get("description") or ""))
