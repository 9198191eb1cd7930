"""A sessions dataset's own texts (`--dataset sessions:texts=PATH`, the chat API): what each session's user
says, turn by turn, so a run sends given conversations (another tool's, for an agreement check) instead of
drawn ids. The file is JSON: `{"system": "optional system message", "sessions": [["turn 1", "turn 2", ...],
...]}`; read on the laptop and sent with the script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglops.core.errors import ConfigError

# the most texts one file may hold (sent with the script)
MAX_CHARS = 32 << 20


def read(path_text: str) -> dict[str, Any]:
    """The file's system text and sessions, checked: every turn a string, every session a non-empty list."""
    path = Path(path_text).expanduser()
    if not path_text or not path.is_file():
        raise ConfigError(f"--dataset sessions texts: no such file {path_text!r}")
    try:
        raw = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset sessions texts: cannot read {path}: {exc}") from None
    if len(raw) > MAX_CHARS:
        raise ConfigError(f"--dataset sessions texts: {path} is larger than {MAX_CHARS >> 20} MiB")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"--dataset sessions texts: {path} is not JSON ({str(exc)[:200]})") from None
    sessions = doc.get("sessions") if isinstance(doc, dict) else None
    system = doc.get("system", "") if isinstance(doc, dict) else None
    if (
        not isinstance(sessions, list)
        or not sessions
        or not all(isinstance(s, list) and s and all(isinstance(t, str) for t in s) for s in sessions)
        or not isinstance(system, str)
    ):
        raise ConfigError(
            f'--dataset sessions texts: {path} must be {{"system": TEXT, "sessions": [[TEXT, ...], ...]}} '
            "(every session a non-empty list of texts)"
        )
    return {"system": system, "sessions": sessions, "source": str(path)}


def fitted(spec: dict[str, Any], texts: dict[str, Any]) -> dict[str, Any]:
    """The sessions dataset of a texts file: `count` and `turns` default to the file's (all its sessions, the
    shortest one's turns); asking more than it holds is an error, `new` and `system` (ids) do not apply."""
    if "new" in spec or spec.get("system"):
        raise ConfigError(
            "--dataset sessions: texts=PATH gives the turns' texts; new= and system= do not apply"
        )
    sessions = texts["sessions"]
    count = spec.get("count", len(sessions))
    turns = spec.get("turns", min(len(s) for s in sessions))
    if count > len(sessions) or any(len(s) < turns for s in sessions[:count]):
        raise ConfigError(
            f"--dataset sessions: {texts['source']} holds {len(sessions)} sessions of "
            f"{min(len(s) for s in sessions)}+ turns; count={count}, turns={turns} asked"
        )
    return {
        **spec,
        "count": count,
        "turns": turns,
        "source": texts["source"],
        "texts": {"system": texts["system"], "sessions": [s[:turns] for s in sessions[:count]]},
    }
