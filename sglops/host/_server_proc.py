# The server process behind a port on this host, and what it runs on.
# Why: the Python that matters for a benchmark is the SERVER's (its venv, its torch), not the one running
# sglops' scripts; and when a server dies mid-run its own log says why (the log is its stdout, or the log
# sglops recorded when it started the server).
import json
import os
import re
import socket
import struct

from ._common import dist_version, sglops_dir, torch_info

# TCP_LISTEN in /proc/net/tcp
_LISTEN = "0A"


def _listen_inodes(port):
    """The inodes of the sockets listening on port: asked of the kernel's socket diagnostics (listening
    sockets only, ~0.1 ms), else read from /proc/net/tcp, which lists every socket of the host (10-20 ms
    with a few hundred, more on a busy host: each probe-backends asks)."""
    try:
        return _diag_listen_inodes(port)
    except (OSError, ValueError, struct.error):
        return _proc_listen_inodes(port)


def _proc_listen_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        except OSError:
            continue
    return inodes


# netlink's NETLINK_SOCK_DIAG; SOCK_DIAG_BY_FAMILY; NLM_F_REQUEST | NLM_F_DUMP; NLMSG_ERROR, NLMSG_DONE
_SOCK_DIAG, _BY_FAMILY, _DUMP, _ERROR, _DONE = 4, 20, 0x301, 2, 3


def _diag_listen_inodes(port):
    """sock_diag(7): a dump of the TCP sockets in state LISTEN, IPv4 and IPv6, kept where the local port is
    port (inet_diag_msg: the port at byte 4, the inode at byte 68)."""
    inodes = set()
    for family in (socket.AF_INET, socket.AF_INET6):
        # inet_diag_req_v2: family, protocol, ext, pad, states (1 << TCP_LISTEN); an empty inet_diag_sockid
        req = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 1 << 10) + bytes(48)
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as nl:
            nl.settimeout(5)
            nl.sendto(struct.pack("=IHHII", 16 + len(req), _BY_FAMILY, _DUMP, 1, 0) + req, (0, 0))
            done = False
            while not done:
                data = nl.recv(1 << 16)
                off = 0
                while off + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, off)
                    if kind == _ERROR:
                        raise OSError("sock_diag refused the dump")
                    if kind == _DONE or length < 16:
                        done = True
                        break
                    if struct.unpack_from("!H", data, off + 20)[0] == port:
                        inodes.add(str(struct.unpack_from("=I", data, off + 84)[0]))
                    off += (length + 3) & ~3
                if not data:
                    break
    return inodes


def listening_pid(port):
    """The pid whose socket listens on port (this host's network namespace), or None when none can be seen."""
    inodes = {f"socket:[{i}]" for i in _listen_inodes(int(port))}
    if not inodes:
        return None
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int, reverse=True):
        fd_dir = f"/proc/{pid}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(f"{fd_dir}/{fd}") in inodes:
                        return int(pid)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def stdio_log(pid, fds=(2, 1)):
    """The file a server's stderr (or stdout) goes to, when it is a plain file: the log of a server sglops did
    not start (a `nohup ... > server.log 2>&1` launch), read for the cause when it dies."""
    if not pid:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.startswith(("/dev/", "/proc/")) and os.path.isfile(target):
            return target
    return None


def process_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            items = fh.read().split(b"\0")
    except OSError:
        return {}
    return dict(i.decode(errors="replace").split("=", 1) for i in items if b"=" in i)


def _interpreter(pid, argv, env):
    """The python the process was started with, as invoked
    (a venv's bin/python, not the binary it links to)."""
    first = argv[0] if argv else ""
    if "python" in os.path.basename(first):
        if os.path.isabs(first):
            return first
        if "/" in first:
            try:
                return os.path.normpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), first))
            except OSError:
                pass
        for folder in (env.get("PATH") or "").split(":"):
            cand = os.path.join(folder, first)
            if folder and os.access(cand, os.X_OK):
                return cand
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def process_info(pid):
    """argv, interpreter, stdout log and environment of a process (None when it is gone or not readable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return None
    env = process_environ(pid)
    return {
        "pid": pid,
        "argv": argv[:40],
        "python": _interpreter(pid, argv, env),
        "log": stdio_log(pid, fds=(1,)),
        "pythonpath": env.get("PYTHONPATH"),
        "virtual_env": env.get("VIRTUAL_ENV"),
        "hf_env": {k: env[k] for k in ("HF_HOME", "HF_HUB_CACHE") if env.get(k)},
    }


def server_api_key(pid):
    """The `--api-key X` (or `--api-key=X`) the server at pid was started with, or None: every request to it
    then carries `Authorization: Bearer X` (the key stays on this host; the laptop masks it by name)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0")]
    except (OSError, TypeError, ValueError):
        return None
    for i, word in enumerate(argv):
        if word == "--api-key" and i + 1 < len(argv) and argv[i + 1]:
            return argv[i + 1]
        if word.startswith("--api-key="):
            return word.split("=", 1)[1] or None
    return None


_PROBE = (
    "import json,sys;print(json.dumps({'executable':sys.executable,'version':'%d.%d.%d'%sys.version_info[:3],"
    "'prefix':sys.prefix,'path':sys.path}))"
)


def python_env(python, pythonpath=None):
    """A python's version, prefix and the versions of torch/sglang/flashinfer/triton on ITS path, read
    from dist-info folders (it runs only `import sys`, so a heavy venv answers in tens of ms)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        import subprocess

        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=20, env=env)
        info = json.loads(out.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {"executable": python, "version": None, "error": "could not run it"}
    paths = [p for p in info.pop("path") if p]
    info["torch"] = torch_info(paths=paths)
    for name, dist in (
        ("sglang", "sglang"),
        ("flashinfer", "flashinfer-python"),
        ("triton", "triton"),
        ("sgl_kernel", "sgl-kernel"),
    ):
        info[name] = dist_version(dist, paths=paths)
    return info


def recorded_server(root, port):
    """server.json of the server sglops started here, when it serves this port ({} otherwise)."""
    if not root:
        return {}
    try:
        with open(os.path.join(sglops_dir(root, create=False), "server.json")) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) and int(rec.get("port") or 0) == int(port) else {}


def server_process(port, root=None):
    """What serves port: pid, argv, interpreter, log; None when nothing this user can see listens there."""
    pid = listening_pid(port)
    info = process_info(pid) if pid else None
    rec = recorded_server(root, port)
    if info is None and not rec:
        return None
    info = info or {"pid": None, "argv": [], "python": None, "log": None, "pythonpath": None}
    if rec.get("log"):
        # sglops' own record of where the server writes
        info["log"] = rec["log"]
    info["started_by_sglops"] = bool(rec)
    return info


_EXC_LINE = re.compile(r"^(?:\[[^\]]*\]\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$")


_FATAL = re.compile(r"^Fatal Python error: (.+)$")
_FRAME = re.compile(r'^File "([^"]+)", line (\d+) in (\w+)')


def _fatal_line(lines, at):
    """`Fatal Python error: Segmentation fault (in torch/profiler/profiler.py:467 stop_trace)`: the fatal line
    at index `at` and the crashing thread's innermost Python frame (faulthandler prints it first under
    "Current thread"), shortened to its path below site-packages."""
    text = f"Fatal Python error: {_FATAL.match(lines[at].strip()).group(1)}"
    current = next(
        (j for j in range(at + 1, min(len(lines), at + 200)) if lines[j].startswith("Current thread")), None
    )
    # the first frame line under it ("Garbage-collecting" may come first)
    frame = None
    for line in lines[current + 1 : current + 4] if current is not None else []:
        frame = _FRAME.match(line.strip())
        if frame:
            break
    if frame:
        text += f" (in {frame.group(1).split('site-packages/')[-1]}:{frame.group(2)} {frame.group(3)})"
    return text[:300]


def death_cause(log_path, since=None):
    """The last exception line a server log gained since offset `since` (`IndexError: index out of range in
    self`), or the last fatal signal (`Fatal Python error: Segmentation fault (in
    torch/profiler/profiler.py:467 stop_trace)`: a crash in native code leaves no exception line), or None
    when it shows neither."""
    if not log_path:
        return None
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = (
                max(since or 0, size - 512 * 1024)
                if since is not None and since <= size
                else max(0, size - 512 * 1024)
            )
            fh.seek(start)
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if _FATAL.match(line):
            return _fatal_line(lines, i)
        m = _EXC_LINE.match(line)
        if m and not m.group(1).startswith(("UserWarning", "FutureWarning", "DeprecationWarning")):
            return m.group(1)[:300]
    return None


def log_size(log_path):
    try:
        return os.path.getsize(log_path) if log_path else None
    except OSError:
        return None
