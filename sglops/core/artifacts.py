"""Where results are kept: artifacts/<host>/<run-id>/, each with a manifest.json.

A run id sorts by time and is unique across operators (`20261202-134501-a1b2`).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

import orjson

from sglops.core import jsonsafe, owner, paths, redact


def artifacts_root() -> Path:
    return paths.records()


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def safe_name(name: str) -> str:
    """A host name or address as a folder name (no slashes, colons or spaces)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "host"


# one folder name: no path, no glob, no `..`
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def checked_run_id(run_id: str) -> str:
    """run_id when it names one folder under a host's (never
    a path out of the artifacts folder, nor a glob)."""
    from sglops.core.errors import ConfigError

    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ConfigError(
            f"run id {str(run_id)[:80]!r} is not a run id (letters, digits, . _ + -; no path, no "
            "wildcard; see `inv runs`)"
        )
    return run_id


def run_path(host: str, run_id: str) -> Path:
    """Where run `run_id` of host is kept (not created: a
    result can name its folder before the runner records)."""
    return artifacts_root() / safe_name(host) / checked_run_id(run_id)


def run_dir(host: str, run_id: str) -> Path:
    path = run_path(host, run_id)
    path.mkdir(parents=True, exist_ok=True)
    return path


def dumps(obj: Any) -> bytes:
    return jsonsafe.dumps(
        redact.obj(obj), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
    )


def write_json(path: Path, obj: Any) -> Path:
    """Write JSON atomically (temp + rename), secrets masked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(dumps(obj) + b"\n")
    os.replace(tmp, path)
    return path


def read_json(path: Path) -> Any:
    return orjson.loads(Path(path).read_bytes())


def save(host: str, run_id: str, name: str, obj: Any, *, task: str, extra: dict | None = None) -> Path:
    """Save one result file and update the run's manifest; returns the result file's path."""
    folder = run_dir(host, run_id)
    out = write_json(folder / name, obj)
    manifest_path = folder / "manifest.json"
    manifest = (
        read_json(manifest_path)
        if manifest_path.exists()
        else {
            "run_id": run_id,
            "host": host,
            "task": task,
            "operator": owner.user(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": [],
        }
    )
    if name not in manifest["files"]:
        manifest["files"].append(name)
    manifest.update(extra or {})
    write_json(manifest_path, manifest)
    return out


def keep(host: str, run_id: str, name: str, result: Any, *, task: str, extra: dict | None = None) -> Path:
    """Record a result as run `run_id` (its files, then `name` with the manifest): the RUNNER's one way to
    record (sglops.core.op.Context.keep, the task runner, the play engine); domain code only returns
    results."""
    folder = run_dir(host, run_id)
    for fname, content in (result.run_files() if hasattr(result, "run_files") else {}).items():
        path = folder / fname
        tmp = path.with_name(path.name + ".tmp")
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        elif isinstance(content, str):
            tmp.write_text(redact.text(content))
        else:
            tmp.write_bytes(dumps(content) + b"\n")
        os.replace(tmp, path)
    out = save(
        host,
        run_id,
        name,
        result.to_json(),
        task=task,
        extra={**(result.run_manifest() if hasattr(result, "run_manifest") else {}), **(extra or {})},
    )
    if hasattr(result, "artifact"):
        result.artifact = str(out)
    return out


def list_runs(host: str | None = None) -> list[dict]:
    """Every recorded run (newest last), from the manifests."""
    root = artifacts_root()
    runs = []
    for manifest in sorted(root.glob("*/*/manifest.json")):
        if host and manifest.parent.parent.name != safe_name(host):
            continue
        try:
            data = read_json(manifest)
        except (OSError, orjson.JSONDecodeError):
            continue
        data["path"] = str(manifest.parent)
        runs.append(data)
    return sorted(runs, key=lambda r: r.get("run_id", ""))


def find_run(run_id: str) -> Path:
    """A run's folder from its id (or a unique prefix, or a path)."""
    from sglops.core.errors import ConfigError

    # a folder named by its path, as the operator wrote it
    if Path(run_id).is_dir():
        return Path(run_id)
    # else an id: looked up under the artifacts folder only
    checked_run_id(run_id)
    exact = [p for p in artifacts_root().glob(f"*/{run_id}") if p.is_dir()]
    matches = exact or [p for p in artifacts_root().glob(f"*/{run_id}*") if p.is_dir()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigError(f"no run {run_id!r} under {artifacts_root()} (see `inv runs`)")
    raise ConfigError(f"run id {run_id!r} is ambiguous: {', '.join(sorted(m.name for m in matches)[:5])}")
