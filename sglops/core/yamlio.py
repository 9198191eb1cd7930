"""YAML loading that remembers line numbers, so config errors can say `file:line`, and refuses what no config
needs: duplicate keys (a second `hosts:` silently replacing the first), unhashable keys, nesting deeper than
MAX_DEPTH, documents that expand through aliases past MAX_NODES (a "billion laughs" of 9 levels x 10 aliases
is 90 aliases and 10^9 nodes once anything walks it), and files over MAX_BYTES. Each ends in one ConfigError
line.

PyYAML's own loader is pure Python (the line numbers and the checks need its composer): the probe set takes it
0.1-0.25 s, on every command that reads it. A file read once is kept parsed (`marshal`, the format of Python's
own `.pyc` caches, in the cache folder `yaml/`) under the hash of its text and name, and read back from there
while it is the same text: every check ran when it was parsed, and an error is never kept.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any

from sglops.core.errors import ConfigError

# the largest inventory, profile or play: far beyond any real one
MAX_BYTES = 8 * 2**20
# levels of nesting (PyYAML itself recurses ~3 frames a level)
MAX_DEPTH = 64
# nodes once every alias is expanded
MAX_NODES = 200_000


class LineDict(dict):
    """A mapping from YAML that knows the file and line it started on."""

    file: str = "?"
    line: int = 0

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Nodes in the document once every alias is expanded
    (aliases share nodes: counted per use, computed once)."""
    import yaml

    key = id(node)
    if key not in memo:
        # a recursive alias (`&a [*a]`) counts once rather than forever
        memo[key] = 0
        if isinstance(node, yaml.SequenceNode):
            memo[key] = 1 + sum(_expanded_size(n, memo) for n in node.value)
        elif isinstance(node, yaml.MappingNode):
            memo[key] = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
        else:
            memo[key] = 1
    return memo[key]


def _loader_for(file: str) -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{file}:{mark.line + 1}: nested deeper than {MAX_DEPTH} levels; no sglops file needs"
                    " that"
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def get_single_node(self):  # noqa: ANN201
            node = super().get_single_node()
            if node is not None and _expanded_size(node, {}) > MAX_NODES:
                raise ConfigError(
                    f"{file}: expands to more than {MAX_NODES:,} values through its aliases (&/*); "
                    "write the values out or use fewer aliases"
                )
            return node

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
        seen: dict[Any, int] = {}
        # the keys as written: merged (`<<: *base`) keys may be overridden
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                dup = key in seen
            except TypeError:
                what = (
                    "mapping"
                    if isinstance(key, dict)
                    else "list"
                    if isinstance(key, list)
                    else type(key).__name__
                )
                raise ConfigError(f"{file}:{line}: a {what} cannot be a mapping key") from None
            if dup:
                raise ConfigError(
                    f"{file}:{line}: duplicate key {key!r} (first at line {seen[key]}); "
                    "the second would silently replace the first"
                )
            seen[key] = line
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
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(
                f"{path}: {path.stat().st_size:,} bytes; sglops reads YAML files up to {MAX_BYTES:,}"
            )
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); save it as UTF-8"
        ) from None
    return _kept_parse(text, str(path))


# a change to what a parse yields (LineDict's fields, the checks) bumps it
_KEPT_FORMAT = b"sglops-yaml-1"


def _kept_parse(text: str, file: str) -> Any:
    """loads_yaml(text, file), read back from the cache when this very text of this file was parsed before."""
    from sglops.core import paths

    key = hashlib.sha256(
        b"\0".join((_KEPT_FORMAT, sys.implementation.cache_tag.encode(), file.encode(), text.encode()))
    ).hexdigest()
    kept = paths.cache("yaml") / f"{key[:40]}.marshal"
    try:
        tag, frozen = marshal.loads(kept.read_bytes())
        if tag == _KEPT_FORMAT:
            return _thawed(frozen, file)
    # none yet, or not one of ours: parsed (and kept) again
    except (OSError, EOFError, ValueError, TypeError):
        pass
    data = loads_yaml(text, file)
    frozen = _frozen(data, set())
    if frozen is not _UNKEPT:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps((_KEPT_FORMAT, frozen)))
            os.replace(tmp, kept)
        except OSError:
            # a read-only cache: parsed again next time
            pass
    return data


# a value marshal cannot keep as it is (a date, one object reached twice through an alias)
_UNKEPT = object()


def _frozen(value: Any, seen: set[int]) -> Any:
    """A parse as marshal keeps it: each LineDict as the tuple (line, key, value, key, value, ...) (a parse
    has no tuples of its own); _UNKEPT for what would not come back the same."""
    if isinstance(value, str | int | float | bytes | None):
        return value
    if isinstance(value, list | dict | set):
        # an alias: read back, it would be two objects
        if id(value) in seen:
            return _UNKEPT
        seen.add(id(value))
    if isinstance(value, LineDict):
        out: list = [value.line]
        for k, v in value.items():
            fk, fv = _frozen(k, seen), _frozen(v, seen)
            if fk is _UNKEPT or fv is _UNKEPT:
                return _UNKEPT
            out += (fk, fv)
        return tuple(out)
    if type(value) is list:
        items = [_frozen(v, seen) for v in value]
        return _UNKEPT if any(v is _UNKEPT for v in items) else items
    if type(value) is set and all(isinstance(v, str | int | float | bytes | None) for v in value):
        return value
    return _UNKEPT


def _thawed(value: Any, file: str) -> Any:
    """The parse back from _frozen's form."""
    if type(value) is tuple:
        d = LineDict()
        for i in range(1, len(value), 2):
            d[_thawed(value[i], file)] = _thawed(value[i + 1], file)
        d.file, d.line = file, value[0]
        return d
    if type(value) is list:
        return [_thawed(v, file) for v in value]
    return value


def loads_yaml(text: str, file: str = "<string>") -> Any:
    import yaml

    if len(text) > MAX_BYTES:
        raise ConfigError(f"{file}: {len(text):,} characters; sglops reads YAML up to {MAX_BYTES:,}")
    try:
        return yaml.load(text, Loader=_loader_for(file))  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{file}{line}: malformed YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: malformed YAML: {exc}") from None
    # flow-style nesting recurses in PyYAML's parser before compose_node sees it
    except RecursionError:
        raise ConfigError(f"{file}: nested deeper than Python can read; no sglops file needs that") from None


def check_fields(
    d: dict, allowed: set[str], what: str, required: set[str] = frozenset(), within: str | None = None
) -> None:
    """Refuse unknown or missing fields with the file and line of the mapping (`within`: the file, for a
    value that is not a mapping and so has no line of its own)."""
    where = d.where if isinstance(d, LineDict) else what
    if not isinstance(d, dict):
        shown = repr(d) if len(repr(d)) <= 60 else repr(d)[:57] + "..."
        raise ConfigError(
            f"{within + ': ' if within else ''}{what} must be a mapping, got {type(d).__name__} {shown}"
        )
    unknown = sorted(str(k) for k in set(d) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field {unknown[0]!r} in {what} (allowed: {', '.join(sorted(allowed))})"
        )
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
        raise ConfigError(
            f"{where}: {key} in {what} must be a list (got {type(value).__name__} {value!r:.60})"
        )
    return value
