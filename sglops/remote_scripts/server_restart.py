# sglops: include _common, server_common
# Restart the server in one round trip: lock, stop ours (pid file + process group), install the new
# launch script atomically, start it detached with its own log, poll /health on this host, read
# /get_server_info, remember the script as last-good if it came up, and record the attempt.
import fcntl
import json
import os
import subprocess
import time


def start(paths, script_path, cwd):
    with open_private(paths["server.log"], "ab") as log, open(os.devnull, "rb") as null:
        log.write(f"\n===== sglops restart {time.strftime('%Y-%m-%dT%H:%M:%S')} =====\n".encode())
        log.flush()
        proc = subprocess.Popen(["nohup", "bash", script_path], cwd=cwd, stdin=null, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    info = {"pid": proc.pid, "pgid": proc.pid, "start_ticks": None, "started": time.time()}
    for _ in range(100):
        info["start_ticks"] = start_ticks(proc.pid)
        if info["start_ticks"] is not None:
            break
        time.sleep(0.01)
    return proc, info


def wait_healthy(proc, host, port, timeout_s, log_path):
    """Poll /health until 200, the process dies, or the timeout passes; report progress meanwhile."""
    t0 = time.monotonic()
    last_report = 0.0
    while True:
        elapsed = time.monotonic() - t0
        code = proc.poll()
        if code is not None:
            return {"state": "died", "exit_code": code, "waited_s": round(elapsed, 3)}
        status, _ = http_get(local_url(host, port, "/health"), timeout=2)
        if status == 200:
            return {"state": "healthy", "exit_code": None, "waited_s": round(elapsed, 3)}
        if elapsed > timeout_s:
            return {"state": "timeout", "exit_code": None, "waited_s": round(elapsed, 3)}
        if elapsed - last_report >= 0.5:
            last_report = elapsed
            line = (tail(log_path, 1) or [""])[-1][-160:]
            progress(phase="waiting for /health", elapsed=round(elapsed, 1), timeout=timeout_s,
                     health=status, log=line)
        time.sleep(0.1)


def port_taken(host, port):
    import socket

    try:
        with socket.create_connection((host if host not in ("0.0.0.0", "::", "") else "127.0.0.1", int(port)),
                                      timeout=1):
            return True
    except OSError:
        return False


def main(args):
    root = args["root"]
    paths = state_paths(root)
    lock = open_private(paths["server.lock"], "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise UserError("another sglops restart is running on this host (lock " + paths["server.lock"] + ")") from None
    if args.get("stop_only"):
        stopped = stop_server(paths, float(args.get("grace_s", 20)))
        append_record(paths, {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "state": "stopped",
                              "stopped_pid": stopped["pid"], "operator": args.get("operator")})
        return stopped
    if args.get("rollback"):
        try:
            with open(paths["launch.last-good.sh"]) as fh:
                script = fh.read()
        except OSError:
            raise UserError("nothing to roll back to: no server has come up healthy through sglops here yet") from None
    else:
        script = args["script"]
    progress(phase="stopping the running server")
    stopped = stop_server(paths, float(args.get("grace_s", 20)))
    if port_taken(args["host"], args["port"]):
        # Someone else's server answers there: a health check would pass against it, not ours. Nothing is started.
        label = f"port {args['port']} on {args['host']} is already in use by a process sglops did not start here"
        append_record(paths, {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "profile": args.get("profile"),
                              "state": "died", "failure": "port_in_use", "stopped_pid": stopped["pid"],
                              "operator": args.get("operator")})
        return {"stopped": stopped, "pid": None, "log_path": paths["server.log"],
                "state_dir": os.path.dirname(paths["server.log"]), "state": "died", "exit_code": None, "waited_s": 0,
                "server_info": None, "log_tail": [label + " (checked before starting; nothing was started)"],
                "failure": "port_in_use", "failure_label": label}
    previous = paths["launch.sh"] + ".prev"
    if os.path.exists(paths["launch.sh"]):
        os.replace(paths["launch.sh"], previous)
        os.chmod(previous, PRIVATE_SCRIPT)  # one written by an older sglops may be 0755
    write_atomic(paths["launch.sh"], script, PRIVATE_SCRIPT)
    progress(phase="starting")
    proc, info = start(paths, paths["launch.sh"], root)
    info.update({"profile": args.get("profile"), "port": args["port"], "host": args["host"],
                 "log": paths["server.log"], "script": paths["launch.sh"], "rollback": bool(args.get("rollback"))})
    write_atomic(paths["server.json"], json.dumps(info))
    write_atomic(paths["server.pid"], f"{proc.pid}\n")
    waited = wait_healthy(proc, args["host"], args["port"], float(args["timeout_s"]), paths["server.log"])
    result = {"stopped": stopped, "pid": proc.pid, "log_path": paths["server.log"], "state_dir": os.path.dirname(
        paths["server.log"]), **waited, "server_info": None, "log_tail": [], "failure": None, "failure_label": None}
    if waited["state"] == "healthy":
        status, body = http_get(local_url(args["host"], args["port"], "/get_server_info"), timeout=5)
        if status == 200:
            try:
                result["server_info"] = json.loads(body)
            except ValueError:
                pass
        write_atomic(paths["launch.last-good.sh"], script, PRIVATE_SCRIPT)
        write_atomic(paths["launch.last-good.json"], json.dumps(
            {"profile": args.get("profile"), "host": args["host"], "port": args["port"],
             "timeout_s": args["timeout_s"], "grace_s": args.get("grace_s", 20), "at": time.time()}))
    else:
        if waited["state"] == "timeout":
            stop_server(paths, float(args.get("grace_s", 20)))  # do not leave a half-started server behind
        time.sleep(0.1)
        result["log_tail"] = tail(paths["server.log"], int(args.get("tail", 30)))
        since = result["log_tail"]
        marker = [i for i, ln in enumerate(since) if ln.startswith("===== sglops restart")]
        cls, label = classify(since[marker[-1]:] if marker else since)
        result["failure"], result["failure_label"] = cls or waited["state"], label or (
            f"no /health within {float(args['timeout_s']):g}s" if waited["state"] == "timeout" else "exited")
        if waited["state"] == "died":
            for name in ("server.pid", "server.json"):
                if os.path.exists(paths[name]):
                    os.unlink(paths[name])
    append_record(paths, {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "profile": args.get("profile"),
                          "rollback": bool(args.get("rollback")), "state": waited["state"], "pid": proc.pid,
                          "waited_s": waited["waited_s"], "failure": result["failure"],
                          "stopped_pid": stopped["pid"], "operator": args.get("operator")})
    return result
