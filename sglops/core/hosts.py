"""The inventory (playbooks/hosts.yaml) and turning --host/--hosts/--tag into hosts.

An address that is not in the inventory still works (`--host 10.1.230.174`): it becomes an
ad-hoc host and ~/.ssh/config fills in user, port, key and ProxyJump, as `ssh` would.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from sglops.core import paths, redact
from sglops.core.errors import ConfigError, HostNotFound
from sglops.core.host import LOCAL, Host
from sglops.core.ssh_config import ssh_config_aliases
from sglops.core.transport.registry import inventory_fields
from sglops.core.yamlio import check_fields, load_yaml


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
    if os.environ.get("SGLOPS_INVENTORY"):
        return Path(os.environ["SGLOPS_INVENTORY"])
    return paths.find("playbooks", "hosts.yaml")


def _field_kinds() -> dict:
    """Every inventory field with its kind: those of any
    host, then those the transports and targets declare."""
    from sglops.core import values as v

    text = v.Str()
    return {
        "name": _HostName(),
        "address": _Address(),
        "sglang_root": text,
        "python": text,
        "tags": v.StrList(),
        "node_rank": v.Int(0, 100_000),
        "vars": _Vars(),
        **inventory_fields(),
    }


class _HostName:
    """A host's name in the inventory: one word (it is split on commas in --hosts)."""

    def check(self, raw: object, label: str) -> str:
        if not isinstance(raw, str) or not raw.strip() or re.search(r"[\s,\[\]]|[\x00-\x1f]", raw):
            raise ConfigError(f"{label} must be one word without spaces, commas or brackets (got {raw!r})")
        return raw


class _Address:
    """A host's address: an IP, `local`, or a host name the resolver can take (checked here, in one line,
    rather than as a UnicodeError traceback from the IDNA encoder inside socket.connect)."""

    def check(self, raw: object, label: str) -> str:
        if not isinstance(raw, str):
            raise ConfigError(f"{label} must be a host name or IP address (got {raw!r:.60})")
        return check_address(raw, label)


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def check_address(addr: str, label: str = "address") -> str:
    """addr if it is an IP address, `local` or a valid host name; else one ConfigError line saying why."""
    bare = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr
    if addr == LOCAL:
        return addr
    try:
        ipaddress.ip_address(bare)
        return addr
    except ValueError:
        pass
    if not addr.strip():
        raise ConfigError(f"{label}: the address is empty")
    if len(addr) > 253:
        raise ConfigError(
            f"{label}: address {_short(addr)} is {len(addr):,} characters; a host name has at most 253"
        )
    bad = re.search(r"[\s@/\\,;'\"`$<>|()\[\]{}]|[\x00-\x1f\x7f]", addr)
    if bad:
        raise ConfigError(f"{label}: address {_short(addr)} has {bad.group()!r}, which no host name has")
    try:
        addr.encode("idna")
    except UnicodeError as exc:
        why = str(exc.__cause__ or exc).split(": ")[-1].strip("()")
        raise ConfigError(
            f"{label}: address {_short(addr)} is not a valid host name ({why}: each dot-separated "
            "label is 1 to 63 characters)"
        ) from None
    return addr


def _host_fields(entry: dict, where: str) -> dict:
    """An inventory mapping's fields, each checked for its type and range."""
    kinds = _field_kinds()
    return {k: kinds[k].check(val, f"{where}: {k}") if val is not None else None for k, val in entry.items()}


def load_inventory(path: str | Path | None = None) -> Inventory:
    """Read the inventory; a missing file is an empty inventory (addresses still work)."""
    path = Path(path) if path else inventory_path()
    if not path.exists():
        return Inventory(path=path)
    data = load_yaml(path)
    if data is None:
        return Inventory(path=path)
    check_fields(data, {"defaults", "hosts", "default"}, "inventory", within=str(path))
    defaults = data.get("defaults") or {}
    host_fields = set(_field_kinds())
    check_fields(defaults, host_fields - {"name", "address"}, "defaults", within=str(path))
    defaults = _host_fields(defaults, getattr(defaults, "where", str(path)))
    entries = data.get("hosts") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: hosts must be a list of host mappings (got {type(entries).__name__})")
    default = data.get("default")
    if default is not None and not isinstance(default, str):
        raise ConfigError(f"{path}: default must be a host name (got {default!r})")
    inv = Inventory(path=path, default=default)
    for entry in entries:
        check_fields(entry, host_fields, "host entry", required={"name"}, within=str(path))
        where = getattr(entry, "where", str(path))
        fields = _host_fields(entry, where)
        merged = {**defaults, **fields}
        merged = {k: val for k, val in merged.items() if val is not None}
        merged.setdefault("address", merged["name"])
        merged["tags"] = tuple(merged.get("tags") or ())
        # defaults' vars, then its own
        merged["vars"] = {**(defaults.get("vars") or {}), **(fields.get("vars") or {})}
        host = Host(**merged)
        if host.name in inv.hosts:
            raise ConfigError(f"{where}: host {host.name!r} is defined twice")
        inv.hosts[host.name] = host
    if inv.default and inv.default not in inv.hosts:
        raise ConfigError(f"{path}: default host {inv.default!r} is not defined")
    return inv


class _Vars:
    """A host's `vars:`: a mapping NAME: text or number (profiles read them as {vars.NAME})."""

    def check(self, raw: object, label: str) -> dict:
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(x, str | int | float) and not isinstance(x, bool)
            for k, x in raw.items()
        ):
            raise ConfigError(f"{label} must be a mapping NAME: value (text or number), got {raw!r}")
        # `hf_token: ...` is masked wherever a profile puts it ({vars.hf_token})
        redact.register_named(raw)
        return dict(raw)


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


def ad_hoc_host(spec: str) -> Host:
    """`user@addr:port` or an ssh_config alias, not in the inventory."""
    user = None
    port = None
    addr = spec
    if "@" in addr:
        # as ssh: the last @ ends the user name (`a@corp@10.0.0.1`)
        user, addr = addr.rsplit("@", 1)
        if not user:
            raise ConfigError(f"{_short(spec)}: the user before @ is empty")
    if addr.count(":") == 1:
        addr, port_s = addr.split(":")
        if not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise HostNotFound(f"bad port in {_short(spec)} (a port is 1-65535)")
        port = int(port_s)
    check_address(addr, f"--host {_short(spec)}")
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
    if _looks_like_address(spec) or spec.split("@")[-1].split(":")[0] in ssh_config_aliases():
        return ad_hoc_host(spec)
    raise HostNotFound(f"unknown host {spec!r}; {inv._names_hint()}")


def resolve_targets(
    host: str | None = None,
    hosts: str | None = None,
    tag: str | None = None,
    sglang_root: str | None = None,
    inventory: Inventory | None = None,
    *,
    container: str | None = None,
) -> list[Host]:
    """The hosts a task should act on, from the common --host/--hosts/--tag/--sglang-root flags."""
    inv = inventory or load_inventory()
    for flag, value in (("--host", host), ("--hosts", hosts), ("--tag", tag)):
        # never the default host: an empty $VAR is a mistake
        if value is not None and not value.strip():
            raise ConfigError(
                f"{flag} is empty; give a name (or leave the flag out for the inventory's default)"
            )
    given = [x for x in (host, hosts, tag) if x]
    if len(given) > 1:
        raise ConfigError("give one of --host, --hosts or --tag")
    if host:
        targets = [resolve_one(host, inv)]
    elif hosts:
        names = [s.strip() for s in hosts.split(",") if s.strip()]
        if not names:
            raise ConfigError(f"--hosts names no host (got {hosts!r}); give names like gpu-a,gpu-b")
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice:
            raise ConfigError(f"--hosts names {twice!r} twice")
        targets = [resolve_one(s, inv) for s in names]
    elif tag:
        targets = inv.tagged(tag)
    elif inv.default:
        targets = [inv.hosts[inv.default]]
    else:
        raise ConfigError(f"no host given: pass --host NAME|ADDRESS|local ({inv._names_hint()})")
    if sglang_root:
        targets = [replace(t, sglang_root=sglang_root) for t in targets]
    # the name is checked by the caller (cli glue) before this: hosts never imports the transport
    if container:
        # the container's own python, unless the inventory already described this host's container
        targets = [
            replace(t, container=container, python=t.python if t.container else "python3") for t in targets
        ]
    return targets
