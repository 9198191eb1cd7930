# Restart the server in one round trip: lock, stop ours (pid file + process group + its process tree),
# install the new launch script atomically, start it detached with its own log, poll /health on this host,
# read /server_info (/get_server_info before it existed), remember the script as last-good if it came up,
# and record the attempt. A failed start is classified from the whole log since this start's marker.
# With args["plan"] (a dry run) it says what it would do from this host's own state and changes nothing:
# no lock taken, no state folder made, nothing written (`plan()`).
import fcntl
import json
import os
import re
import secrets
import subprocess
import time

from ._common import PRIVATE_SCRIPT, UserError, is_checkout, open_private, progress
from .ab_journal import holder
from .server_common import (
    SERVER_ID_VAR,
    append_record,
    classify,
    entrypoint_server,
    group_alive,
    http_get,
    kill_group,
    local_url,
    our_server,
    read_since,
    server_info,
    start_ticks,
    state_paths,
    stop_server,
    tail,
    write_atomic,
)


def start(paths, script_path, cwd):
    """Start the script detached; (process, info) where info["log_offset"] is where this start's log begins.
    Every process of the server inherits SERVER_ID_VAR: a
    worker that leaves the process group is still ours."""
    server_id = secrets.token_hex(8)
    with open_private(paths["server.log"], "ab") as log, open(os.devnull, "rb") as null:
        log.seek(0, 2)
        offset = log.tell()
        log.write(f"\n===== sglops restart {time.strftime('%Y-%m-%dT%H:%M:%S')} =====\n".encode())
        log.flush()
        proc = subprocess.Popen(
            ["nohup", "bash", script_path],
            cwd=cwd,
            stdin=null,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, SERVER_ID_VAR: server_id},
        )
    info = {
        "pid": proc.pid,
        "pgid": proc.pid,
        "start_ticks": None,
        "started": time.time(),
        "log_offset": offset,
        "server_id": server_id,
    }
    for _ in range(100):
        info["start_ticks"] = start_ticks(proc.pid)
        if info["start_ticks"] is not None:
            break
        time.sleep(0.01)
    return proc, info


# SGLang's own words for "a process of mine failed": after them it tries to kill its tree, but on a CPU host a
# failed scheduler can leave the launcher hanging (seen on 0.5.23): it is stopped instead of waited for.
# A failed bind of the HTTP port is as final: SGLang's warm-up thread then retries /model_info for ~2 minutes.
FATAL = re.compile(
    r"Received sigquit from a child process|Scheduler hit an exception|kill_process_tree called|"
    r"error while attempting to bind on address"
)
FATAL_GRACE_S = 5.0


def _last_good_engine(paths):
    """The engine spec the last healthy start was made with (a rollback restarts that engine)."""
    try:
        with open(paths["launch.last-good.json"]) as fh:
            return json.load(fh).get("engine_spec")
    except (OSError, ValueError, AttributeError):
        return None


def aborted(path, token):
    """Whether the laptop asked this start to give up (another node of its deployment failed): the abort file
    names this start's token, so an old request never stops a new start."""
    if not token:
        return False
    try:
        with open(path) as fh:
            return fh.read().strip() == token
    except OSError:
        return False


def wait_healthy(proc, host, port, timeout_s, log_path, log_offset=0, abort=None):
    """Poll /health until 200, the process dies (or says it failed and hangs), the timeout passes or the
    laptop aborts the start (abort: (path, token)); report progress meanwhile (elapsed, /health, the log's
    last line)."""
    t0 = time.monotonic()
    last_report = 0.0
    fatal_at = None
    seen = log_offset
    while True:
        elapsed = time.monotonic() - t0
        code = proc.poll()
        if code is not None:
            return {"state": "died", "exit_code": code, "waited_s": round(elapsed, 3), "hung": False}
        # the start-up timeout is a deadline: a /health that answers a byte at a time cannot stretch it
        status, _ = http_get(
            local_url(host, port, "/health"), timeout=max(0.05, min(2.0, timeout_s - elapsed))
        )
        elapsed = time.monotonic() - t0
        if status == 200:
            return {"state": "healthy", "exit_code": None, "waited_s": round(elapsed, 3), "hung": False}
        if elapsed > timeout_s:
            return {"state": "timeout", "exit_code": None, "waited_s": round(elapsed, 3), "hung": False}
        if abort and aborted(*abort):
            return {"state": "aborted", "exit_code": None, "waited_s": round(elapsed, 3), "hung": False}
        if fatal_at is None:
            seen, fresh = _read_from(log_path, seen)
            if FATAL.search(fresh):
                fatal_at = elapsed
        elif elapsed - fatal_at > FATAL_GRACE_S:
            return {"state": "died", "exit_code": None, "waited_s": round(elapsed, 3), "hung": True}
        if elapsed - last_report >= 0.5:
            last_report = elapsed
            line = (tail(log_path, 1) or [""])[-1][-160:]
            progress(
                phase="waiting for /health",
                elapsed=round(elapsed, 1),
                timeout=timeout_s,
                health=status,
                log=line,
            )
        time.sleep(0.1 if elapsed < 5 else 0.25)


def _read_from(path, offset):
    """(new offset, text appended since offset): the health wait reads each log byte once."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(4 * 1024 * 1024)
    except OSError:
        return offset, ""
    # whole lines only; the rest is read next time
    cut = data.rfind(b"\n") + 1
    return offset + cut, data[:cut].decode(errors="replace")


def port_taken(host, port):
    import socket

    try:
        with socket.create_connection(
            (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1", int(port)), timeout=1
        ):
            return True
    except OSError:
        return False


def _lock_held(path):
    """True when another sglops restart holds the server lock now (read-only: a shared, non-blocking try)."""
    try:
        fh = open(path)
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def take_lock(path, wait_s):
    """The server lock, waiting up to wait_s for a restart that holds it (an interrupted `inv ab` leaves its
    restart running on the host until the server is up or given up: the restore that follows waits for it)."""
    lock = open_private(path, "w")
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if time.monotonic() >= deadline:
                lock.close()
                raise UserError(
                    "another sglops restart is running on this host (lock " + path + ")"
                ) from None
        if not said:
            progress(phase="waiting for another sglops restart on this host to finish (lock " + path + ")")
            said = True
        time.sleep(0.25)


def plan(args):
    """The steps a restart (or with stop_only, a stop) would take here, read from this host's state; the same
    checks as the real run refuse (lock held, nothing to roll back to, a port taken by another process)."""
    paths = state_paths(args["root"], create=False)
    grace = float(args.get("grace_s", 20))
    if _lock_held(paths["server.lock"]):
        raise UserError("another sglops restart is running on this host (lock " + paths["server.lock"] + ")")
    info = our_server(paths)
    stop = (
        f"stop pid {info['pid']} (profile {info.get('profile')}, port {info.get('port')}): TERM its process "
        f"group and tree, KILL after {grace:g}s"
        if info
        else "stop nothing (no sglops server running)"
    )
    if args.get("stop_only"):
        return {"plan": [stop], "server": info, "entrypoint": None if info else entrypoint_server()}
    state = os.path.dirname(paths["server.log"])
    if args.get("rollback") and not os.path.exists(paths["launch.last-good.sh"]):
        raise UserError("nothing to roll back to: no server has come up healthy through sglops here yet")
    if port_taken(args["host"], args["port"]) and not (
        info and int(info.get("port") or 0) == int(args["port"])
    ):
        return {
            "plan": [
                stop,
                (
                    f"start nothing: port {args['port']} on {args['host']} is in use by a process sglops "
                    "did not start here"
                ),
            ],
            "server": info,
            "refused": "port_in_use",
        }
    return {
        "plan": [
            stop,
            f"install {state}/launch.sh "
            + ("from launch.last-good.sh" if args.get("rollback") else "(below)"),
            f"start it detached, log {state}/server.log",
            (
                f"wait up to {float(args['timeout_s']):g}s for http://{args['host']}:{args['port']}/health,"
                " then check every rendered argument against /server_info"
            ),
        ],
        "server": info,
    }


def main(args):
    root = args["root"]
    if args.get("plan"):
        return plan(args)
    held = holder(root, args)
    # an ab or sweep owns the host: its next round or its restore would undo this
    if held is not None:
        return {"owned_by": held}
    paths = state_paths(root)
    # held until this script ends
    _lock = take_lock(paths["server.lock"], float(args.get("lock_wait_s") or 0))
    if args.get("stop_only"):
        stopped = stop_server(paths, float(args.get("grace_s", 20)))
        append_record(
            paths,
            {
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "state": "stopped",
                "stopped_pid": stopped["pid"],
                "operator": args.get("operator"),
            },
        )
        return {**stopped, "entrypoint": None if stopped["stopped"] else entrypoint_server()}
    if args.get("rollback"):
        try:
            with open(paths["launch.last-good.sh"]) as fh:
                script = fh.read()
        except OSError:
            raise UserError(
                "nothing to roll back to: no server has come up healthy through sglops here yet"
            ) from None
    else:
        script = args["script"]
    progress(phase="stopping the running server")
    stopped = stop_server(paths, float(args.get("grace_s", 20)))
    if port_taken(args["host"], args["port"]):
        # Someone else's server answers there: a health check
        # would pass against it, not ours. Nothing is started.
        label = (
            f"port {args['port']} on {args['host']} is already in use by a process sglops did not start here"
        )
        append_record(
            paths,
            {
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "profile": args.get("profile"),
                "state": "died",
                "failure": "port_in_use",
                "stopped_pid": stopped["pid"],
                "operator": args.get("operator"),
            },
        )
        return {
            "stopped": stopped,
            "pid": None,
            "log_path": paths["server.log"],
            "state_dir": os.path.dirname(paths["server.log"]),
            "state": "died",
            "exit_code": None,
            "waited_s": 0,
            "server_info": None,
            "log_tail": [label + " (checked before starting; nothing was started)"],
            "failure": "port_in_use",
            "failure_label": label,
            "failure_detail": None,
            "server_info_endpoint": None,
        }
    previous = paths["launch.sh"] + ".prev"
    if os.path.exists(paths["launch.sh"]):
        os.replace(paths["launch.sh"], previous)
        # one written by an older sglops may be 0755
        os.chmod(previous, PRIVATE_SCRIPT)
    write_atomic(paths["launch.sh"], script, PRIVATE_SCRIPT)
    progress(phase="starting")
    # A checkout's launch script cds into it; an installed tree is never a working folder (state dir instead).
    proc, info = start(
        paths, paths["launch.sh"], root if is_checkout(root) else os.path.dirname(paths["server.log"])
    )
    spec = (args.get("engine") or _last_good_engine(paths)) if args.get("rollback") else args.get("engine")
    info.update(
        {
            "engine": (spec or {}).get("name"),
            "engine_spec": spec,
            "titles": (spec or {}).get("process_titles"),
            "launch_module": (spec or {}).get("launch_module"),
            "profile": args.get("profile"),
            "port": args["port"],
            "host": args["host"],
            "log": paths["server.log"],
            "script": paths["launch.sh"],
            "rollback": bool(args.get("rollback")),
            "nnodes": int(args.get("nnodes") or 1),
            "node_rank": args.get("node_rank"),
        }
    )
    write_atomic(paths["server.json"], json.dumps(info))
    write_atomic(paths["server.pid"], f"{proc.pid}\n")
    abort = (paths["server.abort"], args["abort_token"]) if args.get("abort_token") else None
    waited = wait_healthy(
        proc,
        args["host"],
        args["port"],
        float(args["timeout_s"]),
        paths["server.log"],
        info["log_offset"],
        abort,
    )
    result = {
        "stopped": stopped,
        "pid": proc.pid,
        "log_path": paths["server.log"],
        "state_dir": os.path.dirname(paths["server.log"]),
        **waited,
        "server_info": None,
        "server_info_endpoint": None,
        "log_tail": [],
        "failure": None,
        "failure_label": None,
        "failure_detail": None,
    }
    if waited["state"] == "healthy":
        result["server_info"], result["server_info_endpoint"] = server_info(
            args["host"],
            args["port"],
            spec=spec,
            log_lines=read_since(paths["server.log"], info["log_offset"]),
        )
        write_atomic(paths["launch.last-good.sh"], script, PRIVATE_SCRIPT)
        write_atomic(
            paths["launch.last-good.json"],
            json.dumps(
                {
                    "profile": args.get("profile"),
                    "host": args["host"],
                    "port": args["port"],
                    "engine_spec": spec,
                    "timeout_s": args["timeout_s"],
                    "grace_s": args.get("grace_s", 20),
                    "at": time.time(),
                    "nnodes": info["nnodes"],
                    "node_rank": info["node_rank"],
                }
            ),
        )
    else:
        if waited["state"] in ("timeout", "aborted") or waited["hung"]:
            # do not leave a half-started server behind
            stop_server(paths, float(args.get("grace_s", 20)))
        time.sleep(0.1)
        since = read_since(paths["server.log"], info["log_offset"])
        result["log_tail"] = since[-int(args.get("tail", 30)) :]
        cls, label, evidence = classify(since, [tuple(f) for f in (spec or {}).get("failures") or []])
        # its own log is not why it stopped: the laptop names the node that failed
        if waited["state"] == "aborted":
            cls, label = "aborted", "stopped: another node of this server failed to come up"
        result["failure"], result["failure_label"], result["failure_detail"] = (
            cls or waited["state"],
            label
            or (
                f"no /health within {float(args['timeout_s']):g}s"
                if waited["state"] == "timeout"
                else "exited"
            ),
            evidence,
        )
        if waited["state"] == "died":
            # the launcher died; its workers must not outlive it
            if group_alive(info["pgid"]):
                kill_group(info["pgid"])
            for name in ("server.pid", "server.json"):
                if os.path.exists(paths[name]):
                    os.unlink(paths[name])
    append_record(
        paths,
        {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "profile": args.get("profile"),
            "rollback": bool(args.get("rollback")),
            "state": waited["state"],
            "pid": proc.pid,
            "waited_s": waited["waited_s"],
            "failure": result["failure"],
            "stopped_pid": stopped["pid"],
            "operator": args.get("operator"),
            **({"nnodes": info["nnodes"], "node_rank": info["node_rank"]} if info["nnodes"] > 1 else {}),
        },
    )
    return result
