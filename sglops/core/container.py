"""A container on the host as the place where SGLang lives: `docker exec` / `podman exec` (and the kubectl seam).

Most SGLang deployments run from an image: the tree, its Python and the server live inside a container on the
GPU host. The transport stays one SSH round trip per step: the one shell line sglops would run on the host
(already quoted, with its `timeout` inside it) becomes the argument of `ENGINE exec -i CONTAINER sh -c LINE`.
So every time limit is enforced by `timeout` INSIDE the container: killing the exec client (an SSH drop, a
Ctrl-C) does not stop a process in a container, but that process still dies on time.

The container's identity (id and image id) rides along in the same line, as an env var of the exec
(`SGLOPS_CONTAINER="<id> <image>"`), so host scripts can record and compare it (facts, the patch ledger)
without a second round trip. The first step of a connection asks the engine for it (`inspect`, in the same
shell line, echoed on stderr); later steps reuse it, so each costs one `exec`, not two engine calls.

kubectl fits the same seam: `kubectl exec -i POD -c CONTAINER -- sh -c LINE`, identity from
`kubectl get pod POD -o jsonpath=...` (container id, image id); not wired up yet (see docs/container.md).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from sglops.core.errors import ConfigError, RemoteError

ENGINES = ("docker", "podman")
IDENTITY_ENV = "SGLOPS_CONTAINER"
IDENTITY_MARKER = "@@SGLOPS-CONTAINER@@"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")
_GONE = ("No such container", "is not running", "no container with name or ID", "container state improper")


@dataclass(frozen=True)
class ContainerTarget:
    """Where a host's steps run: container NAME on that host, through ENGINE exec."""

    name: str
    engine: str = "docker"
    user: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"container_engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if not _NAME.match(self.name or ""):
            raise ConfigError(f"bad container name {self.name!r} (letters, digits, _ . - only)")
        if self.user is not None and not _USER.match(str(self.user)):
            raise ConfigError(f"bad container_user {self.user!r} (NAME, UID or UID:GID)")

    def identity_probe(self) -> str:
        """Shell text (run on the host) printing '<container id> <image id>', empty when there is none."""
        fmt = "{{.Id}} {{.Image}}"
        return f"$({self.engine} inspect --format {shlex.quote(fmt)} {shlex.quote(self.name)} 2>/dev/null)"

    def wrap(self, line: str, identity: str | None = None) -> str:
        """The host shell line that runs `line` (a shell line) inside the container, stdin passed through.

        With no known identity, the line first asks the engine for it and echoes it on stderr (IDENTITY_MARKER)."""
        words = [self.engine, "exec", "-i"]
        if self.user:
            words += ["-u", str(self.user)]
        exec_head = shlex.join(words)
        tail = f"{shlex.quote(self.name)} sh -c {shlex.quote(line)}"
        if identity:
            return f"{exec_head} -e {shlex.quote(f'{IDENTITY_ENV}={identity}')} {tail}"
        return (f'_sglops_id="{self.identity_probe()}"; printf \'{IDENTITY_MARKER} %s\\n\' "$_sglops_id" >&2; '
                f'{exec_head} -e {IDENTITY_ENV}="$_sglops_id" {tail}')

    def host_line(self, argv: list[str]) -> str:
        """A command for the engine itself on the host (restart, logs, inspect), quoted."""
        return shlex.join([self.engine, *argv])

    def explain(self, host: str, stderr: str, exit_code: int) -> None:
        """Raise one clear line when the exec itself failed (no such container, stopped, no engine)."""
        text = stderr.strip()
        if any(marker in text for marker in _GONE):
            raise RemoteError(f"{host}: container {self.name!r} is not running on the host "
                              f"({self.engine}: {text.splitlines()[-1][:200]})")
        if exit_code == 127 and (f"{self.engine}: not found" in text or "command not found" in text):
            raise RemoteError(f"{host}: `{self.engine}` is not installed (or not on PATH) on the host")
        if "permission denied" in text.lower() and ".sock" in text:
            raise RemoteError(f"{host}: no permission to use {self.engine} on the host: {text.splitlines()[-1][:200]}")


def identity_from_stderr(stderr: str) -> str | None:
    """The '<id> <image>' a first step echoed (see wrap), if it is there and well formed."""
    for line in stderr.splitlines():
        if line.startswith(IDENTITY_MARKER):
            value = line[len(IDENTITY_MARKER):].strip()
            return value if len(value.split()) == 2 else None
    return None


def parse_identity(value: str | None) -> dict | None:
    """{'id': ..., 'image': ...} from the SGLOPS_CONTAINER env var a step saw, or None."""
    parts = (value or "").split()
    if len(parts) != 2:
        return None
    return {"id": parts[0], "image": parts[1]}
