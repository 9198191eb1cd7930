"""One GPU host as the operator knows it: a leaf every transport can name without importing the inventory
(sglops/core/hosts.py reads the inventory and imports the transport registry for its fields)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

LOCAL = "local"


@dataclass(frozen=True)
class Host:
    """One GPU host as the operator knows it."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    sglang_root: str | None = None
    python: str = "python3"
    gateway: str | None = None
    tags: tuple[str, ...] = ()
    known_hosts: str | None = None
    connect_timeout: float = 10.0
    password_env: str | None = None
    node_rank: int | None = None
    # host-specific values profiles use as {vars.NAME}
    vars: dict = field(default_factory=dict, hash=False)
    # SGLang lives in this container on the host (docker/podman exec)
    container: str | None = None
    container_engine: str = "docker"
    container_user: str | None = None

    @property
    def is_local(self) -> bool:
        return self.address == LOCAL

    def to_json(self) -> dict:
        d = asdict(self)
        d["tags"] = list(self.tags)
        return d
