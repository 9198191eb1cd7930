"""What a launch step answers (restart, stop, status, logs) and how a restart is judged: the failure hints
and the check of every rendered argument against /server_info.

Why a module of its own: both ways of restarting (sglops.launch.server: sglops starts the process;
sglops.launch.container: the container's command is the server) build these results and use the same
judgement, so neither has to import the other. Their tables are in sglops.views.launch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sglops.core.errors import Failed
from sglops.core.result import Observation, Result

HINTS = {
    "static_assert": (
        "a kernel was compiled for a dtype it does not support (FlashInfer FA2 MLA + FP8 KV): "
        "try the gather-cast patch or --attention-backend trtllm_mla"
    ),
    "cuda_oom": "lower mem_fraction_static or cuda_graph.max_bs, or use more GPUs",
    "port_in_use": "another process holds the port: `inv server-status`, or pick another port in the profile",
    "unknown_backend": (
        "this release does not know that backend: `inv render PROFILE --host H` lists the valid ones"
    ),
    "bad_argument": "this release refused a launch argument: check the profile's values and extra_args",
    "model_missing": (
        "model_path is neither a folder on the host nor a hub id: check the path (or the host's vars)"
    ),
    "unsupported": (
        "a valid choice this host cannot run (a package or CPU/GPU feature is missing): pick another "
        "backend or KV dtype"
    ),
    "import_error": "SGLang failed while importing: a missing or broken package in the server's Python",
    "python_traceback": "the server raised during start-up: read the traceback above",
    "timeout": "no /health in time: raise startup_timeout, or read the log (`inv logs`)",
    "thread_binding": (
        "more ranks than NUMA nodes on a CPU host: set SGLANG_CPU_OMP_THREADS_BIND (one CPU group per "
        "rank, `|`-separated), or leave it out of the profile's env and sglops derives it from the host"
    ),
    "nccl_on_cpu": (
        "the CUDA torch build's NCCL was loaded with no GPU: leave SGLANG_NCCL_SO_PATH out of the "
        "profile's env (sglops points it at nothing on such a host) and the ranks use gloo"
    ),
    "dist_init_timeout": (
        "a node did not join node 0's dist-init in time: start every node together (`inv restart "
        "PROFILE --hosts n0,n1,...`), check dist_init_addr is reachable from every node"
    ),
    "peer_lost": (
        "another rank or node died and took this one down: read that node's log (`inv logs --hosts ...`)"
    ),
    "aborted": (
        "sglops stopped this node because another node of the server failed: that node's line says why"
    ),
    "died": "the server exited during start-up: read the log above",
}
# Rendered arguments /server_info reports under another name (0.5.23 renamed nsa_* to dsa_*).
INFO_ALIASES = {
    "dsa_prefill_backend": "nsa_prefill_backend",
    "dsa_decode_backend": "nsa_decode_backend",
    "nsa_prefill_backend": "dsa_prefill_backend",
    "nsa_decode_backend": "dsa_decode_backend",
}


class LaunchFailed(Failed):
    """The server did not come up (crash, timeout): `kept` is the failed start, which the runner records and
    shows (its log tail) before the one line; `recorded(path)` is that line naming the record."""

    def __init__(self, kept: RestartResult, notes: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(kept.failure_line(*notes))
        self.kept, self.notes = kept, list(notes)

    def recorded(self, path: object) -> LaunchFailed:
        return LaunchFailed(self.kept, [f"record {path}", *self.notes])


# -- results --------------------------------------------------------------------------------
@dataclass
class RestartResult(Result):
    """One restart (or its dry run): what was stopped, started, and how it ended."""

    host: str
    profile: str | None
    ok: bool
    # healthy | died | timeout | dry-run
    state: str
    port: int
    dry_run: bool = False
    rollback: bool = False
    # the release of the engine that serves (named so before engines)
    sglang_version: str | None = None
    # sglang | vllm (None: a rollback, the last good script's)
    engine: str | None = None
    pid: int | None = None
    stopped_pid: int | None = None
    stop_signal: str | None = None
    waited_s: float | None = None
    failure: str | None = None
    failure_label: str | None = None
    # the log line that shows the failure (e.g. the exception it ended in)
    failure_detail: str | None = None
    hint: str | None = None
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    server_info: dict | None = None
    server_info_endpoint: str | None = None
    # processes stopped, any left, how long it took
    stop: dict = field(default_factory=dict)
    confirmed: dict[str, Any] = field(default_factory=dict)
    mismatches: dict[str, dict] = field(default_factory=dict)
    # rendered, but the server does not report it
    unconfirmed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    script: str = ""
    # exec: sglops starts the server process | entrypoint: the container's command is the server
    shape: str = "exec"
    # a node of a server over several hosts (nnodes > 1)
    node_rank: int | None = None
    # every node's outcome, when this host was one of them
    deployment: list[dict] = field(default_factory=list)
    # variables the script exports for this host, and why
    derived_env: list[dict] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """A server was stopped or started (even one that then died)."""
        return not self.dry_run and bool(self.stopped_pid or self.pid)

    def payload(self) -> dict:
        return asdict(self)

    def failure_line(self, *notes: str) -> str:
        """The one line a failed start ends in: what broke, after how long, what to try, where the log is."""
        where = "; ".join([f"log {self.log_path}", *notes])
        detail = f": {self.failure_detail}" if self.failure_detail else ""
        return (
            f"{self.host}: server did not come up: {self.failure_label} ({self.failure}){detail} "
            f"after {self.waited_s or 0:.1f}s; {self.hint} ({where})"
        )


@dataclass
class ServerStatus(Observation):
    """The server sglops started on a host, as it is now."""

    host: str
    running: bool
    pid: int | None
    profile: str | None
    port: int | None
    health: int | None
    server_info: dict | None
    restarts: list[dict]
    log_path: str
    log_tail: list[str]
    # restart shape (b): the engine's view of the container whose command it is
    container: dict | None = None
    # the server last started here came up and is gone: its log's crash class
    died: dict | None = None
    # launcher, schedulers (with their ranks), detokenizer
    processes: list[dict] = field(default_factory=list)
    nnodes: int = 1
    node_rank: int | None = None
    # every node's state, when several nodes were asked
    deployment: list[dict] = field(default_factory=list)

    @property
    def deployment_healthy(self) -> bool | None:
        """Every node of the server alive and answering (None: not a server over several nodes)."""
        if not self.deployment:
            return None
        return all(n.get("running") and n.get("health") == 200 for n in self.deployment)

    def payload(self) -> dict:
        return {**asdict(self), "deployment_healthy": self.deployment_healthy}


@dataclass
class LogLines(Observation):
    host: str
    path: str
    lines: list[str]

    def payload(self) -> dict:
        return asdict(self)


# -- the steps --------------------------------------------------------------------------------


@dataclass
class StopResult(Result):
    """`inv stop`: what was (or would be) stopped."""

    host: str
    stopped: bool
    dry_run: bool = False
    pid: int | None = None
    signal: str | None = None
    detail: dict = field(default_factory=dict)
    plan: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.stopped and not self.dry_run

    def payload(self) -> dict:
        return asdict(self)


def confirm(result: RestartResult, expected: dict, info: dict) -> None:
    """Check every rendered argument against the server's effective arguments (/server_info)."""
    for key, asked in expected.items():
        name = key if key in info or key not in INFO_ALIASES else INFO_ALIASES[key]
        if name not in info:
            result.unconfirmed.append(key)
        elif same_value(asked, info[name]):
            result.confirmed[key] = info[name]
        else:
            result.mismatches[key] = {"asked": asked, "effective": info[name]}


def same_value(asked: Any, got: Any) -> bool:
    """Does the server's value say what the script asked for? (text from argv vs the JSON the server keeps)"""
    if isinstance(asked, list) or isinstance(got, list):
        a = asked if isinstance(asked, list) else [asked]
        g = got if isinstance(got, list) else [got]
        return len(a) == len(g) and all(same_value(x, y) for x, y in zip(a, g, strict=True))
    if isinstance(got, bool) or asked is True:
        return str(asked).lower() in ("true", "1") if got is True else str(asked).lower() in ("false", "0")
    if got is None:
        return str(asked).lower() in ("none", "null", "")
    if str(asked) == str(got):
        return True
    a, g = _num(asked), _num(got)
    return a is not None and g is not None and a == g


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
