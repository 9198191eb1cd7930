# Server state on the host, shared by the server_* scripts (standard library only).
# State lives in the tree's sglops state folder (sglops_dir: <checkout>/.sglops, or a per-user folder for a
# pip-installed tree): server.pid, server.json, launch.sh, launch.last-good.sh, server.log, restarts.jsonl.
# A process is ours only if its pid AND its start time match server.json.
# The folder is 0700 (sglops_dir), scripts 0700, everything else 0600: scripts carry env secrets.
import json
import os
import re
import signal
import time

from . import _fetch
from ._common import PRIVATE_FILE, open_private, sglops_dir
from ._server_engine import logged_info
from ._server_info import kept_fields

# (class, label, pattern): the first class whose pattern matches anywhere in the log since the restart marker
# wins, most specific first. Patterns follow what SGLang
# really prints (tests/data/server_logs/ keeps real logs).
FAILURE_CLASSES = [
    ("static_assert", "static_assert (a kernel failed to compile)", r"static_assert|static assertion failed"),
    ("cuda_oom", "CUDA out of memory", r"CUDA out of memory|OutOfMemoryError"),
    (
        "port_in_use",
        "port in use",
        (
            r"address already in use|Errno 98\b|\bport \S* ?is already in use|at \d+ is not available in \d+"
            r" seconds"
        ),
    ),
    ("unknown_backend", "unknown backend", r"error: argument --[\w-]*backend: invalid choice"),
    (
        "bad_argument",
        "invalid launch argument",
        r"error: argument --[\w-]+: invalid|error: unrecognized arguments|error: argument --[\w-]+: expected",
    ),
    (
        "model_missing",
        "model not found",
        r"Repo id must be in the form|is not a local folder and is not a valid model identifier|"
        r"does not appear to have a file named config\.json|No such file or directory: \S*config\.json",
    ),
    # a valid choice this host cannot run: a missing package
    # or CPU/GPU feature, or a backend that fails to build
    (
        "unsupported",
        "unsupported on this host",
        r"\bis not installed\b|requires Intel AMX|not supported on (?:this|CPU|cpu)|backend \S+ is not"
        r" supported|"
        r"not supported for this model|Invalid attention backend|NotImplementedError: .*backend|"
        r", in create_\w+_backend$",
    ),
    ("import_error", "import failed", r"^(?:ModuleNotFoundError|ImportError): "),
    # multi-rank and multi-node starts (tests/data/server_logs/, docs/launch.md "Multi-rank")
    ("thread_binding", "CPU thread binding missing for the ranks", r"SGLANG_CPU_OMP_THREADS_BIND is not set"),
    ("nccl_on_cpu", "NCCL library loaded on a host without a GPU", r"Expected a cuda device, but got: cpu"),
    (
        "dist_init_timeout",
        "not every node joined the distributed init in time",
        r"DistStoreError: Timed out after \d+ seconds waiting for clients|clients joined|"
        r"DistNetworkError: .*(?:timed out|Connection refused)",
    ),
    (
        "peer_lost",
        "another rank or node went away",
        r"gloo/transport/tcp/pair\.cc.*(?:Connection reset by peer|Connection closed by peer)|"
        r"Connection closed by peer \[|NCCL (?:communicator was aborted|watchdog)",
    ),
    ("python_traceback", "Python traceback", r"Traceback \(most recent call last\)"),
]
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?$")
KILL_WAIT_S = 20.0
# bytes of log read for classifying one start (a crash writes a few KB)
SINCE_CAP = 16 * 1024 * 1024


def state_paths(root, create=True):
    d = sglops_dir(root, create)
    names = [
        "server.pid",
        "server.json",
        "launch.sh",
        "launch.last-good.sh",
        "launch.last-good.json",
        "server.log",
        "restarts.jsonl",
        "server.lock",
        "server.abort",
    ]
    return {n: os.path.join(d, n) for n in names}


def write_atomic(path, text, mode=PRIVATE_FILE):
    """Replace path with text in one rename; owner-only (launch scripts hold env secrets: PRIVATE_SCRIPT)."""
    tmp = path + ".sglops-tmp"
    with open_private(tmp, "w", mode) as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_json_file(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def start_ticks(pid):
    """The process's start time in clock ticks (field 22 of /proc/PID/stat): tells a reused pid apart."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def group_alive(pgid):
    # reap our own children in that group first (a zombie still "exists" for killpg)
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _live_member_in(pgid)


def _live_member_in(pgid):
    """Whether a process of the group has not exited: an exited process waiting for whoever reaps it (on a
    container's or sandbox's init that can take seconds) holds no GPU memory, port or file, so a stop that
    counted it alive would wait for the reap. "Exited" is every thread, not the leader alone: a leader shows Z
    while its other threads still run or still hold the process's files (a listening port; seen: the next
    start found the port taken). Without /proc (not Linux) the group counts as alive."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        fields = _stat_fields(f"/proc/{name}/stat")
        if fields is None or len(fields) < 3 or fields[2] != str(pgid):
            continue
        if not _has_exited(fields, name):
            return True
    return False


def _stat_fields(path):
    """The fields of a /proc stat file after the command name (state first), or None if it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _has_exited(fields, pid):
    """Whether the process whose stat fields these are has exited: a zombie whose threads have all gone."""
    return fields[0] == "Z" and _all_threads_exited(pid)


def _all_threads_exited(pid):
    """A zombie leader's threads: gone, or zombies themselves (a thread still exiting may hold the files)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tasks:
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        if fields is not None and fields[0] not in ("Z", "X"):
            return False
    return len(tasks) <= 1


def our_server(paths):
    """server.json if the process it names is alive and is the one we started, else None."""
    info = read_json_file(paths["server.json"])
    if not info or not info.get("pid"):
        return None
    ticks = start_ticks(info["pid"])
    if ticks is None or ticks != info.get("start_ticks"):
        return None
    fields = _stat_fields(f"/proc/{info['pid']}/stat")
    if fields is None or _has_exited(fields, info["pid"]):
        return None
    return info


def _children_map():
    """{ppid: [pid, ...]} for every process this user can see (one pass over /proc)."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        ppid = _ppid(name)
        if ppid is not None:
            kids.setdefault(ppid, []).append(int(name))
    return kids


def process_tree(pid):
    """[(pid, start ticks)] of pid and all its descendants (launcher, sglang::scheduler, detokenizer, ...)."""
    kids, out, todo = _children_map(), [], [pid]
    while todo:
        p = todo.pop()
        ticks = start_ticks(p)
        if ticks is not None:
            out.append((p, ticks))
            todo += kids.get(p, [])
    return out


def alive_of(tree):
    """The processes of a process_tree() snapshot that still
    run (same pid AND start time; exited ones are gone)."""
    left = []
    for pid, ticks in tree:
        if start_ticks(pid) != ticks:
            continue
        fields = _stat_fields(f"/proc/{pid}/stat")
        if fields is None or _has_exited(fields, pid):
            continue
        left.append(pid)
    return left


def _wait_gone(pgid, tree, deadline):
    while (group_alive(pgid) or alive_of(tree)) and time.monotonic() < deadline:
        time.sleep(0.05)


# exported to the server: every process of it inherits the mark
SERVER_ID_VAR = "SGLOPS_SERVER_ID"


# Process titles and launch commands of servers when server.json names none (a server an older sglops started,
# a container's own command): the engine specs' (sglops.engine) process_titles and launch modules.
DEFAULT_TITLES = ("sglang::",)
LAUNCH_MARKS = ("sglang.launch_server", "sglang-standin", "vllm.entrypoints.openai.api_server")


def marked_processes(server_id, titles=DEFAULT_TITLES, marks=()):
    """Processes of this user whose environment carries this server's mark AND whose command line is a
    server's (the launcher or a titled worker, e.g. `sglang::scheduler`): found even when one left the process
    group and its parent died."""
    if not server_id:
        return []
    mark = f"{SERVER_ID_VAR}={server_id}".encode()
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if mark not in fh.read().split(b"\0"):
                    continue
        except OSError:
            continue
        argv = process_cmdline(name)
        fields = _stat_fields(f"/proc/{name}/stat")
        if fields is None or _has_exited(fields, name):
            continue
        if argv and (argv[0].startswith(tuple(titles)) or is_server_argv(argv, marks)):
            found.append(int(name))
    return found


def process_role(argv, titles=DEFAULT_TITLES, marks=()):
    """(role, rank words) of a server process from its command line: `sglang::scheduler_DP0_TP1` is
    ("scheduler", {"dp": 0, "tp": 1}), `sglang::detokenizer` ("detokenizer", {}), `VLLM::Worker_TP1`
    ("Worker", {"tp": 1}), the launch command "launcher"."""
    first = argv[0] if argv else ""
    prefix = next((t for t in titles if first.startswith(t)), None)
    if prefix is not None and first[len(prefix) :].strip():
        name, *parts = first[len(prefix) :].split()[0].split("_")
        ranks = {}
        for part in parts:
            m = re.fullmatch(r"([A-Z]+(?:_[A-Z]+)?)(\d+)", part)
            if m:
                ranks[m.group(1).lower()] = int(m.group(2))
        return name, ranks
    if is_server_argv(argv, marks):
        return "launcher", {}
    return "other", {}


def kill_group(pgid, tree=()):
    """SIGKILL the process group and every process of a process_tree() snapshot still running (one may have
    left the group), then wait until all have exited: a KILLed process with a few GB mapped can take seconds
    to go on a loaded host (seen: a scheduler still listed right after a hung start was stopped, and after a
    launcher that died of a failed start), and what comes next (a start on the same port, a check for
    leftovers) must not meet it. Gives up waiting after KILL_WAIT_S."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in alive_of(tree):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _wait_gone(pgid, tree, time.monotonic() + KILL_WAIT_S)


def server_marks(info):
    """(process titles, launch marks) of the server
    server.json describes (its engine's, recorded at start)."""
    return tuple(info.get("titles") or DEFAULT_TITLES), tuple(m for m in [info.get("launch_module")] if m)


def stop_server(paths, grace_s=20.0):
    """TERM the server's process group, wait, then KILL; then KILL any descendant that left the group.
    Never matches processes by name: the group and the tree come from the pid we started."""
    info = our_server(paths)
    if info is None:
        for name in ("server.pid", "server.json"):
            if os.path.exists(paths[name]):
                os.unlink(paths[name])
        return {"stopped": False, "pid": None, "signal": None, "processes": 0, "left": [], "took_s": 0.0}
    t0 = time.monotonic()
    pgid = info.get("pgid") or info["pid"]
    tree = process_tree(info["pid"])
    seen = {p for p, _ in tree}
    titles, marks = server_marks(info)
    tree += [
        (p, start_ticks(p)) for p in marked_processes(info.get("server_id"), titles, marks) if p not in seen
    ]
    os.killpg(pgid, signal.SIGTERM)
    for pid in [p for p, _ in tree if p not in seen]:
        # a worker outside the group (it left it): TERM it too, it has the same grace
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    sent = "TERM"
    _wait_gone(pgid, tree, time.monotonic() + grace_s)
    stray = alive_of(tree)
    if group_alive(pgid) or stray:
        sent = "KILL"
        kill_group(pgid, tree)
    for name in ("server.pid", "server.json"):
        if os.path.exists(paths[name]):
            os.unlink(paths[name])
    left = sorted(set(alive_of(tree)) | set(marked_processes(info.get("server_id"), titles, marks)))
    return {
        "stopped": True,
        "pid": info["pid"],
        "signal": sent,
        "processes": len(tree),
        "left": left,
        "took_s": round(time.monotonic() - t0, 3),
        "outside_group": len(tree) - len(seen),
    }


def tail(path, lines=40):
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode(errors="replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def read_since(path, offset, cap=SINCE_CAP):
    """The log's lines written since byte `offset` (this start's marker): the whole start, not a tail."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = offset if 0 <= offset <= size else 0
            fh.seek(max(start, size - cap))
            return fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def classify(log_lines, extra=()):
    """(class, label, evidence): the failure the log shows and the one line that shows it; Nones if none.
    extra: the engine's own (class, label, pattern) crash texts, tried before the common ones."""
    for cls, label, pattern in [*extra, *FAILURE_CLASSES]:
        rx = re.compile(pattern, re.I | re.M)
        # the last: what it ended in
        hit = next((ln for ln in reversed(log_lines) if rx.search(ln)), None)
        if hit is None:
            continue
        evidence = hit.strip()
        if cls == "python_traceback" or (cls == "unsupported" and not _EXCEPTION_LINE.match(evidence)):
            raised = [ln.strip() for ln in log_lines if _EXCEPTION_LINE.match(ln.strip())]
            # the exception it ended in, not a frame
            evidence = raised[-1] if raised else evidence
        return cls, label, _shorten(evidence)
    return None, None, None


def _shorten(line, width=300):
    line = re.sub(r"\s+", " ", line)
    return line if len(line) <= width else line[: width - 3] + "..."


def server_info(host, port, timeout=5.0, spec=None, log_lines=None):
    """(effective server arguments, the endpoint that gave them): the engine's info endpoints in order
    (/server_info, or /get_server_info on releases before it existed: 404); an engine with none says its
    arguments in its start-up log (spec["args_log"]) and its version at spec["version_path"]. (None, None)
    when nothing answers with JSON."""
    if spec is not None and not spec.get("info_paths"):

        def fetch(path):
            status, body = http_get(local_url(host, port, path), timeout=timeout, limit=_fetch.INFO_MAX)
            try:
                return json.loads(body) if status == 200 else None
            except (ValueError, RecursionError):
                return None

        info = logged_info(spec, fetch, log_lines or [])
        where = "the start-up log's arguments line" + (
            " and " + spec["version_path"] if spec.get("version_path") else ""
        )
        return (kept_fields(info), where) if info else (None, None)
    for path in (spec or {}).get("info_paths") or ("/server_info", "/get_server_info"):
        status, body = http_get(local_url(host, port, path), timeout=timeout, limit=_fetch.INFO_MAX)
        if status == 200:
            try:
                return kept_fields(json.loads(body)), path
            except (ValueError, RecursionError):
                return None, None
        if status != 404:
            break
    return None, None


def local_url(host, port, path):
    host = "127.0.0.1" if host in (None, "", "0.0.0.0", "::") else host
    if ":" in host:
        host = "[" + host + "]"
    return f"http://{host}:{int(port)}{path}"


def http_get(url, timeout=2.0, limit=_fetch.ANSWER_MAX, headers=None):
    """(status, body text) from a GET on the host's own server, the whole answer within `timeout` seconds and
    `limit` bytes; (None, error) when nothing answers in time (a server that trickles its answer a byte at
    a time, or sends one without end, is no answer)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        status, body = _fetch.get(
            parts.port, parts.path or "/", timeout=timeout, limit=limit, host=parts.hostname, headers=headers
        )
    except Exception as exc:  # noqa: BLE001 (refused, cut, late, too large, malformed: no answer, and why)
        return None, str(exc) or type(exc).__name__
    return status, body.decode(errors="replace")


def append_record(paths, record):
    with open_private(paths["restarts.jsonl"], "a") as fh:
        fh.write(json.dumps(record) + "\n")


_INITS = ("docker-init", "tini", "dumb-init", "catatonit")


def process_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def is_server_argv(argv, marks=()):
    """Does this command line start an LLM server (an engine's launch module, `vllm serve`, the sandbox
    stand-in; marks: more launch commands, e.g. the recorded server's)?"""
    text = " ".join(argv)
    return (
        any(m in text for m in (*LAUNCH_MARKS, *marks))
        or any(os.path.basename(a) == "vllm" for a in argv[:3])
        and "serve" in argv
    )


def flag_value(argv, flag, default=None):
    """`--flag V` or `--flag=V` from a command line."""
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return default


def entrypoint_server():
    """The server that is this container's own command (PID 1, or the child of an init such as docker-init):
    restart shape (b), where the engine, not sglops, starts it. None when PID 1 is no server (a host, or a
    long-running container sglops starts servers in)."""
    first = process_cmdline(1)
    pid = 1
    if first and os.path.basename(first[0]) in _INITS:
        kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == 1]
        pid = min(kids) if kids else 1
        first = process_cmdline(pid)
    if not first or not is_server_argv(first):
        return None
    return {
        "pid": pid,
        "argv": first[:60],
        "port": int(flag_value(first, "--port", 30000)),
        "host": flag_value(first, "--host", "127.0.0.1"),
    }


def _ppid(pid):
    fields = _stat_fields(f"/proc/{pid}/stat")
    try:
        return int(fields[1]) if fields else None
    except (ValueError, IndexError):
        return None
