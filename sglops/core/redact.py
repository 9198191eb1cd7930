"""Keep secrets (passwords, tokens, API keys) out of everything we print, log or save.

Two nets, because a secret reaches output by more than one road: (1) every value that came from a
secret-looking name (an inventory var `hf_token`, a profile's `env: {HF_TOKEN: ...}`, an `--api-key X` in
`extra_args`, a play var, this process's environment, a `password_env`) is registered where it is read, and
every registered value is masked wherever it reappears; (2) text and JSON are masked by name patterns too
(`--api-key X`, `HF_TOKEN=X`, `"api_key": "X"`, `api_key='X'`), for what this process never read itself: a
server's command line, its log, its /server_info. Every output path (console, artifacts) passes through here.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any


class _SecretSet(set):
    """The registered secrets, and the same longest first (`ordered`, rebuilt whenever the set changes):
    text() runs for every string of every record and reads that tuple without taking the lock or sorting."""

    ordered: tuple[str, ...] = ()

    def _reorder(self) -> None:
        self.ordered = tuple(sorted(self, key=len, reverse=True))

    def add(self, value: str) -> None:
        super().add(value)
        self._reorder()

    def discard(self, value: str) -> None:
        super().discard(value)
        self._reorder()

    def clear(self) -> None:
        super().clear()
        self._reorder()


_lock = threading.Lock()
_secrets = _SecretSet()
MASK = "****"
# shorter values would mask ordinary words everywhere
MIN_LEN = 4
# Names whose values are secret wherever they appear (env vars, JSON keys, flags, inventory/play vars).
# TOKEN only as the name's last word: HF_TOKEN, api-token, --hf-token, but not max_total_tokens,
# tokenizer_path, token_logprobs or cpu_us_per_token (the per-token figures of a bench).
SECRET_NAME = re.compile(
    r"(?<!PER[_-])TOKEN(?![A-Za-z0-9_-])|SECRET|PASSWORD|PASSWD|API[_-]?KEY|ACCESS[_-]?KEY"
    r"|PRIVATE[_-]?KEY|CREDENTIAL",
    re.I,
)
# the same on lower-cased text: 3x a case-blind search
_SECRET_NAME_LOWER = re.compile(SECRET_NAME.pattern.lower())
# ...unless the name says the value is where a secret is,
# not the secret: password_env, api_key_file, token_ids.
_NOT_SECRET = re.compile(r"[_-](ENV|FILE|PATH|DIR|IDS?|NAME|LEN|LENGTH|COUNT)$", re.I)
_EMPTY = {"", "None", "none", "null", "''", '""', MASK, "'****'", '"****"'}
_VALUE = r"('[^'\n]*'|\"[^\"\n]*\"|[^\s'\",;)}\]]+)"
# --api-key X, --hf-token=X
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)(=|[ \t]+)" + _VALUE)
# HF_TOKEN=X, api_key='X'
_ASSIGN = re.compile(r"(?<![\w-])([A-Za-z_][\w]*)(=)" + _VALUE)
# "api_key": "X", 'token': 'X'
_KEYED = re.compile(r"([\"'])([\w-]+)\1(\s*:\s*)" + _VALUE)
# ['--api-key', 'X'] (a repr'd argv)
_LISTED = re.compile(r"([\"'])(--?[\w-]+)\1(\s*,\s*)" + _VALUE)


def is_secret_name(name: object) -> bool:
    """A key, variable or flag name whose value is a secret (`HF_TOKEN`, `--api-key`, `db_password`)."""
    return isinstance(name, str) and _secret_name(name)


@functools.lru_cache(maxsize=8192)
def _secret_name(name: str) -> bool:
    """is_secret_name of a str, remembered: a record repeats the same few hundred keys thousands of times."""
    return bool(SECRET_NAME.search(name)) and not _NOT_SECRET.search(name)


def register(secret: str | None) -> None:
    """Remember a secret value so it is masked from now on (short values are ignored)."""
    if isinstance(secret, str):
        secret = secret.strip()
        if len(secret) >= MIN_LEN and secret not in _EMPTY:
            with _lock:
                _secrets.add(secret)


def register_named(pairs: Mapping[Any, Any] | Iterable[tuple[Any, Any]]) -> None:
    """Register the values of the secret-looking names among pairs (env, vars, a JSON mapping)."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    for name, value in items:
        if is_secret_name(name) and isinstance(value, str | int) and not isinstance(value, bool):
            register(str(value))


def register_argv(argv: Iterable[Any]) -> None:
    """Register the values of secret flags in a command line: `--api-key X` and `--api-key=X`."""
    words = [str(w) for w in argv]
    for i, word in enumerate(words):
        if not word.startswith("-"):
            continue
        flag, eq, value = word.partition("=")
        if is_secret_name(flag):
            if eq:
                register(value)
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                register(words[i + 1])


def register_environment(environ: Mapping[str, str] | None = None) -> None:
    """This process's secret-looking environment variables (HF_TOKEN, GITHUB_TOKEN, ...): never shown."""
    register_named(environ if environ is not None else os.environ)


def _masked(value: str) -> str:
    if value in _EMPTY or value.startswith("--"):
        return value
    quote = value[0] if value[0] in "'\"" and len(value) > 1 and value[-1] == value[0] else ""
    return f"{quote}{MASK}{quote}"


def _by_name(s: str) -> str:
    s = _FLAG.sub(
        lambda m: m.group(1) + m.group(2) + _masked(m.group(3)) if is_secret_name(m.group(1)) else m.group(0),
        s,
    )
    s = _ASSIGN.sub(
        lambda m: m.group(1) + m.group(2) + _masked(m.group(3)) if is_secret_name(m.group(1)) else m.group(0),
        s,
    )
    for pattern in (_KEYED, _LISTED):
        s = pattern.sub(
            lambda m: (
                m.group(1) + m.group(2) + m.group(1) + m.group(3) + _masked(m.group(4))
                if is_secret_name(m.group(2))
                else m.group(0)
            ),
            s,
        )
    return s


def text(s: str) -> str:
    """The string with every registered secret, and every
    value after a secret-looking name, replaced by ****."""
    for secret in _secrets.ordered:
        if secret in s:
            s = s.replace(secret, MASK)
    if len(s) <= 65536:
        return _by_name(s) if _may_name(s) else s
    # A long text (a log, a trace's kernel names): the regex pass only over the lines that may name a secret,
    # each with the line after it (a value can follow its name on the next line: `'--api-key',` then `'X'`).
    lines = s.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _may_name(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and _may_name(lines[j - 1]) and j - i < 64:
            j += 1
        out.append(_by_name("".join(lines[i:j])))
        i = j
    return "".join(out)


def _may_name(s: str) -> bool:
    """Whether s holds a word every secret name has (token, secret, passw, key, credential: a cheap test
    before the regexes)."""
    # then str's own search: 6x a case-blind regex over the same words, and no generator
    low = s.lower()
    return (
        "token" in low or "secret" in low or "passw" in low or "key" in low or "credential" in low
    ) and _SECRET_NAME_LOWER.search(low) is not None


def _argv(words: list[Any]) -> list[Any]:
    """A list that may be a command line: the word after a secret flag is masked (and remembered)."""
    register_argv(w for w in words if isinstance(w, str))
    out = []
    after_flag = False
    for w in words:
        if isinstance(w, str) and after_flag and not w.startswith("--"):
            out.append(MASK)
        else:
            out.append(obj(w))
        after_flag = isinstance(w, str) and w.startswith("-") and "=" not in w and is_secret_name(w)
    return out


def obj(value: Any) -> Any:
    """A JSON-like value with secrets masked, values under secret-looking keys masked (and remembered)."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return _mapping(value)
    if isinstance(value, (list, tuple)):
        return _argv(list(value))
    return value


def _mapping(value: dict) -> dict:
    """obj() of a dict in one pass: a secret-looking key's value is registered (register_named) and masked."""
    out = {}
    for k, v in value.items():
        if isinstance(k, str) and _secret_name(k):
            if isinstance(v, str | int) and not isinstance(v, bool):
                register(str(v))
            out[k] = MASK if isinstance(v, str) and v not in _EMPTY else obj(v)
        else:
            out[k] = v if v is None or v.__class__ in _PLAIN else obj(v)
    return out


# nothing to mask in them (a str may hold a secret, a container its strings)
_PLAIN = {int, float, bool}


register_environment()
