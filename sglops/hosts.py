"""The inventory (playbooks/hosts.yaml) and turning --host/--hosts/--tag into hosts.

An address that is not in the inventory still works (`--host 10.1.230.174`): it becomes an
ad-hoc host and ~/.ssh/config fills in user, port, key and ProxyJump, as `ssh` would.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sglops.errors import ConfigError, HostNotFound
from sglops.yamlio import check_fields, load_yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST_FIELDS = {
    "name", "address", "port", "user", "identity_file", "sglang_root", "python", "gateway", "tags",
    "known_hosts", "connect_timeout", "password_env", "node_rank", "container", "container_engine",
    "container_user",
}
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
    container: str | None = None          # SGLang lives in this container on the host (docker/podman exec)
    container_engine: str = "docker"
    container_user: str | None = None

    @property
    def is_local(self) -> bool:
        return self.address == LOCAL

    def to_json(self) -> dict:
        d = asdict(self)
        d["tags"] = list(self.tags)
        return d


@dataclass
class Inventory:
    """Hosts by name, with the file they came from for error messages."""

    hosts: dict[str, Host] = field(default_factory=dict)
    path: Path | None = None
    default: str | None = None

    def get(self, name: str) -> Host:
        if name in self.hosts:
            return self.hosts[name]
        raise HostNotFound(f"unknown host {name!r}; {self._names_hint()}")

    def _names_hint(self) -> str:
        names = ", ".join(sorted(self.hosts)) or "none"
        return f"the inventory ({self.path or 'no file'}) has: {names}; or pass an address or 'local'"

    def tagged(self, tag: str) -> list[Host]:
        found = [h for h in self.hosts.values() if tag in h.tags]
        if not found:
            tags = sorted({t for h in self.hosts.values() for t in h.tags})
            raise HostNotFound(f"no host has tag {tag!r}; tags in {self.path}: {', '.join(tags) or 'none'}")
        return found


def inventory_path() -> Path:
    return Path(os.environ.get("SGLOPS_INVENTORY") or REPO_ROOT / "playbooks" / "hosts.yaml")


def load_inventory(path: str | Path | None = None) -> Inventory:
    """Read the inventory; a missing file is an empty inventory (addresses still work)."""
    path = Path(path) if path else inventory_path()
    if not path.exists():
        return Inventory(path=path)
    data = load_yaml(path) or {}
    check_fields(data, {"defaults", "hosts", "default"}, "inventory")
    defaults = data.get("defaults") or {}
    check_fields(defaults, HOST_FIELDS - {"name", "address"}, "defaults")
    inv = Inventory(path=path, default=data.get("default"))
    for entry in data.get("hosts") or []:
        check_fields(entry, HOST_FIELDS, "host entry", required={"name"})
        merged = {**defaults, **entry}
        merged.setdefault("address", entry["name"])
        merged["tags"] = tuple(merged.get("tags") or ())
        try:
            host = Host(**merged)
        except TypeError as exc:
            raise ConfigError(f"{getattr(entry, 'where', path)}: {exc}") from None
        if host.name in inv.hosts:
            raise ConfigError(f"{getattr(entry, 'where', path)}: host {host.name!r} is defined twice")
        if host.port is not None and not isinstance(host.port, int):
            raise ConfigError(f"{getattr(entry, 'where', path)}: port must be a number")
        inv.hosts[host.name] = host
    if inv.default and inv.default not in inv.hosts:
        raise ConfigError(f"{path}: default host {inv.default!r} is not defined")
    return inv


_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def _looks_like_address(text: str) -> bool:
    bare = text.split("@")[-1]
    if bare.count(":") == 1:
        bare = bare.split(":")[0]
    bare = bare.strip("[]")
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        return "." in bare and bool(_HOSTNAME.match(bare))


def _ssh_config_aliases() -> set[str]:
    path = Path(os.path.expanduser("~/.ssh/config"))
    if not path.exists():
        return set()
    import paramiko

    try:
        return {h for h in paramiko.SSHConfig.from_path(os.fspath(path)).get_hostnames() if "*" not in h}
    except Exception:
        return set()


def ad_hoc_host(spec: str) -> Host:
    """`user@addr:port` or an ssh_config alias, not in the inventory."""
    user = None
    port = None
    addr = spec
    if "@" in addr:
        user, addr = addr.split("@", 1)
    if addr.count(":") == 1:
        addr, port_s = addr.split(":")
        if not port_s.isdigit():
            raise HostNotFound(f"bad port in {spec!r}")
        port = int(port_s)
    return Host(name=spec, address=addr, user=user, port=port)


def local_host(inv: Inventory) -> Host:
    if LOCAL in inv.hosts:
        return replace(inv.hosts[LOCAL], address=LOCAL)
    return Host(name=LOCAL, address=LOCAL, python=sys.executable)


def resolve_one(spec: str, inv: Inventory) -> Host:
    spec = spec.strip()
    if not spec:
        raise HostNotFound("empty host name")
    if spec == LOCAL:
        return local_host(inv)
    if spec in inv.hosts:
        return inv.hosts[spec]
    if _looks_like_address(spec) or spec.split("@")[-1].split(":")[0] in _ssh_config_aliases():
        return ad_hoc_host(spec)
    raise HostNotFound(f"unknown host {spec!r}; {inv._names_hint()}")


def resolve_targets(
    host: str | None = None,
    hosts: str | None = None,
    tag: str | None = None,
    sglang_root: str | None = None,
    inventory: Inventory | None = None,
) -> list[Host]:
    """The hosts a task should act on, from the common --host/--hosts/--tag/--sglang-root flags."""
    inv = inventory or load_inventory()
    given = [x for x in (host, hosts, tag) if x]
    if len(given) > 1:
        raise ConfigError("give one of --host, --hosts or --tag")
    if host:
        targets = [resolve_one(host, inv)]
    elif hosts:
        targets = [resolve_one(s, inv) for s in hosts.split(",") if s.strip()]
    elif tag:
        targets = inv.tagged(tag)
    elif inv.default:
        targets = [inv.hosts[inv.default]]
    else:
        raise ConfigError(f"no host given: pass --host NAME|ADDRESS|local ({inv._names_hint()})")
    if sglang_root:
        targets = [replace(t, sglang_root=sglang_root) for t in targets]
    return targets
