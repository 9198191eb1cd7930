"""playbooks/probes.yaml: what a probe set is and how it is read (the report and the scan both use it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import paths
from sglops.core.errors import ConfigError
from sglops.core.yamlio import check_fields, load_yaml

DEFAULT_PROBES = paths.shipped("playbooks/probes.yaml")
LAUNCH_PROBES = paths.shipped("playbooks/probes-launch.yaml")
PROBE_FIELDS = {
    "id",
    "kind",
    "scope",
    "root",
    "files",
    "regex",
    "ignore_case",
    "options",
    "fact",
    "hit",
    "miss",
    "attribute",
    "window",
    "context",
    "follow",
    "names",
}
KINDS = {"grep", "choices", "functions", "fields"}
SCOPES = {"global", "backend"}
ROOTS = {"sglang", "flashinfer"}
ENGINES = {"auto", "rg", "python"}


@dataclass(frozen=True)
class Probe:
    """One probe: where to look, what to match, and what a hit or a miss means."""

    id: str
    kind: str = "grep"
    scope: str = "global"
    root: str = "sglang"
    files: tuple[str, ...] = ()
    regex: str | None = None
    ignore_case: bool = False
    options: tuple[str, ...] = ()
    fact: str | None = None
    # attribute: backends -> look this many lines above a hit for backend names
    window: int | None = None
    # ... only on lines matching this regex
    context: str | None = None
    # kind functions: a regex of def names whose source the host returns
    names: str | None = None
    # scope backend: also the sglang modules a backend file imports, if they match these globs
    follow: tuple[str, ...] = ()
    hit: str = "found"
    miss: str = "not found"
    where: str = "?"

    def to_wire(self) -> dict[str, Any]:
        """What the host script needs (no prose)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "scope": self.scope,
            "root": self.root,
            "files": list(self.files),
            "regex": self.regex,
            "ignore_case": self.ignore_case,
            "options": list(self.options),
            "window": self.window,
            "context": self.context,
            "follow": list(self.follow),
            "names": self.names,
        }


@dataclass(frozen=True)
class ProbeSet:
    """A probe file: the backend files to report on and the probes to run."""

    path: str
    backend_files: str
    expect: tuple[str, ...]
    probes: tuple[Probe, ...]
    # backend file name -> option values
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def choice_names(self, backend: str) -> set[str]:
        """The --attention-backend values that select this backend file (its own name included)."""
        return {backend, *self.aliases.get(backend, ())}

    def get(self, probe_id: str) -> Probe:
        return next(p for p in self.probes if p.id == probe_id)


def _str_list(value: Any, where: str, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {what} must be a string or a list of strings")
    return tuple(value)


def _regex(text: Any, where: str, what: str) -> None:
    try:
        re.compile(str(text))
    except re.error as exc:
        raise ConfigError(f"{where}: {what} {text!r}: {exc}") from None


def _check_match(kind: str, names: Any, regex: Any, options: tuple[str, ...], where: str, pid: str) -> None:
    """What a probe matches, by kind: def names or a regex (functions, fields), a regex (grep), options
    (choices)."""
    if kind in ("functions", "fields"):
        if kind == "functions" and not (isinstance(names, str) or isinstance(regex, str)):
            raise ConfigError(
                f"{where}: probe {pid!r}: kind functions takes names (a regex of def names) or a regex"
            )
        for rx_text in (names, regex):
            if rx_text is not None:
                _regex(rx_text, where, f"probe {pid!r}: invalid regex")
    elif names is not None:
        raise ConfigError(f"{where}: probe {pid!r}: names is for kind functions")
    elif kind == "grep":
        if not isinstance(regex, str) or not regex:
            raise ConfigError(f"{where}: probe {pid!r} needs a regex")
        _regex(regex, where, f"probe {pid!r}: invalid regex")
    elif not options or regex is not None:
        raise ConfigError(
            f"{where}: probe {pid!r}: kind choices takes options (e.g. [--attention-backend]), no regex"
        )


def _window(d: dict, scope: str, kind: str, where: str, pid: str) -> tuple[int | None, Any]:
    """A global grep probe's `attribute: backends`: the lines after a hit it reads (window), their
    context."""
    window, context = None, d.get("context")
    if "attribute" in d or "window" in d or context is not None:
        window = d.get("window", 6)
        if d.get("attribute") != "backends" or scope != "global" or kind != "grep":
            raise ConfigError(
                f"{where}: probe {pid!r}: attribute: backends (with window) is for global grep probes"
            )
        if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window <= 50:
            raise ConfigError(
                f"{where}: probe {pid!r}: window must be a number of lines (0-50), got {window!r}"
            )
        if context is not None:
            _regex(context, where, f"probe {pid!r}: invalid context regex")
    return window, context


def _probe(d: Any, seen: set[str]) -> Probe:
    where = getattr(d, "where", "?")
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: each probe must be a mapping")
    pid = d.get("id")
    name = f"probe {pid!r}" if pid else "probe"
    check_fields(d, PROBE_FIELDS, name, required={"id"})
    if not isinstance(pid, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", pid):
        raise ConfigError(f"{where}: probe id must be a word (letters, digits, _ . -), got {pid!r}")
    if pid in seen:
        raise ConfigError(f"{where}: probe {pid!r} is defined twice")
    seen.add(pid)
    kind, scope, root = d.get("kind", "grep"), d.get("scope", "global"), d.get("root", "sglang")
    for value, allowed, label in ((kind, KINDS, "kind"), (scope, SCOPES, "scope"), (root, ROOTS, "root")):
        if not isinstance(value, str) or value not in allowed:
            raise ConfigError(
                f"{where}: probe {pid!r}: {label} must be one of {', '.join(sorted(allowed))}, got {value!r}"
            )
    files = _str_list(d.get("files", []), where, f"probe {pid!r}: files")
    if scope == "global" and not files:
        raise ConfigError(f"{where}: probe {pid!r} needs files (globs relative to the {root} package folder)")
    if scope == "backend" and (files or root != "sglang" or kind != "grep"):
        raise ConfigError(
            f"{where}: probe {pid!r}: scope backend reads backends.files (no files, root or kind)"
        )
    regex, options = d.get("regex"), _str_list(d.get("options", []), where, f"probe {pid!r}: options")
    names = d.get("names")
    _check_match(kind, names, regex, options, where, pid)
    follow = _str_list(d.get("follow", []), where, f"probe {pid!r}: follow")
    if follow and scope != "backend" and kind != "functions":
        raise ConfigError(
            f"{where}: probe {pid!r}: follow (the modules a backend imports) is for scope: backend"
        )
    window, context = _window(d, scope, kind, where, pid)
    return Probe(
        id=pid,
        kind=kind,
        scope=scope,
        root=root,
        files=files,
        regex=regex,
        window=window,
        follow=follow,
        names=str(names) if names is not None else None,
        context=str(context) if context is not None else None,
        ignore_case=bool(d.get("ignore_case", False)),
        options=options,
        fact=d.get("fact"),
        hit=str(d.get("hit", "found")),
        miss=str(d.get("miss", "not found")),
        where=where,
    )


def load_probe_set(path: str | Path | None = None) -> ProbeSet:
    """Read and check a probe file (default playbooks/probes.yaml); errors name the probe and file:line."""
    path = Path(path) if path else DEFAULT_PROBES
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a probe file is a mapping with backends: and probes:")
    check_fields(data, {"backends", "probes"}, "probe file", required={"probes"})
    backends = data.get("backends") or {}
    check_fields(backends, {"files", "expect", "aliases"}, "backends")
    aliases = backends.get("aliases") or {}
    if not isinstance(aliases, dict):
        raise ConfigError(
            f"{getattr(backends, 'where', path)}: backends.aliases maps a backend to option values"
        )
    aliases = {
        str(k): _str_list(v, getattr(aliases, "where", str(path)), f"aliases.{k}") for k, v in aliases.items()
    }
    probes_raw = data.get("probes")
    if not isinstance(probes_raw, list) or not probes_raw:
        raise ConfigError(f"{data.where}: probes must be a non-empty list")
    seen: set[str] = set()
    probes = tuple(_probe(d, seen) for d in probes_raw)
    return ProbeSet(
        path=str(path),
        backend_files=str(backends.get("files", "srt/layers/attention/*_backend.py")),
        expect=_str_list(backends.get("expect", []), getattr(backends, "where", str(path)), "expect"),
        probes=probes,
        aliases=aliases,
    )


def with_launch_probes(probe_set: ProbeSet, path: str | Path | None = None) -> ProbeSet:
    """The probe set plus the launch question's probes (playbooks/probes-launch.yaml), for one round trip."""
    extra = load_probe_set(path or LAUNCH_PROBES)
    have = {p.id for p in probe_set.probes}
    clash = [p.id for p in extra.probes if p.id in have]
    if clash:
        raise ConfigError(f"{extra.path}: probe ids {', '.join(clash)} are also in {probe_set.path}")
    return ProbeSet(
        path=probe_set.path,
        backend_files=probe_set.backend_files,
        expect=probe_set.expect,
        probes=probe_set.probes + extra.probes,
        aliases=probe_set.aliases,
    )
