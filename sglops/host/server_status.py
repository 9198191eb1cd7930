# The server sglops started on this host: alive?, /health, /server_info (or /get_server_info), last restarts,
# log tail.
# With follow_s, keep streaming new log lines (as progress reports) for that long.
import json
import os
import time

from ._common import UserError, progress
from .server_common import (
    classify,
    entrypoint_server,
    http_get,
    local_url,
    marked_processes,
    our_server,
    process_cmdline,
    process_role,
    process_tree,
    read_json_file,
    read_since,
    server_info,
    server_marks,
    state_paths,
    tail,
)


def server_processes(info):
    """Every process of the server (its tree, and any carrying its mark outside it) with its role and ranks:
    the launcher, each scheduler with its TP/PP/DP rank, the detokenizer."""
    if not info:
        return []
    titles, marks = server_marks(info)
    pids = [p for p, _ in process_tree(info["pid"])]
    pids += [p for p in marked_processes(info.get("server_id"), titles, marks) if p not in pids]
    out = []
    for pid in pids:
        argv = process_cmdline(pid)
        if not argv:
            continue
        role, ranks = process_role(argv, titles, marks)
        if role == "other" and pid != info["pid"]:
            # a helper of the launch script (bash, nohup): named, not hidden
            role = os.path.basename(argv[0])
        out.append({"pid": pid, "role": role, **ranks, "command": " ".join(argv)[:160]})
    return out


def last_restarts(path, n):
    try:
        with open(path) as fh:
            lines = fh.readlines()[-n:]
    except OSError:
        return []
    out = []
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass
    return out


def follow(path, seconds):
    """Stream lines appended to the log for `seconds` (the laptop prints them as they come)."""
    try:
        fh = open(path, "rb")
    except OSError:
        raise UserError("no server log at " + path + " (has sglops started a server here?)") from None
    fh.seek(0, 2)
    end = time.monotonic() + seconds
    pending = b""
    while time.monotonic() < end:
        chunk = fh.read()
        if chunk:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                progress(line=ln.decode(errors="replace"))
        else:
            time.sleep(0.2)
    return 0


def died(paths):
    """Why the server sglops last started here is gone when server.json still names it (it came up, then died:
    e.g. at its first request): its log since that start, classified with its engine's crash texts."""
    gone = read_json_file(paths["server.json"])
    if not isinstance(gone, dict) or "log_offset" not in gone:
        return None
    spec = gone.get("engine_spec") or {}
    cls, label, evidence = classify(
        read_since(paths["server.log"], int(gone["log_offset"])),
        [tuple(f) for f in spec.get("failures") or []],
    )
    return {
        "pid": gone.get("pid"),
        "profile": gone.get("profile"),
        "failure": cls or "died",
        "failure_label": label or "exited",
        "failure_detail": evidence,
    }


def main(args):
    root = args["root"]
    # read-only: makes no .sglops/
    paths = state_paths(root, create=False)
    info = our_server(paths)
    # restart shape (b): the container's command is the server
    entry = None if info else entrypoint_server()
    port = args.get("port") or (info or entry or {}).get("port")
    host = args.get("host") or (info or entry or {}).get("host")
    out = {
        "state_dir": os.path.dirname(paths["server.pid"]),
        "running": info is not None,
        "server": info,
        "health": None,
        "server_info": None,
        "restarts": last_restarts(paths["restarts.jsonl"], 5),
        "log_path": paths["server.log"],
        "log_tail": tail(paths["server.log"], int(args.get("tail", 20))),
        "entrypoint": entry,
        "processes": server_processes(info),
        "died": None if info else died(paths),
    }
    if port:
        out["health"], _ = http_get(local_url(host, port, "/health"), timeout=3)
        if args.get("server_info", True) and out["health"] is not None:
            spec = (info or {}).get("engine_spec")
            since = (
                read_since(paths["server.log"], int(info["log_offset"]))
                if spec and info.get("log_offset")
                else []
            )
            out["server_info"], out["server_info_endpoint"] = server_info(
                host, port, spec=spec, log_lines=since
            )
    # shape (b): the log is the engine's, followed on the host
    if args.get("follow_s") and not entry:
        for ln in out["log_tail"]:
            progress(line=ln)
        follow(paths["server.log"], float(args["follow_s"]))
    return out
