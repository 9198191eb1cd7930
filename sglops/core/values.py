"""Values from flags and play files, checked in one place before any host is touched.

Invoke hands flags over as strings (tasks declare no typed defaults, so Invoke never parses a
number itself and never dies in a traceback on `--runs abc`); a play's `with:` hands over YAML
scalars. Both go through the same specs here, so `inv bench --runs 0` and a play step
`bench: {runs: 0}` are refused with the same one line, and the library gets clean types.

    opts = check({"runs": Int(1, 1000, 5), "port": Port()}, {"runs": "3"})   # {"runs": 3, "port": None}

The parameters of each operation are declared with their operation (sglops.core.op.Param, in each domain's
ops.py); this module has the kinds and the check.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglops.core.errors import ConfigError

# 1,048,576 tokens: beyond any model's context
MAX_TOKENS = 1 << 20
# Characters that end a line somewhere (a shell, an editor, a terminal, a log reader) or move a terminal's
# cursor: the C0 and C1 controls (NUL, CR, LF, NEL U+0085, ...), DEL and the Unicode line and paragraph
# separators.
LINE_BREAKERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def line_breaker(text: str) -> str | None:
    """The first character of text that could end a line (as U+XXXX), or None."""
    m = LINE_BREAKERS.search(text)
    return f"U+{ord(m.group()):04X}" if m else None


def one_line(text: Any, label: str) -> Any:
    """text itself when no character of it can end a line; else one line naming label and the character.

    Every value that reaches a launch script, a profile name or a sweep candidate passes here: such a value
    becomes a script line's words, and a line break in it would start a line of its own."""
    if isinstance(text, str):
        bad = line_breaker(text)
        if bad:
            raise ConfigError(
                f"{label} holds a control character ({bad}) at {LINE_BREAKERS.search(text).start()}: "
                f"a value stays on one line (got {_shown(text)})"
            )
    return text


def flag_label(name: str) -> str:
    """How a parameter is named on the command line: output_len -> --output-len."""
    return "--" + name.replace("_", "-")


class Value:
    """One parameter: its default, and how a raw flag string or YAML scalar becomes a clean value."""

    default: Any = None

    def check(self, raw: Any, label: str) -> Any:
        if raw is None:
            return self.default
        return self.parse(raw, label)

    def parse(self, raw: Any, label: str) -> Any:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def refuse(self, label: str, what: str, raw: Any) -> ConfigError:
        return ConfigError(f"{label} must be {what} (got {_shown(raw)})")


def _shown(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Int(Value):
    lo: int
    hi: int
    default: int | None = None

    def parse(self, raw: Any, label: str) -> int:
        what = f"a whole number from {self.lo} to {self.hi}"
        if isinstance(raw, bool):
            raise self.refuse(label, what, raw)
        if isinstance(raw, float) and raw.is_integer():
            raw = int(raw)
        if isinstance(raw, str):
            text = raw.strip().replace("_", "")
            if not re.fullmatch(r"[+-]?\d{1,19}", text):
                raise self.refuse(label, what, raw)
            raw_int = int(text)
        elif isinstance(raw, int):
            raw_int = raw
        else:
            raise self.refuse(label, what, raw)
        if not self.lo <= raw_int <= self.hi:
            raise self.refuse(label, what, raw)
        return raw_int


@dataclass(frozen=True)
class Float(Value):
    lo: float
    hi: float
    default: float | None = None

    def parse(self, raw: Any, label: str) -> float:
        what = f"a number from {self.lo:g} to {self.hi:g}"
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise self.refuse(label, what, raw)
        try:
            value = float(raw)
        except ValueError:
            raise self.refuse(label, what, raw) from None
        if math.isnan(value) or not self.lo <= value <= self.hi:
            raise self.refuse(label, what, raw)
        return value


@dataclass(frozen=True)
class Port(Int):
    lo: int = 1
    hi: int = 65535
    default: int | None = None


@dataclass(frozen=True)
class Choice(Value):
    options: tuple[str, ...]
    default: str | None = None

    def parse(self, raw: Any, label: str) -> str:
        if not isinstance(raw, str) or raw not in self.options:
            raise self.refuse(label, "one of " + ", ".join(self.options), raw)
        return raw


@dataclass(frozen=True)
class Str(Value):
    """Free text (a path, a commit): a non-empty string without control characters."""

    default: str | None = None

    def parse(self, raw: Any, label: str) -> str:
        if not isinstance(raw, str) or not raw.strip() or LINE_BREAKERS.search(raw):
            raise self.refuse(label, "a non-empty string on one line", raw)
        return raw


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


@dataclass(frozen=True)
class Name(Value):
    """The name of something sglops keeps in a folder (a patch, profile, kernel): never a path."""

    what: str = "name"
    default: str | None = None

    def parse(self, raw: Any, label: str) -> str:
        if not isinstance(raw, str) or not _NAME.fullmatch(raw) or ".." in raw:
            raise self.refuse(label, f"a {self.what} name (letters, digits, . _ + -; not a path)", raw)
        return raw


@dataclass(frozen=True)
class NameOrFile(Name):
    """A name as above, or the path of a YAML file (a profile or play kept outside the repo)."""

    def parse(self, raw: Any, label: str) -> str:
        if isinstance(raw, str) and raw.endswith((".yaml", ".yml")) and Str().check(raw, label):
            return raw
        if not isinstance(raw, str) or not _NAME.fullmatch(raw) or ".." in raw:
            raise self.refuse(label, f"a {self.what} name (letters, digits, . _ + -) or a .yaml file", raw)
        return raw


@dataclass(frozen=True)
class Flag(Value):
    default: bool = False

    def parse(self, raw: Any, label: str) -> bool:
        if not isinstance(raw, bool):
            raise self.refuse(label, "true or false", raw)
        return raw


@dataclass(frozen=True)
class IntList(Value):
    """`1,4,16` (a flag), 4 or [1, 4, 16] (YAML): distinct whole numbers in a range, in the order given."""

    lo: int
    hi: int
    default: Any = None

    def parse(self, raw: Any, label: str) -> list[int]:
        items = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]
        one = Int(self.lo, self.hi)
        # `1,,4` or `4,`: a typo, not a list
        if any(isinstance(x, str) and not x.strip() for x in items):
            raise self.refuse(
                label, f"whole numbers from {self.lo} to {self.hi} like 1,4,16 (no empty item)", raw
            )
        try:
            values = [one.parse(x, label) for x in items]
        except ConfigError:
            raise self.refuse(label, f"whole numbers from {self.lo} to {self.hi} like 1,4,16", raw) from None
        if not values:
            raise self.refuse(label, f"whole numbers from {self.lo} to {self.hi} like 1,4,16", raw)
        return list(dict.fromkeys(values))


@dataclass(frozen=True)
class StrList(Value):
    """`a,b` (a flag) or [a, b] (YAML): non-empty strings."""

    default: Any = None

    def parse(self, raw: Any, label: str) -> list[str]:
        items = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else None
        if items is None or not items or not all(isinstance(x, str) and x.strip() for x in items):
            raise self.refuse(label, "a list of names like a,b", raw)
        for x in items:
            one_line(x, label)
        return [x.strip() for x in items]


@dataclass(frozen=True)
class Required(Value):
    """A parameter that has no default: leaving it out is refused."""

    kind: Value

    def check(self, raw: Any, label: str) -> Any:
        if raw is None:
            raise ConfigError(f"{label} is required")
        return self.kind.parse(raw, label)


Spec = Mapping[str, Value]


def check(spec: Spec, raw: Mapping[str, Any], *, label: Callable[[str], str] = flag_label) -> dict[str, Any]:
    """Every parameter of spec, checked and converted; a missing one takes its default."""
    unknown = sorted(set(raw) - set(spec))
    if unknown:
        raise ConfigError(
            f"{label(unknown[0])} is not a parameter here; known: {', '.join(sorted(spec)) or 'none'}"
        )
    return {name: kind.check(raw.get(name), label(name)) for name, kind in spec.items()}


def checked(spec: Spec, **raw: Any) -> dict[str, Any]:
    """check() for flags given as keyword arguments (the tasks' way)."""
    return check(spec, raw)
