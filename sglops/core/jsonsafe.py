"""Values from a server or a dataset as JSON that can always be written: orjson refuses integers past 64 bits
(`Integer exceeds 64-bit range`), so a record of a run
would be lost over one wide count. They are kept as text."""

from __future__ import annotations

from typing import Any

import orjson

_LO, _HI = -(1 << 63), (1 << 64) - 1


def narrowed(value: Any) -> Any:
    """value with every integer orjson cannot write as its
    decimal text (containers copied, the rest as is)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if _LO <= value <= _HI else str(value)
    if isinstance(value, dict):
        return {k: narrowed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [narrowed(v) for v in value]
    return value


def dumps(value: Any, option: int | None = None) -> bytes:
    """orjson.dumps, or, when it refuses a wide integer, the same with those integers as text."""
    try:
        return orjson.dumps(value, option=option)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise
        return orjson.dumps(narrowed(value), option=option)
