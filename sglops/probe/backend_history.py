"""Which release removed a backend: the choices of every release, as benchmarks/attention_path_table.py read
them from the PyPI wheels (playbooks/attention_backend_history.json, generated, never hand-edited)."""

from __future__ import annotations

import json
from functools import lru_cache

from sglops.core import paths

HISTORY = paths.shipped("playbooks/attention_backend_history.json")


@lru_cache(maxsize=1)
def history() -> dict[str, dict[str, list[str] | None]]:
    """{version: {fact: choices}} (empty when the file was never generated)."""
    try:
        return json.loads(HISTORY.read_text())["releases"]
    except (OSError, ValueError, KeyError):
        return {}


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def removed_note(fact: str, value: str, version: str | None) -> str:
    """`; removed in 0.5.20 (last in 0.5.19)` when the history knows the value, else ``."""
    rel = history()
    have = sorted((v for v in rel if value in (rel[v].get(fact) or [])), key=_key)
    if not have:
        return "; no release 0.5.11-0.5.23 offers it" if rel else ""
    last = have[-1]
    first_read = min(rel, key=_key)
    if version is not None and _key(version) < _key(have[0]):
        if have[0] == first_read:
            return f"; offered by {have[0]}-{last} (the releases read: {first_read} on)"
        return f"; added in {have[0]}"
    later = sorted((v for v in rel if _key(v) > _key(last)), key=_key)
    if later and (version is None or _key(version) >= _key(later[0])):
        return f"; removed in {later[0]} (last offered by {last})"
    return f"; offered by {', '.join(have) if len(have) < 4 else have[0] + '-' + last}"


FLAG_FACTS = {
    "attention_backend": "attention_backends",
    "prefill_attention_backend": "attention_backends",
    "decode_attention_backend": "attention_backends",
    "dsa_prefill_backend": "dsa_prefill_backends",
    "dsa_decode_backend": "dsa_decode_backends",
    "nsa_prefill_backend": "dsa_prefill_backends",
    "nsa_decode_backend": "dsa_decode_backends",
}


def profile_note(key: str, value: str, version: str | None) -> str:
    """For a profile key's refused value: which release removed it (or added it), else ``."""
    fact = FLAG_FACTS.get(key)
    return removed_note(fact, value, version) if fact else ""
