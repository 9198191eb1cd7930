"""Server profiles: `playbooks/profiles/NAME.yaml`, one launch configuration each.

Why YAML: the flags that make an experiment (backends, KV dtype, CUDA graphs, parallelism) change
with every SGLang release, so they live in data that is validated against the host's own tree
at render time, not in code. A profile may `extends:` another and override per host (`per_host:`).
What differs between machines (where the model lives) stays in the inventory: a string value may say
`{vars.NAME}` and takes the host's `vars:` entry NAME at render time.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import paths, redact, values
from sglops.core.errors import ConfigError
from sglops.core.yamlio import check_fields, load_yaml
from sglops.engine import DEFAULT as DEFAULT_ENGINE
from sglops.engine import NAMES as ENGINES

SCALARS = {
    "model_path": str,
    "served_model_name": str,
    "tokenizer_path": str,
    "host": str,
    "port": int,
    "tp_size": int,
    "dp_size": int,
    "ep_size": int,
    "pp_size": int,
    "attention_backend": str,
    "prefill_attention_backend": str,
    "decode_attention_backend": str,
    "dsa_prefill_backend": str,
    "dsa_decode_backend": str,
    "kv_cache_dtype": str,
    "mem_fraction_static": float,
    "context_length": int,
    "max_running_requests": int,
    "max_total_tokens": int,
    "device": str,
    "grammar_backend": str,
    "chunked_prefill_size": int,
    "quantization": str,
    "moe_runner_backend": str,
    "trust_remote_code": bool,
    "enable_metrics": bool,
    "sleep_on_idle": bool,
    "nnodes": int,
    "node_rank": int,
    "dist_init_addr": str,
}
# Numbers SGLang would reject at start-up (minutes later, on the GPU host) or silently misread: refused here
# in one line. (low, high) inclusive; chunked_prefill_size -1 is SGLang's "no chunking".
RANGES = {
    "mem_fraction_static": (1e-6, 1.0),
    "tp_size": (1, 4096),
    "dp_size": (1, 4096),
    "ep_size": (1, 4096),
    "pp_size": (1, 4096),
    "context_length": (1, 1 << 24),
    "max_running_requests": (1, 1 << 24),
    "max_total_tokens": (1, 1 << 34),
    "chunked_prefill_size": (-1, 1 << 24),
    "nnodes": (1, 4096),
    "node_rank": (0, 4095),
}
OTHER = {
    "engine",
    "description",
    "extends",
    "launcher",
    "python",
    "cuda_graph",
    "env",
    "extra_args",
    "startup_timeout",
    "stop_grace",
    "per_host",
    "container_restart",
}
ALIASES = {"nsa_prefill_backend": "dsa_prefill_backend", "nsa_decode_backend": "dsa_decode_backend"}
CUDA_GRAPH_FIELDS = {"disable", "max_bs", "bs"}
LAUNCHERS = ("module", "standin")
# How a restart reaches a server in a container target (docs/container.md): exec = sglops starts the server
# process inside a long-running container, as on a host; entrypoint = the container's own command is the
# server, so a restart is the engine's `restart` of that container (its command is never changed by sglops).
CONTAINER_RESTARTS = ("exec", "entrypoint")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VAR_REF = re.compile(r"\{vars\.([A-Za-z_][A-Za-z0-9_]*)\}")


def profiles_dir() -> Path:
    """The folder an error names: the first searched (core/paths.py says the order)."""
    return paths.folders("playbooks/profiles", env="SGLOPS_PROFILES")[0]


def list_profiles() -> list[str]:
    return [p.stem for p in paths.listing("playbooks/profiles", "*.yaml", env="SGLOPS_PROFILES")]


@dataclass
class Profile:
    """A resolved profile (extends applied); `for_host()` applies its per-host overrides."""

    name: str
    path: Path
    engine: str = DEFAULT_ENGINE
    description: str = ""
    launcher: str | list[str] = "module"
    python: str | None = None
    # SGLang-named scalars (model_path, tp_size, ...)
    args: dict[str, Any] = field(default_factory=dict)
    cuda_graph: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    startup_timeout: float = 600.0
    stop_grace: float = 20.0
    per_host: dict[str, dict] = field(default_factory=dict)
    container_restart: str = "exec"

    def for_host(self, host_name: str | None) -> Profile:
        override = self.per_host.get(host_name or "", {})
        if not override:
            return self
        merged = _merge(self._raw(), override)
        return _build(self.name, self.path, merged)

    def _raw(self) -> dict:
        return {
            "engine": self.engine,
            "description": self.description,
            "launcher": self.launcher,
            **({"python": self.python} if self.python else {}),
            **self.args,
            "cuda_graph": dict(self.cuda_graph),
            "env": dict(self.env),
            "extra_args": list(self.extra_args),
            "startup_timeout": self.startup_timeout,
            "stop_grace": self.stop_grace,
            "container_restart": self.container_restart,
        }

    def to_json(self) -> dict:
        return {"name": self.name, "path": str(self.path), **self._raw(), "per_host": self.per_host}

    def var_refs(self) -> list[str]:
        """The `{vars.NAME}` names its values refer to (empty: nothing host-specific to fill in)."""
        return sorted({m for text in _strings(self) for m in VAR_REF.findall(text)})

    def with_vars(self, host_vars: dict[str, Any], host_name: str) -> Profile:
        """The profile with every `{vars.NAME}` replaced by
        the host's var NAME (one line if one is missing)."""

        def fill(key: str, text: str) -> str:
            def one(m: re.Match) -> str:
                if m.group(1) not in host_vars:
                    have = ", ".join(sorted(host_vars)) or "none"
                    raise ConfigError(
                        f"profile {self.name}: {key} refers to {{vars.{m.group(1)}}} but host {host_name} "
                        f"has no var {m.group(1)!r} (its vars: {have}; set it under the host's `vars:` "
                        f"in the inventory)"
                    )
                return str(host_vars[m.group(1)])

            return VAR_REF.sub(one, text)

        if not self.var_refs():
            return self
        args = {k: fill(k, v) if isinstance(v, str) else v for k, v in self.args.items()}
        env = {k: fill(f"env.{k}", v) for k, v in self.env.items()}
        extra = [fill("extra_args", v) for v in self.extra_args]
        launcher = (
            [fill("launcher", v) for v in self.launcher] if isinstance(self.launcher, list) else self.launcher
        )
        python = fill("python", self.python) if self.python else None
        return Profile(
            **{
                **self.__dict__,
                "args": args,
                "env": env,
                "extra_args": extra,
                "launcher": launcher,
                "python": python,
            }
        )


def _strings(p: Profile) -> list[str]:
    vals = [v for v in p.args.values() if isinstance(v, str)] + list(p.env.values()) + list(p.extra_args)
    vals += list(p.launcher) if isinstance(p.launcher, list) else []
    return vals + ([p.python] if p.python else [])


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if k in ("env", "cuda_graph") and isinstance(v, dict):
            out[k] = {**(base.get(k) or {}), **v}
        else:
            out[k] = v
    return out


def _path_for(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        path = Path(name)
    else:
        path = paths.find("playbooks/profiles", f"{name}.yaml", env="SGLOPS_PROFILES")
    if not path.is_file():
        have = ", ".join(list_profiles()) or "none"
        raise ConfigError(f"no server profile {name!r} ({path}); profiles in {profiles_dir()}: {have}")
    return path


def _load_raw(name: str, seen: tuple[str, ...] = ()) -> tuple[Path, dict]:
    path = _path_for(name)
    if str(path) in seen:
        raise ConfigError(f"{path}: profile extends itself (via {' -> '.join(seen)})")
    data = load_yaml(path) or {}
    check_fields(data, set(SCALARS) | OTHER | set(ALIASES), f"server profile {path.stem}")
    if "extends" in data:
        _, base = _load_raw(str(data["extends"]), seen + (str(path),))
        data = _merge(base, {k: v for k, v in data.items() if k != "extends"})
    return path, data


def load_profile(name: str) -> Profile:
    """A profile by name (playbooks/profiles/NAME.yaml, or $SGLOPS_PROFILES) or by path."""
    path, data = _load_raw(name)
    return _build(path.stem, path, data)


def _renamed(data: dict, where: str) -> dict:
    """Old field names under their new ones (both given with different values is refused)."""
    for old, new in ALIASES.items():
        if old in data:
            if new in data and data[new] != data[old]:
                raise ConfigError(f"{where}: give {new} or its old name {old}, not both")
            data[new] = data.pop(old)
    return data


def _scalars(data: dict, where: str) -> dict[str, Any]:
    """The server arguments a profile sets, each checked against its type and range."""
    args: dict[str, Any] = {}
    for key, kind in SCALARS.items():
        if data.get(key) is None:
            continue
        val = data[key]
        if kind is float and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if kind is str and isinstance(val, (int, float)) and not isinstance(val, bool):
            val = str(val)
        if not isinstance(val, kind) or (kind is int and isinstance(val, bool)):
            raise ConfigError(f"{where}: {key} must be {kind.__name__}, got {val!r}")
        if key == "port":
            values.Port().check(val, f"{where}: port")
        if key in RANGES:
            low, high = RANGES[key]
            # NaN fails too
            if not (low <= val <= high) or (key == "chunked_prefill_size" and val == 0):
                raise ConfigError(f"{where}: {key} must be between {low} and {high}, got {val!r}")
        args[key] = val
    return args


def _env(env: Any, where: str) -> dict:
    """The profile's environment: valid names, plain values; a secret-looking name's value is masked
    everywhere."""
    if not isinstance(env, dict):
        raise ConfigError(f"{where}: env must be a mapping NAME: value")
    for k, v in env.items():
        if not ENV_NAME.match(str(k)):
            raise ConfigError(f"{where}: env name {k!r} is not a valid variable name")
        if not isinstance(v, str | int | float | bool):
            raise ConfigError(f"{where}: env {k} must be a plain value, got {v!r}")
        if redact.SECRET_NAME.search(str(k)):
            # an HF_TOKEN in a profile never shows in a printed script or artifact
            redact.register(str(v))
    return env


def _build(name: str, path: Path, data: dict) -> Profile:
    where = getattr(data, "where", str(path))
    data = _renamed(dict(data), where)
    engine = data.get("engine", "sglang")
    if engine not in ENGINES:
        raise ConfigError(f"{where}: engine {engine!r} is not one of {', '.join(ENGINES)}")
    args = _scalars(data, where)
    launcher = data.get("launcher", "module")
    if not (
        launcher in LAUNCHERS
        or (isinstance(launcher, list) and launcher and all(isinstance(x, str) for x in launcher))
    ):
        raise ConfigError(f"{where}: launcher must be one of {', '.join(LAUNCHERS)} or a command list")
    cuda_graph = data.get("cuda_graph") or {}
    check_fields(cuda_graph, CUDA_GRAPH_FIELDS, "cuda_graph") if isinstance(cuda_graph, dict) else None
    if not isinstance(cuda_graph, dict):
        raise ConfigError(f"{where}: cuda_graph must be a mapping of {', '.join(sorted(CUDA_GRAPH_FIELDS))}")
    env = _env(data.get("env") or {}, where)
    extra = data.get("extra_args") or []
    if not isinstance(extra, list):
        raise ConfigError(f"{where}: extra_args must be a list of strings, one argument each")
    per_host = data.get("per_host") or {}
    if not isinstance(per_host, dict):
        raise ConfigError(f"{where}: per_host must be a mapping of host name: overrides")
    for host, over in per_host.items():
        check_fields(
            over,
            set(SCALARS) | {"env", "cuda_graph", "extra_args", "python", "launcher", "container_restart"},
            f"per_host.{host}",
        )
    if args.get("nnodes", 1) > 1 and not args.get("dist_init_addr"):
        raise ConfigError(f"{where}: nnodes > 1 needs dist_init_addr (host:port of node 0)")
    python = values.Str().check(data.get("python"), f"{where}: python")
    container_restart = values.Choice(CONTAINER_RESTARTS, "exec").check(
        data.get("container_restart"), f"{where}: container_restart"
    )
    return Profile(
        name=name,
        path=path,
        engine=engine,
        description=str(data.get("description") or ""),
        launcher=launcher,
        python=python,
        args=args,
        cuda_graph=dict(cuda_graph),
        env={str(k): str(v) for k, v in env.items()},
        extra_args=[str(x) for x in extra],
        startup_timeout=values.Float(1, 86400, 600.0).check(
            data.get("startup_timeout"), f"{where}: startup_timeout"
        ),
        stop_grace=values.Float(0, 3600, 20.0).check(data.get("stop_grace"), f"{where}: stop_grace"),
        per_host=dict(per_host),
        container_restart=container_restart,
    )
