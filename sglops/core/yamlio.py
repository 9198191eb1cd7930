"""YAML loading that remembers line numbers, so config errors can say `file:line`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sglops.core.errors import ConfigError


class LineDict(dict):
    """A mapping from YAML that knows the file and line it started on."""

    file: str = "?"
    line: int = 0

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _loader_for(file: str) -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
        loader.flatten_mapping(node)
        d = LineDict(loader.construct_pairs(node, deep=True))
        d.file, d.line = file, node.start_mark.line + 1
        return d

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return Loader


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file; malformed YAML raises ConfigError naming file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save it as UTF-8") from None
    return loads_yaml(text, str(path))


def loads_yaml(text: str, file: str = "<string>") -> Any:
    try:
        return yaml.load(text, Loader=_loader_for(file))  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{file}{line}: malformed YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: malformed YAML: {exc}") from None


def check_fields(d: dict, allowed: set[str], what: str, required: set[str] = frozenset(),
                 within: str | None = None) -> None:
    """Refuse unknown or missing fields with the file and line of the mapping (`within`: the file, for a
    value that is not a mapping and so has no line of its own)."""
    where = d.where if isinstance(d, LineDict) else what
    if not isinstance(d, dict):
        shown = repr(d) if len(repr(d)) <= 60 else repr(d)[:57] + "..."
        raise ConfigError(f"{within + ': ' if within else ''}{what} must be a mapping, got {type(d).__name__} {shown}")
    unknown = sorted(str(k) for k in set(d) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} in {what} (allowed: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(d))
    if missing:
        raise ConfigError(f"{where}: {what} is missing {missing[0]!r}")


def list_field(d: dict, key: str, what: str) -> list:
    """d[key] as a list (absent or empty: []); anything else is refused with the mapping's file:line."""
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        where = d.where if isinstance(d, LineDict) else what
        raise ConfigError(f"{where}: {key} in {what} must be a list (got {type(value).__name__} {value!r:.60})")
    return value
