"""Standard-library Python scripts that run ON the host, one round trip each.

Each script defines `main(args: dict) -> JSON-able`. A first line `# sglops: include a, b`
prepends those helper scripts (e.g. `_common`), so hosts need nothing installed.
"""

from __future__ import annotations

import functools
from pathlib import Path

HERE = Path(__file__).parent


@functools.cache
def load_script(name: str) -> str:
    """The source to send for `name`, with its includes prepended."""
    path = HERE / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no remote script {name!r} in {HERE}")
    source = path.read_text()
    first = source.splitlines()[0] if source else ""
    parts = []
    if first.startswith("# sglops: include "):
        for inc in first.removeprefix("# sglops: include ").split(","):
            parts.append(load_script(inc.strip()))
    parts.append(source)
    return "\n\n".join(parts)
