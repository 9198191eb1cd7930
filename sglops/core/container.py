"""A container on the host as the place where SGLang lives:
`docker exec` / `podman exec` (and the kubectl seam).

Most SGLang deployments run from an image: the tree, its Python and the server live inside a container on the
GPU host. The transport stays one SSH round trip per step: the one shell line sglops would run on the host
(already quoted, with its `timeout` inside it) becomes the argument of `ENGINE exec -i CONTAINER sh -c LINE`.
So every time limit is enforced by `timeout` INSIDE the container: killing the exec client (an SSH drop, a
Ctrl-C) does not stop a process in a container, but that process still dies on time.

The container's identity (id and image id) rides along in the same line, as an env var of the exec
(`SGLOPS_CONTAINER="<id> <image>"`), so host scripts can record and compare it (facts, the patch ledger)
without a second round trip. The first step of a connection asks the engine for it (`inspect`, in the same
shell line, echoed on stderr); later steps reuse it, so each costs one `exec`, not two engine calls.

The target WRAPS a transport (ContainerRemote below: composition, not a kind of transport): it rewrites each
shell line, delegates the round trip to the SSH or local Remote that reaches the host, and reads the answer.
Any target with the same small shape (`wrap`, `explain`, `name`) fits: kubectl would be
`kubectl exec -i POD -c CONTAINER -- env SGLOPS_CONTAINER=... sh -c LINE` with its identity from
`kubectl get pod POD -o jsonpath=...` (tests/test_transport_seam.py runs real steps through such a wrapper;
see docs/container.md).
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sglops.core import values
from sglops.core.errors import ConfigError, RemoteError
from sglops.core.host_bundle import RESULT_MARKER
from sglops.core.transport.base import Remote
from sglops.core.transport.command import CommandResult
from sglops.core.transport.spec import TargetKind

if TYPE_CHECKING:
    from sglops.core.host import Host

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

        With no known identity, the line first asks the engine
        for it and echoes it on stderr (IDENTITY_MARKER)."""
        words = [self.engine, "exec", "-i"]
        if self.user:
            words += ["-u", str(self.user)]
        exec_head = shlex.join(words)
        tail = f"{shlex.quote(self.name)} sh -c {shlex.quote(line)}"
        if identity:
            return f"{exec_head} -e {shlex.quote(f'{IDENTITY_ENV}={identity}')} {tail}"
        return (
            f'_sglops_id="{self.identity_probe()}"; printf \'{IDENTITY_MARKER} %s\\n\' "$_sglops_id" >&2; '
            f'{exec_head} -e {IDENTITY_ENV}="$_sglops_id" {tail}'
        )

    def explain(self, host: str, stderr: str, exit_code: int) -> None:
        """Raise one clear line when the exec itself failed (no such container, stopped, no engine)."""
        text = stderr.strip()
        if any(marker in text for marker in _GONE):
            raise RemoteError(
                f"{host}: container {self.name!r} is not running on the host "
                f"({self.engine}: {text.splitlines()[-1][:200]})"
            )
        if exit_code == 127 and (f"{self.engine}: not found" in text or "command not found" in text):
            raise RemoteError(f"{host}: `{self.engine}` is not installed (or not on PATH) on the host")
        if "permission denied" in text.lower() and ".sock" in text:
            raise RemoteError(
                f"{host}: no permission to use {self.engine} on the host: {text.splitlines()[-1][:200]}"
            )


def identity_from_stderr(stderr: str) -> str | None:
    """The '<id> <image>' a first step echoed (see wrap), if it is there and well formed."""
    for line in stderr.splitlines():
        if line.startswith(IDENTITY_MARKER):
            value = line[len(IDENTITY_MARKER) :].strip()
            return value if len(value.split()) == 2 else None
    return None


class Target(Protocol):
    """What ContainerRemote needs of a place inside a host: a docker/podman container, a pod container, ..."""

    name: str

    def wrap(self, line: str, identity: str | None = None) -> str:
        """The host shell line running `line` inside; without
        an identity it also echoes one (IDENTITY_MARKER)."""

    def explain(self, host: str, stderr: str, exit_code: int) -> None:
        """Raise one clear line when the exec itself failed
        (no such target, stopped, no client on the host)."""


class ContainerRemote(Remote):
    """A target inside a host, reached through any transport
    to that host: commands are wrapped, not sent anew.

    Each step is still one round trip of the transport (SSH or local): the shell line sglops built becomes the
    argument of the target's exec. Files go through the exec stream as base64. The host's own commands
    (`run_py(on_host=True)`: restart shape (b)) go to the transport itself, outside the target.
    """

    def __init__(self, transport: Remote, target: Target) -> None:
        super().__init__(transport.host)
        self.transport = transport
        self.container = target
        # '<id> <image>', learnt by the first step
        self._identity: str | None = None

    @property
    # every round trip is the transport's
    def round_trips(self) -> int:
        return self.transport.round_trips

    def host_side(self) -> Remote:
        return self.transport

    def _exec(self, command, stdin, timeout, on_output) -> CommandResult:
        result = self.transport._exec(self.container.wrap(command, self._identity), stdin, timeout, on_output)
        if self._identity is None:
            self._identity = identity_from_stderr(result.stderr)
            result.stderr = "".join(
                ln for ln in result.stderr.splitlines(keepends=True) if not ln.startswith(IDENTITY_MARKER)
            )
        if result.exit_code != 0 and RESULT_MARKER not in result.stdout:
            self.container.explain(self.name, result.stderr, result.exit_code)
        return result

    def _put(self, local: str | os.PathLike, remote: str) -> None:
        """Upload through the exec stream (base64 on stdin), atomically renamed into place inside."""
        data = base64.b64encode(Path(local).read_bytes())
        script = 'mkdir -p "$(dirname "$1")" && base64 -d > "$1.sglops-tmp" && mv -f "$1.sglops-tmp" "$1"'
        self.run(["sh", "-c", script, "sh", remote], stdin=data, timeout=120 + len(data) / 5e6)

    def _get(
        self, remote: str, local: str | os.PathLike, progress: Callable[[int, int], None] | None
    ) -> None:
        """Download through the exec stream (base64 on stdout), written to a .part file and renamed."""
        result = self.run(["base64", remote], timeout=600)
        data = base64.b64decode(result.stdout)
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(local.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, local)
        if progress:
            progress(len(data), len(data))

    def _close(self) -> None:
        self.transport.close()


def _target_of(host: Host) -> ContainerTarget | None:
    """The container a host's inventory names (`container:`), or None."""
    if not host.container:
        return None
    return ContainerTarget(host.container, host.container_engine or "docker", host.container_user)


TARGET = TargetKind(
    "container",
    of=_target_of,
    fields={
        "container": values.Str(),
        "container_engine": values.Choice(ENGINES, "docker"),
        "container_user": values.Str(),
    },
)
