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
from sglops.launch import ranks
from sglops.launch.profiles import Profile

if TYPE_CHECKING:
    from sglops.core.remote import Remote

TEMPLATES = paths.shipped("templates")
STANDIN_COMMAND = ["sglang-standin"]  # installed in sandbox hosts' bin by sglops.sandbox
CHECKED_CHOICES = {  # profile key -> flag whose choices the tree defines
    "attention_backend": "--attention-backend", "prefill_attention_backend": "--prefill-attention-backend",
    "decode_attention_backend": "--decode-attention-backend", "kv_cache_dtype": "--kv-cache-dtype",
    "moe_runner_backend": "--moe-runner-backend",
}
ORDER = ["model_path", "served_model_name", "tokenizer_path", "host", "port", "device", "tp_size", "dp_size",
         "ep_size", "pp_size", "nnodes", "node_rank", "dist_init_addr", "attention_backend",
         "prefill_attention_backend", "decode_attention_backend", "dsa_prefill_backend", "dsa_decode_backend",
         "kv_cache_dtype", "grammar_backend", "mem_fraction_static", "context_length", "max_running_requests",
         "max_total_tokens", "chunked_prefill_size", "quantization", "moe_runner_backend"]
BOOLS = ["trust_remote_code", "enable_metrics", "sleep_on_idle"]


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
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             autoescape=False, keep_trailing_newline=True, finalize=_only_quoted,
                             trim_blocks=True, lstrip_blocks=True)
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
    kind: str = "git"  # git: a checkout (cd into it, its python/ on PYTHONPATH) | installed: a site-packages
    host_facts: dict[str, Any] = field(default_factory=dict)  # CPUs, NUMA nodes, NCCL library (sglops.launch.ranks)

    @classmethod
    def from_inspect(cls, doc: dict) -> TreeArgs:
        sg = doc["sglang"]
        return cls(sg["version"], sg["root"], set(doc["flags"]), doc["choices"], doc["tree"], sg.get("kind") or "git",
                   doc.get("host") or {})


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
    derived_env: list[dict] = field(default_factory=list)  # variables this host needs (sglops.launch.ranks), why
    node_rank: int | None = None  # of a server over several nodes (nnodes > 1)

    def payload(self) -> dict:
        from dataclasses import asdict

        return asdict(self)



def _pick(tree: TreeArgs | None, *candidates: str) -> str:
    """The first spelling of a flag this release knows (offline: the newest spelling)."""
    if tree is None:
        return candidates[0]
    for c in candidates:
        if c in tree.flags:
            return c
    return candidates[0]


def sglang_argv(p: Profile, host: Host | None, tree: TreeArgs | None) -> tuple[list[str], dict[str, Any]]:
    """launch_server arguments for this profile on this host's release (flags not yet validated)."""
    a = dict(p.args)
    if a.get("nnodes", 1) > 1 and "node_rank" not in a:
        if host is None or host.node_rank is None:
            raise ConfigError(f"profile {p.name}: nnodes={a['nnodes']} needs a node_rank for "
                              f"{host.name if host else 'this host'} (inventory node_rank or per_host)")
        a["node_rank"] = host.node_rank
    argv: list[str] = []
    for key in ORDER:
        if key not in a:
            continue
        if key.startswith("dsa_"):
            stage = key.split("_")[1]
            flag = _pick(tree, f"--dsa-{stage}-backend", f"--nsa-{stage}-backend")
        else:
            flag = "--" + key.replace("_", "-")
        argv += [flag, str(a[key])]
    for key in BOOLS:
        if a.get(key):
            argv.append("--" + key.replace("_", "-"))
    cg = p.cuda_graph
    if cg.get("disable"):
        if tree is None or "--cuda-graph-backend-decode" in tree.flags:
            argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
        else:
            argv.append("--disable-cuda-graph")
    old_names = tree is not None and "--cuda-graph-max-bs" in tree.flags  # before 0.5.23
    if cg.get("max_bs") is not None:
        argv += ["--cuda-graph-max-bs" if old_names else "--cuda-graph-max-bs-decode", str(cg["max_bs"])]
    if cg.get("bs"):
        argv += ["--cuda-graph-bs" if old_names else "--cuda-graph-bs-decode"] + [str(b) for b in cg["bs"]]
    argv += p.extra_args
    return argv, a


def vllm_argv(p: Profile) -> tuple[list[str], dict[str, Any]]:
    """`vllm serve` arguments: the same profile fields under vLLM's names."""
    a = p.args
    if "model_path" not in a:
        raise ConfigError(f"profile {p.name}: model_path is required")
    argv = [a["model_path"]]
    names = {"served_model_name": "--served-model-name", "host": "--host", "port": "--port",
             "tp_size": "--tensor-parallel-size", "dp_size": "--data-parallel-size",
             "pp_size": "--pipeline-parallel-size", "kv_cache_dtype": "--kv-cache-dtype",
             "mem_fraction_static": "--gpu-memory-utilization", "context_length": "--max-model-len",
             "max_running_requests": "--max-num-seqs", "quantization": "--quantization"}
    for key, flag in names.items():
        if key in a:
            argv += [flag, str(a[key])]
    if a.get("ep_size", 1) > 1:
        argv.append("--enable-expert-parallel")
    if a.get("trust_remote_code"):
        argv.append("--trust-remote-code")
    if p.cuda_graph.get("disable"):
        argv.append("--enforce-eager")
    return argv + p.extra_args, dict(a)


def validate(p: Profile, argv: list[str], tree: TreeArgs, host_name: str) -> list[str]:
    """Refuse flags or backend values the host's release does not define; return warnings."""
    where = f"sglang {tree.version or '?'} on {host_name}"
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
        checks[f"dsa_{stage}_backend"] = _pick(tree, f"--dsa-{stage}-backend", f"--nsa-{stage}-backend")
    for key, flag in checks.items():
        val = p.args.get(key)
        valid = tree.choices.get(flag)
        if val is not None and valid and val not in valid:
            what = key.replace("_", " ")
            from sglops.probe.backend_history import profile_note

            raise ConfigError(f"profile {p.name}: unknown {what} {val!r} for {where}; valid: {', '.join(valid)}"
                              f"{profile_note(key, str(val), tree.version)}")
    warnings = []
    kv = str(p.args.get("kv_cache_dtype", "auto"))
    fi = "flashinfer" in {p.args.get("attention_backend"), p.args.get("decode_attention_backend"),
                          p.args.get("prefill_attention_backend")}
    if fi and kv.startswith("fp8") and tree.facts.get("whole_pool_cast") and not tree.facts.get("gather_cast"):
        warnings.append("flashinfer MLA with an FP8 KV cache casts the whole KV pool every decode step in this "
                        "tree (and its FA2 kernels static_assert on FP8 off SM90): consider the gather-cast patch "
                        "or --attention-backend trtllm_mla")
    return warnings


def launcher_argv(p: Profile, host: Host | None) -> list[str]:
    if isinstance(p.launcher, list):
        return list(p.launcher)
    if p.launcher == "standin":
        return list(STANDIN_COMMAND)
    python = p.python or (host.python if host else "python3")
    return [python, "-m", "sglang.launch_server"] if p.engine == "sglang" else ["vllm", "serve"]


def render(p: Profile, host: Host | None = None, tree: TreeArgs | None = None) -> Rendered:
    """The launch script for this profile on this host (validated when the host's tree is given)."""
    p = p.for_host(host.name if host else None)
    unresolved = p.var_refs()
    if host is not None:
        p, unresolved = p.with_vars(host.vars, host.name), []
    redact.register_named(p.env)  # values filled from {vars.X} are secrets if their name says so...
    redact.register_argv(p.extra_args)  # ...and so is the X of an `--api-key X` in extra_args
    if p.engine == "sglang":
        argv, effective = sglang_argv(p, host, tree)
    else:
        argv, effective = vllm_argv(p)
    warnings = validate(p, argv, tree, host.name if host else "?") if (tree and p.engine == "sglang") else []
    if unresolved:
        warnings.append(f"{{vars.{'}, {vars.'.join(unresolved)}}} left as written: no host given (`--host H` fills "
                        "them from its inventory vars)")
    command = launcher_argv(p, host) + argv
    port = int(effective.get("port") or (30000 if p.engine == "sglang" else 8000))
    bind = str(effective.get("host") or ("127.0.0.1" if p.engine == "sglang" else "0.0.0.0"))
    root = tree.root if tree else (host.sglang_root if host else None)
    # A pip-installed tree (site-packages) is neither a working folder nor a PYTHONPATH entry: the python finds it.
    checkout = root if root and (tree is None or tree.kind == "git") else None
    env = dict(p.env)
    derived = ranks.derived_env(effective, env, tree.host_facts if tree else None) if p.engine == "sglang" else []
    env.update({d.name: d.value for d in derived})
    lines = [launcher_argv(p, host)] + _pairs(argv)
    check_one_line(p, {"host": host.name if host else None, "sglang version": tree.version if tree else None,
                       "sglang root": checkout, **{f"env {k}": v for k, v in env.items()}, "env name": list(env),
                       "launcher": lines[0], "argument": argv})
    script = environment().get_template(f"{p.engine}.sh.j2").render(
        profile=p.name, host=host.name if host else "(no host: not validated)", engine=p.engine,
        version=(tree.version if tree else None) or "unknown", root=checkout,
        pythonpath=f"{checkout}/python" if checkout and p.engine == "sglang" else None, env=env, lines=lines,
    )
    expected = (expected_args(argv) if p.engine == "sglang"
                else {k: v for k, v in effective.items() if k in ORDER + BOOLS})
    node_rank = effective.get("node_rank") if int(effective.get("nnodes", 1)) > 1 else None
    return Rendered(p.name, host.name if host else None, p.engine, command, script, port, bind, expected, warnings,
                    tree.version if tree else None, tree is not None,
                    [{"name": d.name, "value": d.value, "why": d.why} for d in derived], node_rank)


def expected_args(argv: list[str]) -> dict[str, Any]:
    """What each rendered argument should read in the server's /server_info, keyed as SGLang names it there:
    `--flag v` -> flag: "v", `--flag a b` -> flag: ["a", "b"], a bare `--flag` -> flag: True."""
    out: dict[str, Any] = {}
    for words in _pairs(argv):
        flag, values = words[0], words[1:]
        if not flag.startswith("--"):
            continue
        if "=" in flag:
            flag, first = flag.split("=", 1)
            values = [first, *values]
        key = flag[2:].replace("-", "_")
        out[key] = True if not values else values[0] if len(values) == 1 else values
    return out


def _pairs(words: list[str]) -> list[list[str]]:
    """Group argv as `--flag value...` per line for a readable script."""
    out: list[list[str]] = []
    for w in words:
        if w.startswith("--") or not out:
            out.append([w])
        else:
            out[-1].append(w)
    return out


def inspect(remote: Remote) -> dict:
    """The host's tree (version, launch flags, backend choices) and its sglops server, one round trip.

    Asked once until the next step that may change the host (the connection's memo: Remote.remembered)."""
    return remote.remembered("server_inspect", lambda: remote.run_py(
        "server_inspect", {"sglang_root": remote.host.sglang_root}, timeout=60))
