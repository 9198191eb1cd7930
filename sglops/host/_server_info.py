# What a server says about itself, kept only as far as a record can use it: /server_info by its fields (each a
# plain value of bounded size), token counts and seconds as numbers in range. A server (or a proxy in front of
# it) may answer anything: a 30 MB document, a list, integers past 64 bits, JSON nested 50,000 deep.
import json
import math

# tokens: far past any model's context x any run
MAX_COUNT = 1 << 40
MAX_FIELDS = 2000
# a field's JSON; longer (a chat template, a model config) is dropped and named
MAX_FIELD_CHARS = 4096
MAX_INT = (1 << 63) - 1
# live scheduler state, not launch arguments
_DROP = {"internal_states"}
# past any time or rate: inf, NaN and a 2,000-bit integer are not below it
_FINITE = 1e300


def count_or_none(value):
    """A token count as an int in 0..MAX_COUNT, else None (bool is no count: its type is not int)."""
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def seconds_or_none(value):
    """A non-negative finite number (seconds, a rate), else None (NaN fails the comparison)."""
    kind = type(value)
    if kind is float or kind is int:
        return value if 0 <= value < _FINITE else None
    return None


def _plain(value, depth=0):
    """Whether value is JSON a record can keep as it is: scalars (ints within 64 bits), and lists / mappings
    of them a few levels deep."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return -MAX_INT - 1 <= value <= MAX_INT
    if isinstance(value, float):
        return math.isfinite(value)
    if depth >= 4:
        return False
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def kept_fields(doc):
    """The fields of a /server_info answer a record keeps: a mapping of names to plain values of bounded size;
    what was left out is named under `_dropped`. None when the answer is no mapping."""
    if not isinstance(doc, dict):
        return None
    out, dropped = {}, []
    for key, value in doc.items():
        if key in _DROP:
            continue
        if len(out) >= MAX_FIELDS or len(key) > 200 or not _plain(value):
            dropped.append(key[:200])
            continue
        if (
            not isinstance(value, (bool, int, float))
            and value is not None
            and len(json.dumps(value)) > MAX_FIELD_CHARS
        ):
            dropped.append(key[:200])
            continue
        out[key] = value
    if dropped:
        out["_dropped"] = dropped[:50] + ([f"... {len(dropped) - 50} more"] if len(dropped) > 50 else [])
    return out
