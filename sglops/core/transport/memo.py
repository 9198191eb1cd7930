"""A connection's memo of host reads (facts, the tree, the
patch ledger): asked once, until a step may change them.

Why: one task asks the same question of a host several times (`ab` reads the ledger before, during and after
its rounds; `server-status` needs the tree's root that `restart` already found), each a round trip. The memo
belongs to one Remote (one connection): every step that is not itself such a read (`run`, `run_py`, `put`) may
change the host and drops what was read (`step()`); closing the connection drops everything. A `lasting` value
(where the tree is) survives steps: sglops' own steps never move it. Each caller gets its own copy, so
changing an answer never changes the memo.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Hashable, Iterator
from typing import Any


class Memo:
    """Values read from one host, by key; `hits` counts the round trips they saved."""

    def __init__(self) -> None:
        self._values: dict[Hashable, Any] = {}
        self._lasting: dict[Hashable, Any] = {}
        # >0 while a read runs: its own round trip is a read, not a change
        self._reading = 0
        self.hits = 0

    def get(self, key: Hashable, read: Callable[[], Any], *, lasting: bool = False) -> Any:
        """The value for `key`: remembered, or `read()` now (and remembered unless it raises)."""
        store = self._lasting if lasting else self._values
        if key in store:
            self.hits += 1
            return copy.deepcopy(store[key])
        with self.reading():
            value = read()
        store[key] = copy.deepcopy(value)
        return value

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Steps run inside only read the host: they keep what was read."""
        self._reading += 1
        try:
            yield
        finally:
            self._reading -= 1

    def put(self, key: Hashable, value: Any, *, lasting: bool = False) -> None:
        """Remember a value learnt on the way (a step that read it as part of its own answer)."""
        (self._lasting if lasting else self._values)[key] = copy.deepcopy(value)

    def step(self) -> None:
        """A step that may change the host is about to run: what was read no longer holds."""
        if not self._reading:
            self._values.clear()

    def clear(self) -> None:
        """The connection closed: the next one reads everything again."""
        self._values.clear()
        self._lasting.clear()
