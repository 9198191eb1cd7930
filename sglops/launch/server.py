"""Launch the server from a profile, restart it safely, and explain why it did not come up.

Why a restart is one host-side step: stopping (pid file + process group, never a name match),
installing the script, starting detached and polling /health all happen on the host in one
round trip (host/server_restart.py), so it works the same for a far-away host and
a failed start-up is caught within a poll interval, with the log's failure class named.

Public API for other modules: `render_for(remote, profile)`, `restart(remote, profile)`,
`status(remote)`, `server_info(remote, port=None)`, `logs(remote)`.
"""

from __future__ import annotations

import getpass
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from sglops.core import artifacts
from sglops.core.console import console, err_console
from sglops.core.errors import RemoteError, SglopsError
from sglops.core.remote import Remote
from sglops.core.result import Observation, Result
from sglops.launch import container as launch_container
from sglops.launch.profiles import Profile, list_profiles, load_profile
from sglops.launch.render import Rendered, TreeArgs, render

HINTS = {
    "static_assert": "a kernel was compiled for a dtype it does not support (FlashInfer FA2 MLA + FP8 KV): "
                     "try the gather-cast patch or --attention-backend trtllm_mla",
    "cuda_oom": "lower mem_fraction_static or cuda_graph.max_bs, or use more GPUs",
    "port_in_use": "another process holds the port: `inv server-status`, or pick another port in the profile",
    "unknown_backend": "this release does not know that backend: `inv render PROFILE --host H` lists the valid ones",
    "bad_argument": "this release refused a launch argument: check the profile's values and extra_args",
    "model_missing": "model_path is neither a folder on the host nor a hub id: check the path (or the host's vars)",
    "unsupported": "a valid choice this host cannot run (a package or CPU/GPU feature is missing): pick another "
                   "backend or KV dtype",
    "import_error": "SGLang failed while importing: a missing or broken package in the server's Python",
    "python_traceback": "the server raised during start-up: read the traceback above",
    "timeout": "no /health in time: raise startup_timeout, or read the log (`inv logs`)",
    "died": "the server exited during start-up: read the log above",
}
# Rendered arguments /server_info reports under another name (0.5.23 renamed nsa_* to dsa_*).
INFO_ALIASES = {"dsa_prefill_backend": "nsa_prefill_backend", "dsa_decode_backend": "nsa_decode_backend",
                "nsa_prefill_backend": "dsa_prefill_backend", "nsa_decode_backend": "dsa_decode_backend"}


class LaunchFailed(SglopsError):
    """The server did not come up (crash, timeout): the log tail was shown above."""

    exit_code = 1


# -- results --------------------------------------------------------------------------------
@dataclass
class RestartResult(Result):
    """One restart (or its dry run): what was stopped, started, and how it ended."""

    host: str
    profile: str | None
    ok: bool
    state: str  # healthy | died | timeout | dry-run
    port: int
    dry_run: bool = False
    rollback: bool = False
    sglang_version: str | None = None
    pid: int | None = None
    stopped_pid: int | None = None
    stop_signal: str | None = None
    waited_s: float | None = None
    failure: str | None = None
    failure_label: str | None = None
    failure_detail: str | None = None  # the log line that shows the failure (e.g. the exception it ended in)
    hint: str | None = None
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    server_info: dict | None = None
    server_info_endpoint: str | None = None
    stop: dict = field(default_factory=dict)  # processes stopped, any left, how long it took
    confirmed: dict[str, Any] = field(default_factory=dict)
    mismatches: dict[str, dict] = field(default_factory=dict)
    unconfirmed: list[str] = field(default_factory=list)  # rendered, but the server does not report it
    warnings: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    script: str = ""
    shape: str = "exec"  # exec: sglops starts the server process | entrypoint: the container's command is the server

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
        return (f"{self.host}: server did not come up: {self.failure_label} ({self.failure}){detail} "
                f"after {self.waited_s or 0:.1f}s; {self.hint} ({where})")

    def table(self):
        t = Table(title=f"restart {self.profile or '(rollback)'} on {self.host}", show_header=False)
        t.add_column(style="bold")
        t.add_column()
        color = "green" if self.ok else ("yellow" if self.dry_run else "red")
        t.add_row("state", Text(self.state + (f" after {self.waited_s:.1f}s" if self.waited_s is not None else ""),
                                style=color))
        t.add_row("sglang", str(self.sglang_version or "?"))
        t.add_row("port", str(self.port))
        if self.stopped_pid:
            n, took = self.stop.get("processes"), self.stop.get("took_s")
            t.add_row("stopped", f"pid {self.stopped_pid} ({self.stop_signal}"
                      + (f", {n} processes in {took:.1f}s" if n and took is not None else "") + ")")
        if self.pid:
            t.add_row("pid", str(self.pid))
        for k, v in self.confirmed.items():
            t.add_row(f"  {k}", Text(str(v), style="green"))
        for k, v in self.mismatches.items():
            t.add_row(f"  {k}", Text(f"asked {v['asked']!r}, server runs {v['effective']!r}", style="yellow"))
        if self.unconfirmed:
            t.add_row("  not reported", Text(", ".join(self.unconfirmed), style="yellow"))
        if self.failure:
            t.add_row("failure", Text(f"{self.failure_label} [{self.failure}]", style="bold red"))
            if self.failure_detail:
                t.add_row("cause", Text(self.failure_detail, style="red"))
            t.add_row("hint", self.hint or "")
        for w in self.warnings:
            t.add_row("warning", Text(w, style="yellow"))
        for step in self.plan:
            t.add_row("would", step)
        parts: list[Any] = [t]
        if self.log_tail and not self.ok:
            parts.append(Text(f"last lines of {self.log_path}:", style="bold"))
            parts.append(Text("\n".join(self.log_tail), style="dim"))
        if self.dry_run:
            parts.append(Text(self.script, no_wrap=True, overflow="ignore"))
        return Group(*parts)


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
    container: dict | None = None  # restart shape (b): the engine's view of the container whose command it is

    def payload(self) -> dict:
        return asdict(self)

    def table(self):
        t = Table(title=f"server on {self.host}", show_header=False)
        t.add_column(style="bold")
        t.add_column()
        t.add_row("process", Text(f"running, pid {self.pid}" if self.running else "not running",
                                  style="green" if self.running else "red"))
        if self.container:
            c = self.container
            t.add_row("container", f"{c['status']} (the server is its command; exit code {c['exit_code']}, "
                                   f"restarts {c['restart_count']}, policy {c['restart_policy']})")
        t.add_row("profile", str(self.profile or "-"))
        t.add_row("port", str(self.port or "-"))
        t.add_row("/health", Text(str(self.health or "no answer"), style="green" if self.health == 200 else "red"))
        info = self.server_info or {}
        for k in ("version", "model_path", "tp_size", "attention_backend", "kv_cache_dtype", "last_gen_throughput"):
            if k in info:
                t.add_row(f"  {k}", str(info[k]))
        if info.get("standin"):
            t.add_row("  note", "sglops stand-in server (sandbox)")
        for r in self.restarts[-3:]:
            t.add_row("restart", f"{r.get('at')} {r.get('profile') or '(rollback)'}: {r.get('state')}"
                      + (f" [{r['failure']}]" if r.get("failure") else ""))
        t.add_row("log", self.log_path)
        return t


@dataclass
class LogLines(Observation):
    host: str
    path: str
    lines: list[str]

    def payload(self) -> dict:
        return asdict(self)

    def table(self):
        return Text("\n".join(self.lines) or f"(empty: {self.path})")


# -- the steps --------------------------------------------------------------------------------
def _profile(profile: str | Profile) -> Profile:
    return profile if isinstance(profile, Profile) else load_profile(profile)


def _with_port(p: Profile, port: int | None) -> Profile:
    """The profile with --port applied (after its per-host overrides, so the flag wins)."""
    if port is None:
        return p
    return Profile(**{**p.__dict__, "args": {**p.args, "port": int(port)}, "per_host": {}})


def inspect(remote: Remote) -> dict:
    """The host's tree (version, launch flags, backend choices) and its sglops server, one round trip."""
    return remote.run_py("server_inspect", {"sglang_root": remote.host.sglang_root}, timeout=60)


def render_for(remote: Remote | None, profile: str | Profile, *, port: int | None = None) -> Rendered:
    """The profile's script for this host, validated against its tree (offline when remote is None)."""
    p = _with_port(_profile(profile).for_host(remote.name if remote else None), port)
    if remote is None:
        return render(p)
    tree = TreeArgs.from_inspect(inspect(remote)) if p.engine == "sglang" else None
    return render(p, remote.host, tree)


def restart(
    remote: Remote,
    profile: str | Profile | None = None,
    *,
    rollback: bool = False,
    dry_run: bool = False,
    timeout: float | None = None,
    port: int | None = None,
    on_progress: Callable[[dict], None] | None = None,
) -> RestartResult:
    """Stop the running server, start the profile's (or the last good) script, wait for /health."""
    if not rollback and profile is not None:
        chosen = _with_port(_profile(profile).for_host(remote.name), port)
        if chosen.container_restart == "entrypoint":  # shape (b): the engine restarts the container's command
            return launch_container.restart(remote, chosen, dry_run=dry_run, timeout=timeout, on_progress=on_progress)
    doc = inspect(remote)
    tree = TreeArgs.from_inspect(doc)
    _ROOTS[(remote.name, remote.host.sglang_root)] = tree.root
    current = doc["current"]
    rendered = None
    if rollback:
        good = current.get("last_good")
        if not good and current.get("entrypoint") and remote.container:
            raise launch_container.rollback_refusal(remote)
        if not good:
            raise SglopsError(f"{remote.name}: nothing to roll back to (no server came up healthy through sglops)")
        if profile is not None and good.get("profile") != _profile(profile).name:
            raise SglopsError(f"{remote.name}: the last script that came up healthy is profile "
                              f"{good.get('profile')!r}, not {_profile(profile).name!r} (`inv rollback` takes it anyway)")
        prof_name, bind, use_port = good.get("profile"), good.get("host") or "127.0.0.1", int(good["port"])
        grace, wait = float(good.get("grace_s") or 20), float(timeout or good.get("timeout_s") or 600)
    else:
        if profile is None:
            raise SglopsError("give a profile to restart (or --rollback)")
        p = _with_port(_profile(profile).for_host(remote.name), port)
        rendered = render(p, remote.host, tree if p.engine == "sglang" else None)
        prof_name, bind, use_port = p.name, rendered.bind, rendered.port
        grace, wait = p.stop_grace, float(timeout or p.startup_timeout)
    result = RestartResult(host=remote.name, profile=prof_name, ok=False, state="dry-run", port=use_port,
                           rollback=rollback, sglang_version=tree.version,
                           warnings=list(rendered.warnings) if rendered else [],
                           argv=rendered.argv if rendered else [], script=rendered.script if rendered else "")
    if dry_run:
        srv = current.get("server")
        result.dry_run = True
        result.plan = [
            f"stop pid {srv['pid']} (profile {srv.get('profile')}, port {srv.get('port')}): TERM its process group, "
            f"KILL after {grace:g}s" if srv else "stop nothing (no sglops server running)",
            f"install {current['state_dir']}/launch.sh " + ("from launch.last-good.sh" if rollback else "(below)"),
            f"start it detached, log {current['state_dir']}/server.log",
            f"wait up to {wait:g}s for http://{bind}:{use_port}/health, then check every rendered argument "
            "against /server_info",
        ]
        return result
    answer = remote.run_py("server_restart", {
        "root": tree.root, "script": result.script, "rollback": rollback, "profile": prof_name,
        "host": bind, "port": use_port, "timeout_s": wait, "grace_s": grace, "operator": getpass.getuser(),
    }, timeout=wait + 2 * grace + 60, on_progress=on_progress)
    result.state = answer["state"]
    result.pid = answer["pid"]
    result.stopped_pid = answer["stopped"]["pid"]
    result.stop_signal = answer["stopped"]["signal"]
    result.stop = {k: answer["stopped"].get(k) for k in ("processes", "left", "took_s")}
    result.waited_s = answer["waited_s"]
    result.log_path = answer["log_path"]
    result.log_tail = answer["log_tail"]
    result.server_info = answer["server_info"]
    result.server_info_endpoint = answer.get("server_info_endpoint")
    result.ok = answer["state"] == "healthy"
    if not result.ok:
        result.failure, result.failure_label = answer["failure"], answer["failure_label"]
        result.failure_detail = answer.get("failure_detail")
        result.hint = HINTS.get(answer["failure"])
    if result.server_info and rendered:
        _confirm(result, rendered.expected, result.server_info)
    return result


def stop(remote: Remote, *, grace_s: float = 20) -> dict:
    """Stop the server sglops started (pid file + process group); {stopped, pid, signal}. In a container whose
    command is the server (restart shape (b)) that is `ENGINE stop` of the container, on the host."""
    try:
        answer = remote.run_py("server_restart", {"root": _root(remote), "stop_only": True, "grace_s": grace_s,
                                                  "operator": getpass.getuser()}, timeout=grace_s + 30)
    except RemoteError as exc:
        if not (remote.container and launch_container.NOT_RUNNING in str(exc)):
            raise
        return {"stopped": False, "pid": None, "signal": None, "note": f"container {remote.container.name} is not running"}
    if not answer["stopped"] and answer.get("entrypoint") and remote.container:
        done = launch_container.stop(remote, grace_s=grace_s)
        return {"stopped": done["stopped"], "pid": answer["entrypoint"]["pid"], "signal": f"{remote.container.engine} stop",
                "container": done["container"]}
    return answer


def _confirm(result: RestartResult, expected: dict, info: dict) -> None:
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


def status(remote: Remote, *, port: int | None = None, tail: int = 20) -> ServerStatus:
    """Is our server running, healthy, and with which arguments (one round trip; a second, on the host, for a
    container whose command is the server: its state and log are the engine's)."""
    doc = _state_or_entrypoint(remote, port=port, tail=tail)
    if "container" in doc:
        return _entrypoint_status(remote, doc)
    srv = doc["server"] or {}
    return ServerStatus(host=remote.name, running=doc["running"], pid=srv.get("pid"), profile=srv.get("profile"),
                        port=port or srv.get("port"), health=doc["health"], server_info=doc["server_info"],
                        restarts=doc["restarts"], log_path=doc["log_path"], log_tail=doc["log_tail"])


def _state_or_entrypoint(remote: Remote, *, port: int | None = None, tail: int = 20, follow_s: float = 0,
                         on_progress: Callable[[dict], None] | None = None) -> dict:
    """inspect_state inside the target; for a container that is stopped, or whose own command is the server,
    the host-side view (container_server.py status) instead."""
    try:
        doc = inspect_state(remote, port=port, tail=tail, follow_s=follow_s, on_progress=on_progress)
    except RemoteError as exc:
        if not (remote.container and launch_container.NOT_RUNNING in str(exc)):
            raise
        doc = None
    if remote.container and (doc is None or (not doc["running"] and doc.get("entrypoint"))):
        out = launch_container.status(remote, port=port, tail=tail, follow_s=follow_s, on_progress=on_progress)
        return {**out, "entrypoint": (doc or {}).get("entrypoint")}
    return doc


def _entrypoint_status(remote: Remote, doc: dict) -> ServerStatus:
    ctr, entry = doc["container"], doc.get("entrypoint") or {}
    last = next((r for r in reversed(doc["restarts"]) if r.get("profile")), {})
    return ServerStatus(host=remote.name, running=bool(ctr["running"] and entry), pid=entry.get("pid"),
                        profile=last.get("profile"), port=doc["port"], health=doc["health"],
                        server_info=doc["server_info"], restarts=doc["restarts"], log_path=doc["log_path"],
                        log_tail=doc["log_tail"], container=ctr)


def inspect_state(remote: Remote, *, port: int | None = None, tail: int = 20, follow_s: float = 0,
                  on_progress: Callable[[dict], None] | None = None) -> dict:
    root = _root(remote)
    return remote.run_py("server_status", {"root": root, "port": port, "tail": tail, "follow_s": follow_s},
                         timeout=max(60, follow_s + 30), on_progress=on_progress)


_ROOTS: dict[tuple[str, str | None], str] = {}


def _root(remote: Remote) -> str:
    key = (remote.name, remote.host.sglang_root)
    if key not in _ROOTS:
        _ROOTS[key] = inspect(remote)["sglang"]["root"]
    return _ROOTS[key]


def server_info(remote: Remote, port: int | None = None) -> dict:
    """Effective server args of the server running on the host (its /server_info, /get_server_info before)."""
    doc = inspect_state(remote, port=port, tail=0)
    if doc["server_info"] is None:
        where = f"port {port or (doc['server'] or {}).get('port') or '?'}"
        raise SglopsError(f"{remote.name}: no server answering /server_info on {where} "
                          f"(health {doc['health'] or 'no answer'}; see `inv server-status`)")
    return doc["server_info"]


def logs(remote: Remote, *, lines: int = 50, follow: bool = False, follow_s: float = 3600,
         on_line: Callable[[str], None] | None = None) -> LogLines:
    """The server log's last lines; with follow, stream new ones to on_line until follow_s passes."""
    if not follow:
        doc = _state_or_entrypoint(remote, tail=lines)
        return LogLines(remote.name, doc["log_path"], doc["log_tail"])
    seen: list[str] = []

    def relay(ev: dict) -> None:
        if "line" in ev:
            seen.append(ev["line"])
            (on_line or (lambda s: console.print(Text(s))))(ev["line"])

    doc = _state_or_entrypoint(remote, tail=lines, follow_s=follow_s, on_progress=relay)
    return LogLines(remote.name, doc["log_path"], seen)


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

    def table(self):
        if self.dry_run:
            return Text("\n".join(f"would {p}" for p in self.plan))
        if not self.stopped:
            return Text(f"{self.host}: no server to stop" + (f" ({self.detail['note']})" if self.detail.get("note") else ""))
        return Text(f"{self.host}: stopped pid {self.pid} ({self.signal})", style="green")


def stop_step(*, dry_run: bool, grace_s: float | None) -> Callable[[Remote], StopResult]:
    """The per-host step for `inv stop`; the dry run reads the server's status and changes nothing."""
    def step(remote: Remote) -> StopResult:
        if dry_run:
            st = status(remote, tail=0)
            if not st.running:
                plan = ["stop nothing (no server running)"]
            elif st.container:
                plan = [f"{remote.container.engine} stop {remote.container.name} (its command is the server, pid "
                        f"{st.pid}), KILL after {grace_s or 20:g}s"]
            else:
                plan = [f"stop pid {st.pid} (profile {st.profile}, port {st.port}): TERM its process group and tree, "
                        f"KILL after {grace_s or 20:g}s"]
            return StopResult(remote.name, False, True, st.pid, plan=plan)
        ans = stop(remote, grace_s=grace_s or 20)
        return StopResult(remote.name, bool(ans.get("stopped")), False, ans.get("pid"), ans.get("signal"),
                          {k: v for k, v in ans.items() if k not in ("stopped", "pid", "signal")})
    return step


# -- task helpers (the CLI's view) ----------------------------------------------------------------
def show_script(rendered: Rendered, json: bool = False) -> None:
    """The launch script alone on stdout, unwrapped, so `inv render P > launch.sh` writes exactly the script;
    what it was checked against and any warnings go to stderr."""
    from sglops.core.console import note, print_json, print_raw

    if json:
        print_json(rendered.to_json())
        return
    note(f"# validated against sglang {rendered.sglang_version} on {rendered.host}" if rendered.validated else
         "# not validated against a host's SGLang tree (pass --host)")
    for w in rendered.warnings:
        err_console.print(Text("warning: " + w, style="yellow"), soft_wrap=True)
    print_raw(rendered.script)


def check_restart_args(profile: str | None, rollback: bool) -> None:
    """Refuse a bad profile before any host is touched."""
    if profile is None and not rollback:
        raise SglopsError("give a profile (`inv restart PROFILE --host H`) or --rollback; profiles: "
                          + ", ".join(list_profiles()))
    if profile is not None and not rollback:
        load_profile(profile)


@contextmanager
def progress_view(enabled: bool = True):
    """A live line per host while restarts wait for /health (stderr, so --json stays clean)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if not enabled:
        yield lambda host: None
        return
    prog = Progress(SpinnerColumn(), TextColumn("{task.fields[host]}", style="bold", markup=False),
                    TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=err_console,
                    transient=True)
    lock = threading.Lock()

    def reporter(host: str) -> Callable[[dict], None]:
        with lock:
            task = prog.add_task("connecting", host=host, total=None)

        def update(ev: dict) -> None:
            text = ev.get("phase", "")
            if "elapsed" in ev:
                text += f" {ev['elapsed']:.0f}/{ev['timeout']:g}s"
            if ev.get("log"):
                text += f"  {ev['log'][-90:]}"
            prog.update(task, description=text)
        return update

    with prog:
        yield reporter


def restart_step(profile: str | None, *, rollback: bool, dry_run: bool, timeout: Any, port: Any,
                 reporter: Callable[[str], Any], json: bool = False) -> Callable[[Remote], RestartResult]:
    """The per-host step for `inv restart`: a failed start shows the log tail, is saved, then exits non-zero."""
    timeout = float(timeout) if timeout else None
    port = int(port) if port else None

    def step(remote: Remote) -> RestartResult:
        res = restart(remote, profile, rollback=rollback, dry_run=dry_run, timeout=timeout, port=port,
                      on_progress=reporter(remote.name))
        if res.ok or res.dry_run:
            return res
        path = artifacts.save(remote.name, artifacts.new_run_id(), "restart.json", res.to_json(), task="restart")
        if not json:
            console.print(res.table())
        notes = [f"record {path}"] + ([] if rollback else ["`inv rollback` brings back the last script that came up healthy"])
        raise LaunchFailed(res.failure_line(*notes))
    return step
