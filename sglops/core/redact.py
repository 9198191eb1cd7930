"""Keep secrets (passwords, tokens) out of everything we print, log or save.

Secrets are registered when they are read (a password_env, a token in a profile's env)
and every output path passes text through `text()`.
"""

from __future__ import annotations

import re
import threading
from typing import Any

_lock = threading.Lock()
_secrets: set[str] = set()
MASK = "****"
# Names whose values are secret wherever they appear (env vars, JSON keys).
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY)", re.I)


def register(secret: str | None) -> None:
    """Remember a secret value so it is masked from now on (short values are ignored)."""
    if secret and len(secret) >= 4:
        with _lock:
            _secrets.add(secret)


def text(s: str) -> str:
    """The string with every registered secret replaced by ****."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        s = s.replace(secret, MASK)
    return s


def obj(value: Any) -> Any:
    """A JSON-like value with secrets masked, and values under secret-looking keys masked."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and SECRET_NAME.search(k) and isinstance(v, str) else obj(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [obj(v) for v in value]
    return value
