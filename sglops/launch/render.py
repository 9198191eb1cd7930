"""Profile -> launch argv -> shell script, checked against the host's own SGLang tree.

Why per release: flags move (0.5.23 dropped `--cuda-graph-max-bs`, `--nsa-*` became `--dsa-*`),
so the argv is built from the flags the host's server_args defines (see host/
server_inspect.py) and an unknown flag or backend is refused before anything is stopped.
Every value reaches the script through the `q` filter (shlex.quote); the template environment
refuses any expression that was not quoted. Quotes keep a value one word, but a line break inside them still
ends a line where quotes mean nothing (the script's comment lines): so every value is checked to hold no
character that can end a line (sglops.core.values.one_line), named by where it came from, before rendering,
and `q` refuses one again as the last guard.
"""

from __future__ import annotations

import difflib
import functools
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jinja2

from sglops.core import paths, redact
from sglops.core.errors import ConfigError
from sglops.core.hosts import Host
from sglops.core.result import Observation
from sglops.core.values import line_breaker, one_line
from sglops.engine import DEFAULT as ENGINE_DEFAULT
from sglops.engine import get as get_engine
from sglops.engine import host_specs
from sglops.engine.base import pairs
from sglops.launch import ranks
from sglops.launch.profiles import Profile

if TYPE_CHECKING:
    from sglops.core.remote import Remote

TEMPLATES = paths.shipped("templates")
# installed in sandbox hosts' bin by sglops.sandbox
STANDIN_COMMAND = ["sglang-standin"]
# profile key -> flag whose choices the tree defines (a flag the engine lacks is skipped)
CHECKED_CHOICES = {
    "attention_backend": "--attention-backend",
    "prefill_attention_backend": "--prefill-attention-backend",
    "decode_attention_backend": "--decode-attention-backend",
    "kv_cache_dtype": "--kv-cache-dtype",
    "moe_runner_backend": "--moe-runner-backend",
}


class Quoted(str):
    """Text already shell-quoted; the only thing a template may print."""


def _quoted(value: Any) -> str:
    text = str(value)
    bad = line_breaker(text)
    if bad:
        raise ConfigError(f"a launch script value holds a control character ({bad}): {text!r:.80}")
    return shlex.quote(text)


def q(value: Any) -> Quoted:
    return Quoted(_quoted(value))


def qjoin(values: list[Any], sep: str = " ") -> Quoted:
    return Quoted(sep.join(_quoted(v) for v in values))


def check_one_line(p: Profile, fields: dict[str, Any]) -> None:
    """Every value that reaches the script, named for the one line that refuses it."""
    where = f"profile {p.name!r}"
    one_line(p.name, "profile name")
    for label, value in fields.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is not None:
                one_line(str(item), f"{where}: {label}")


def _only_quoted(value: Any) -> Any:
    if isinstance(value, Quoted):
        return value
    raise jinja2.TemplateError(f"template printed an unquoted value {value!r}: pass it through | q")


@functools.cache
def environment() -> jinja2.Environment:
    """The template environment, built once (its templates compile once per process)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=_only_quoted,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = q
    env.filters["qjoin"] = qjoin
    return env


@dataclass
class TreeArgs:
    """What the host's tree accepts (from server_inspect); None for an offline render."""

    version: str | None
    root: str | None
    flags: set[str]
    choices: dict[str, list[str]]
    facts: dict[str, bool] = field(default_factory=dict)
    # git: a checkout (cd into it, its python/ on PYTHONPATH) | installed: a site-packages
    kind: str = "git"
    # CPUs, NUMA nodes, NCCL library (sglops.launch.ranks)
    host_facts: dict[str, Any] = field(default_factory=dict)

    engine: str = ENGINE_DEFAULT
    # where the host keeps its server state (the host's first engine tree)
    state_root: str | None = None

    @classmethod
    def from_inspect(cls, doc: dict) -> TreeArgs:
        """From server_inspect's answer: `tree` is the asked engine's tree (`sglang` before engines)."""
        sg = doc.get("engine_tree") or doc["sglang"]
        return cls(
            sg["version"],
            sg["root"],
            set(doc["flags"]),
            doc["choices"],
            doc["tree"],
            sg.get("kind") or "git",
            doc.get("host") or {},
            doc.get("engine") or ENGINE_DEFAULT,
            doc.get("state_root") or sg["root"],
        )


@dataclass
class Rendered(Observation):
    """The script and what went into it."""

    profile: str
    host: str | None
    engine: str
    argv: list[str]
    script: str
    port: int
    bind: str
    expected: dict[str, Any]
    warnings: list[str]
    sglang_version: str | None
    validated: bool
    # variables this host needs (sglops.launch.ranks), why
    derived_env: list[dict] = field(default_factory=list)
    # of a server over several nodes (nnodes > 1)
    node_rank: int | None = None

    def payload(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def validate(p: Profile, argv: list[str], tree: TreeArgs, host_name: str) -> list[str]:
    """Refuse flags or backend values the host's release does not define; return warnings."""
    where = f"{get_engine(p.engine).name} {tree.version or '?'} on {host_name}"
    for word in argv:
        if not word.startswith("--"):
            continue
        flag = word.split("=", 1)[0]
        if flag not in tree.flags:
            near = difflib.get_close_matches(flag, sorted(tree.flags), n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"profile {p.name}: {flag} is not a launch argument of {where}{hint}")
    checks = dict(CHECKED_CHOICES)
    for stage in ("prefill", "decode"):
        spelled = [f"--dsa-{stage}-backend", f"--nsa-{stage}-backend"]
        checks[f"dsa_{stage}_backend"] = next((f for f in spelled if f in tree.flags), spelled[0])
    for key, flag in checks.items():
        val = p.args.get(key)
        valid = tree.choices.get(flag)
        if val is not None and valid and val not in valid:
            what = key.replace("_", " ")
            from sglops.probe.backend_history import profile_note

            raise ConfigError(
                f"profile {p.name}: unknown {what} {val!r} for {where}; valid: {', '.join(valid)}"
                f"{profile_note(key, str(val), tree.version)}"
            )
    warnings = []
    kv = str(p.args.get("kv_cache_dtype", "auto"))
    fi = "flashinfer" in {
        p.args.get("attention_backend"),
        p.args.get("decode_attention_backend"),
        p.args.get("prefill_attention_backend"),
    }
    if (
        fi
        and kv.startswith("fp8")
        and tree.facts.get("whole_pool_cast")
        and not tree.facts.get("gather_cast")
    ):
        warnings.append(
            "flashinfer MLA with an FP8 KV cache casts the whole KV pool every decode step in this "
            "tree (and its FA2 kernels static_assert on FP8 off SM90): consider the gather-cast patch "
            "or --attention-backend trtllm_mla"
        )
    return warnings


def launcher_argv(p: Profile, host: Host | None) -> list[str]:
    if isinstance(p.launcher, list):
        return list(p.launcher)
    if p.launcher == "standin":
        return list(STANDIN_COMMAND)
    return get_engine(p.engine).launcher(p.python or (host.python if host else "python3"))


def render(p: Profile, host: Host | None = None, tree: TreeArgs | None = None) -> Rendered:
    """The launch script for this profile on this host (validated when the host's tree is given)."""
    p = p.for_host(host.name if host else None)
    unresolved = p.var_refs()
    if host is not None:
        p, unresolved = p.with_vars(host.vars, host.name), []
    # values filled from {vars.X} are secrets if their name says so...
    redact.register_named(p.env)
    # ...and so is the X of an `--api-key X` in extra_args
    redact.register_argv(p.extra_args)
    eng = get_engine(p.engine)
    argv, effective = eng.argv(p, host, tree.flags if tree else None)
    warnings = validate(p, argv, tree, host.name if host else "?") if tree else []
    if unresolved:
        warnings.append(
            f"{{vars.{'}, {vars.'.join(unresolved)}}} left as written: no host given (`--host H` fills "
            "them from its inventory vars)"
        )
    command = launcher_argv(p, host) + argv
    port = int(effective.get("port") or eng.default_port)
    bind = str(effective.get("host") or eng.default_bind)
    root = tree.root if tree else (host.sglang_root if host and eng is get_engine(None) else None)
    # A pip-installed tree (site-packages) is neither a working
    # folder nor a PYTHONPATH entry: the python finds it.
    checkout = root if root and (tree is None or tree.kind == "git") else None
    env = {**eng.server_env, **p.env}
    derived = ranks.derived_env(effective, env, tree.host_facts if tree else None, eng)
    env.update({d.name: d.value for d in derived})
    lines = [launcher_argv(p, host)] + pairs(argv)
    check_one_line(
        p,
        {
            "host": host.name if host else None,
            f"{eng.name} version": tree.version if tree else None,
            f"{eng.name} root": checkout,
            **{f"env {k}": v for k, v in env.items()},
            "env name": list(env),
            "launcher": lines[0],
            "argument": argv,
        },
    )
    script = (
        environment()
        .get_template(eng.template)
        .render(
            profile=p.name,
            host=host.name if host else "(no host: not validated)",
            engine=p.engine,
            version=(tree.version if tree else None) or "unknown",
            root=checkout,
            pythonpath=f"{checkout}/{eng.checkout_pythonpath}"
            if checkout and eng.checkout_pythonpath
            else None,
            env=env,
            lines=lines,
        )
    )
    node_rank = effective.get("node_rank") if int(effective.get("nnodes", 1)) > 1 else None
    return Rendered(
        p.name,
        host.name if host else None,
        p.engine,
        command,
        script,
        port,
        bind,
        eng.expected(argv, effective),
        warnings,
        tree.version if tree else None,
        tree is not None,
        [{"name": d.name, "value": d.value, "why": d.why} for d in derived],
        node_rank,
    )


def inspect(remote: Remote, engine: str | None = None, python: str | None = None) -> dict:
    """The host's tree of this engine (version, launch flags, backend choices) and its sglops server, one
    round trip. python: the server's python when the profile names one (an engine's tree is found through it).

    Asked once until the next step that may change the host (the connection's memo: Remote.remembered)."""
    eng = get_engine(engine)
    key = "server_inspect" if eng.name == ENGINE_DEFAULT else f"server_inspect:{eng.name}:{python}"
    return remote.remembered(
        key,
        lambda: remote.run_py(
            "server_inspect",
            {
                "sglang_root": remote.host.sglang_root,
                "engine": eng.host_spec(),
                "engines": host_specs(),
                "python": python,
            },
            timeout=120,
        ),
    )
