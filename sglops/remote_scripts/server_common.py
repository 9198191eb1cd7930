# Server state on the host, shared by the server_* scripts (standard library only; needs _common).
# State lives in <sglang root>/.sglops/: server.pid, server.json, launch.sh, launch.last-good.sh,
# server.log, restarts.jsonl. A process is ours only if its pid AND its start time match server.json.
# The folder is 0700 (sglops_dir), scripts 0700, everything else 0600: scripts carry env secrets.
import json as _sjson
import os as _sos
import re as _sre
import signal as _ssignal
import time as _stime

FAILURE_CLASSES = [  # (class, label, pattern): first match wins, most specific first
    ("static_assert", "static_assert (a kernel failed to compile)", r"static_assert|static assertion failed"),
    ("cuda_oom", "CUDA out of memory", r"CUDA out of memory|OutOfMemoryError"),
    ("port_in_use", "port in use", r"address already in use|Errno 98\b"),
    ("unsupported_backend", "unsupported backend",
     r"Invalid attention backend|backend \S+ is not supported|not supported for this model|"
     r"NotImplementedError: .*backend|invalid choice: '[^']*'.*backend"),
    ("python_traceback", "Python traceback", r"Traceback \(most recent call last\)"),
]


def state_paths(root, create=True):
    d = sglops_dir(root, create)
    names = ["server.pid", "server.json", "launch.sh", "launch.last-good.sh", "launch.last-good.json", "server.log",
             "restarts.jsonl", "server.lock"]
    return {n: _sos.path.join(d, n) for n in names}


def write_atomic(path, text, mode=PRIVATE_FILE):
    """Replace path with text in one rename; owner-only (launch scripts hold env secrets: PRIVATE_SCRIPT)."""
    tmp = path + ".sglops-tmp"
    with open_private(tmp, "w", mode) as fh:
        fh.write(text)
    _sos.replace(tmp, path)


def read_json_file(path):
    try:
        with open(path) as fh:
            return _sjson.load(fh)
    except (OSError, ValueError):
        return None


def start_ticks(pid):
    """The process's start time in clock ticks (field 22 of /proc/PID/stat): tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def group_alive(pgid):
    try:  # reap our own children in that group first (a zombie still "exists" for killpg)
        while _sos.waitpid(-pgid, _sos.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    try:
        _sos.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def our_server(paths):
    """server.json if the process it names is alive and is the one we started, else None."""
    info = read_json_file(paths["server.json"])
    if not info or not info.get("pid"):
        return None
    ticks = start_ticks(info["pid"])
    if ticks is None or ticks != info.get("start_ticks"):
        return None
    try:
        with open(f"/proc/{info['pid']}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
    except OSError:
        return None
    return info


def stop_server(paths, grace_s=20.0):
    """TERM the server's process group, wait, then KILL. Never matches processes by name."""
    info = our_server(paths)
    if info is None:
        for name in ("server.pid", "server.json"):
            if _sos.path.exists(paths[name]):
                _sos.unlink(paths[name])
        return {"stopped": False, "pid": None, "signal": None}
    pgid = info.get("pgid") or info["pid"]
    _sos.killpg(pgid, _ssignal.SIGTERM)
    sent = "TERM"
    deadline = _stime.monotonic() + grace_s
    while group_alive(pgid) and _stime.monotonic() < deadline:
        _stime.sleep(0.05)
    if group_alive(pgid):
        _sos.killpg(pgid, _ssignal.SIGKILL)
        sent = "KILL"
        deadline = _stime.monotonic() + 5
        while group_alive(pgid) and _stime.monotonic() < deadline:
            _stime.sleep(0.05)
    for name in ("server.pid", "server.json"):
        if _sos.path.exists(paths[name]):
            _sos.unlink(paths[name])
    return {"stopped": True, "pid": info["pid"], "signal": sent}


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


def classify(log_lines):
    text = "\n".join(log_lines)
    for cls, label, pattern in FAILURE_CLASSES:
        if _sre.search(pattern, text, _sre.I):
            return cls, label
    return None, None


def local_url(host, port, path):
    host = "127.0.0.1" if host in (None, "", "0.0.0.0", "::") else host
    if ":" in host:
        host = "[" + host + "]"
    return f"http://{host}:{int(port)}{path}"


def http_get(url, timeout=2.0):
    """(status, body) from a GET on the host's own server; (None, error) when nothing answers."""
    return http(url, timeout=timeout)


def append_record(paths, record):
    with open_private(paths["restarts.jsonl"], "a") as fh:
        fh.write(_sjson.dumps(record) + "\n")
