"""What a transport and a target kind declare: which hosts
they take, how they open, the inventory fields they read.

Why a declaration: the inventory's fields, their checks and `connect()`'s choice all come from the registry
(`transport/registry.py`), so a new transport is its own file plus one registry line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglops.core.host import Host
    from sglops.core.transport.base import Remote


@dataclass(frozen=True)
class Transport:
    """One way to reach a host: `takes(host)` says whether it is this one; `open(host, accept_new_host_key=,
    inventory=)` gives its Remote; `fields` are the inventory
    fields it reads, each with its kind (core.values)."""

    name: str
    takes: Callable[[Host], bool]
    open: Callable[..., Remote]
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetKind:
    """One kind of place inside a host (a container): `of(host)` is the target a host's inventory names, or
    None; `fields` are the inventory fields it reads, each with its kind."""

    name: str
    of: Callable[[Host], Any]
    fields: Mapping[str, Any] = field(default_factory=dict)
