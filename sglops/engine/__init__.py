"""The serving engines sglops drives (SGLang, vLLM):
everything that differs between them, behind one interface.

`get(name)` gives an `Engine` (sglops.engine.base); `NAMES` lists them, the default first. The rest of sglops
asks the engine of a profile for its launch command, flag spellings, endpoints, profiler calls and crash
texts, and hands the host scripts `Engine.host_spec()` (they run on the host with the standard library only).
"""

from __future__ import annotations

from sglops.core.errors import ConfigError
from sglops.engine.base import Engine
from sglops.engine.sglang import SGLANG
from sglops.engine.vllm import VLLM

ENGINES: dict[str, Engine] = {e.name: e for e in (SGLANG, VLLM)}
NAMES = tuple(ENGINES)
DEFAULT = NAMES[0]


def get(name: str | None) -> Engine:
    """The engine called NAME (None: the default); one line naming the known ones otherwise."""
    try:
        return ENGINES[name or DEFAULT]
    except KeyError:
        raise ConfigError(f"engine {name!r} is not one of {', '.join(NAMES)}") from None


def host_specs() -> list[dict]:
    """Every engine's host-side spec, the default first: what a host script searches for a server's tree."""
    return [e.host_spec() for e in ENGINES.values()]


__all__ = ["DEFAULT", "ENGINES", "Engine", "NAMES", "get", "host_specs"]
