# Restart shape (b), run on the HOST (outside the container) in one round trip: the container's own command is
# the server, so the engine starts and stops it. restart = check that the container runs the rendered
# arguments (refuse, writing nothing, when it does not: only recreating a container changes its command, and
# the options it was created with belong to whoever created it), `ENGINE restart`, a health wait from inside
# the container (`exec`, each call under `timeout` inside), the effective arguments (/server_info), and on a
# failed start the crash named from `ENGINE logs` since this start. Records live on the host (the container
# may be gone or stopped): ~/.local/state/sglops/containers/<engine>-<name>/restarts.jsonl and last-good.json.
import json
import os
import re
import subprocess
import time

from ._common import PRIVATE_DIR, UserError, open_private, progress
from .server_common import classify, flag_value, local_url, write_atomic

_PROBE = (
    "import sys,urllib.request,urllib.error\n"
    "try:\n r=urllib.request.urlopen(sys.argv[1],timeout=float(sys.argv[2]));s,b=r.status,r.read()\n"
    "except urllib.error.HTTPError as e:\n s,b=e.code,b''\n"
    "except Exception:\n s,b=0,b''\n"
    "sys.stdout.write(str(s)+'\\n'+b.decode('utf-8','replace'))\n"
)
FATAL = re.compile(
    r"Received sigquit from a child process|Scheduler hit an exception|kill_process_tree called|"
    r"error while attempting to bind on address"
)
FATAL_GRACE_S = 5.0


def engine(args, *argv, timeout=60):
    """(exit code, stdout, stderr) of the container engine's own command on this host."""
    try:
        p = subprocess.run([args["engine"], *argv], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise UserError(f"`{args['engine']}` is not installed (or not on PATH) on the host") from None
    except subprocess.TimeoutExpired:
        return 124, "", f"{args['engine']} {argv[0]} timed out after {timeout}s"
    return p.returncode, p.stdout, p.stderr


def inspect(args):
    code, out, err = engine(args, "inspect", "--type", "container", args["container"])
    if code != 0:
        raise UserError(
            f"container {args['container']!r} does not exist on this host ({args['engine']}: "
            f"{(err.strip().splitlines() or ['no output'])[-1][:200]})"
        )
    return json.loads(out)[0]


def command_of(doc):
    return [doc.get("Path") or "", *(doc.get("Args") or [])]


def env_of(doc):
    return dict(e.split("=", 1) for e in (doc.get("Config") or {}).get("Env") or [] if "=" in e)


def server_words(argv):
    """The server's own arguments: everything from the first `--flag` on (the launcher before it may be
    spelt differently, `python3` or `/venv/bin/python`, and is not compared)."""
    i = next((n for n, w in enumerate(argv) if w.startswith("--")), len(argv))
    return argv[i:]


def differences(doc, want_argv, want_env):
    """What the container runs that the rendered profile does not say, one line each."""
    out = []
    have, want = server_words(command_of(doc)), server_words(want_argv)
    if have != want:
        hset, wset = _pairs(have), _pairs(want)
        for flag in sorted(set(hset) | set(wset)):
            if hset.get(flag) != wset.get(flag):
                out.append(
                    f"{flag}: container runs {_show(hset.get(flag))}, profile renders {_show(wset.get(flag))}"
                )
        if not out:
            out.append(f"arguments in another order: container runs {' '.join(have)}")
    env = env_of(doc)
    for k, v in sorted(want_env.items()):
        if env.get(k) != v:
            out.append(f"env {k}: container has {env.get(k)!r}, profile sets {v!r}")
    return out


def _pairs(words):
    out, key = {}, None
    for w in words:
        if w.startswith("--"):
            key = w.split("=", 1)[0]
            out[key] = [w.split("=", 1)[1]] if "=" in w else []
        elif key is not None:
            out[key].append(w)
    return {k: " ".join(v) for k, v in out.items()}


def _show(v):
    return "(nothing)" if v is None else repr(v) if v else "(the bare flag)"


def exec_get(args, host, port, path, timeout=5):
    """(status, body) of GET path on the container's own server, asked from inside it (its network may be
    its own), with the time limit enforced inside (`timeout`)."""
    words = (
        ["exec"]
        + (["-u", args["user"]] if args.get("user") else [])
        + [
            args["container"],
            "timeout",
            "-k",
            "2",
            str(int(timeout) + 1),
            args["python"],
            "-c",
            _PROBE,
            local_url(host, port, path),
            str(timeout),
        ]
    )
    code, out, _ = engine(args, *words, timeout=timeout + 10)
    if code != 0 or not out:
        return None, ""
    status, _, body = out.partition("\n")
    return (int(status) or None) if status.isdigit() else None, body


def logs(args, since=None, tail_n=None):
    words = ["logs"] + (["--since", since] if since else []) + (["--tail", str(tail_n)] if tail_n else [])
    try:
        p = subprocess.run(
            [args["engine"], *words, args["container"]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return p.stdout.decode(errors="replace").splitlines()


def state_dir(args, create=True):
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    d = os.path.join(base, "sglops", "containers", f"{args['engine']}-{args['container']}")
    if create:
        os.makedirs(d, mode=PRIVATE_DIR, exist_ok=True)
    return d


def locked(args):
    """One restart or stop of this container at a time (the lock file is on the host, beside the records)."""
    import fcntl

    lock = open_private(os.path.join(state_dir(args), "lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise UserError(
            f"another sglops restart or stop of container {args['container']} is running on this host"
        ) from None
    return lock


def record(args, entry):
    with open_private(os.path.join(state_dir(args), "restarts.jsonl"), "a") as fh:
        fh.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry}) + "\n")


def records(args, n=5):
    path = os.path.join(state_dir(args, create=False), "restarts.jsonl")
    try:
        with open(path) as fh:
            lines = fh.readlines()[-n:]
    except OSError:
        return []
    return [json.loads(ln) for ln in lines if ln.strip().startswith("{")]


def state_of(doc):
    st = doc.get("State") or {}
    return {
        "status": st.get("Status"),
        "running": bool(st.get("Running")),
        "restarting": bool(st.get("Restarting")),
        "exit_code": st.get("ExitCode"),
        "started_at": st.get("StartedAt"),
        "finished_at": st.get("FinishedAt"),
        "oom_killed": bool(st.get("OOMKilled")),
        "restart_count": doc.get("RestartCount", 0),
        "restart_policy": ((doc.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no",
        "id": doc.get("Id"),
        "image": doc.get("Image"),
        "command": command_of(doc),
    }


def wait_healthy(args, host, port, timeout_s, started_at, count0):
    t0, fatal_at, last = time.monotonic(), None, 0.0
    while True:
        elapsed = time.monotonic() - t0
        st = state_of(inspect(args))
        if st["started_at"] != started_at or st["restart_count"] != count0 or st["restarting"]:
            # it exited and the engine's restart policy started it again
            return "died", elapsed, st, False
        if not st["running"]:
            return "died", elapsed, st, False
        status, _ = exec_get(args, host, port, "/health", timeout=3)
        if status == 200:
            return "healthy", elapsed, st, False
        if elapsed > timeout_s:
            return "timeout", elapsed, st, False
        if fatal_at is None:
            if FATAL.search("\n".join(logs(args, since=started_at))):
                fatal_at = elapsed
        elif elapsed - fatal_at > FATAL_GRACE_S:
            # SGLang said a process failed and the launcher hangs
            return "died", elapsed, st, True
        if elapsed - last >= 1.0:
            last = elapsed
            line = (logs(args, tail_n=1) or [""])[-1][-160:]
            progress(
                phase="waiting for /health",
                elapsed=round(elapsed, 1),
                timeout=timeout_s,
                health=status,
                log=line,
            )
        time.sleep(1.0)


def restart(args):
    doc = inspect(args)
    before = state_of(doc)
    diff = differences(doc, args["argv"], args.get("env") or {})
    # refuse before anything changes: restarting would run the container's old command
    if diff:
        return {"state": "refused", "differences": diff, "container": before}
    if args.get("plan"):
        return {"state": "plan", "differences": [], "container": before}
    progress(phase=f"{args['engine']} restart")
    code, _, err = engine(
        args,
        "restart",
        "-t",
        str(int(args["grace_s"])),
        args["container"],
        timeout=float(args["grace_s"]) + 60,
    )
    if code != 0:
        raise UserError(
            f"{args['engine']} restart {args['container']} failed: "
            f"{(err.strip().splitlines() or ['no output'])[-1][:200]}"
        )
    started = state_of(inspect(args))
    state, waited, st, hung = wait_healthy(
        args,
        args["host"],
        args["port"],
        float(args["timeout_s"]),
        started["started_at"],
        started["restart_count"],
    )
    out = {
        "state": state,
        "waited_s": round(waited, 3),
        "container": st,
        "stopped": before,
        "server_info": None,
        "server_info_endpoint": None,
        "failure": None,
        "failure_label": None,
        "failure_detail": None,
        "log_tail": [],
        "log_path": f"{args['engine']} logs {args['container']}",
    }
    if state == "healthy":
        for path in ("/server_info", "/get_server_info"):
            status, body = exec_get(args, args["host"], args["port"], path, timeout=10)
            if status == 200:
                try:
                    out["server_info"], out["server_info_endpoint"] = json.loads(body), path
                except ValueError:
                    pass
                break
            if status != 404:
                break
        write_atomic(
            os.path.join(state_dir(args), "last-good.json"),
            json.dumps(
                {
                    "profile": args.get("profile"),
                    "command": st["command"],
                    "id": st["id"],
                    "image": st["image"],
                    "at": time.time(),
                }
            ),
        )
    else:
        # do not leave a half-started server behind
        if state == "timeout" or hung:
            engine(
                args,
                "stop",
                "-t",
                str(int(args["grace_s"])),
                args["container"],
                timeout=float(args["grace_s"]) + 60,
            )
            out["container"] = state_of(inspect(args))
        since = logs(args, since=started["started_at"])
        out["log_tail"] = since[-int(args.get("tail", 30)) :]
        cls, label, evidence = classify(since)
        exit_code = out["container"]["exit_code"]
        out["failure"] = cls or ("timeout" if state == "timeout" else "died")
        out["failure_label"] = label or (
            f"no /health within {float(args['timeout_s']):g}s"
            if state == "timeout"
            else f"the container exited ({exit_code})"
        )
        out["failure_detail"] = evidence
    record(
        args,
        {
            "shape": "entrypoint",
            "profile": args.get("profile"),
            "state": state,
            "failure": out["failure"],
            "waited_s": out["waited_s"],
            "container": st["id"],
            "image": st["image"],
            "operator": args.get("operator"),
        },
    )
    return out


def status(args):
    doc = inspect(args)
    st = state_of(doc)
    cmd = st["command"]
    host, port = (
        flag_value(cmd, "--host", "127.0.0.1"),
        int(args.get("port") or flag_value(cmd, "--port", 30000)),
    )
    out = {
        "container": st,
        "health": None,
        "server_info": None,
        "port": port,
        "host": host,
        "log_tail": logs(args, tail_n=int(args.get("tail", 20))) if args.get("tail") else [],
        "restarts": records(args),
        "log_path": f"{args['engine']} logs {args['container']}",
    }
    if st["running"]:
        out["health"], _ = exec_get(args, host, port, "/health", timeout=3)
        if out["health"] is not None:
            status_code, body = exec_get(args, host, port, "/server_info", timeout=10)
            if status_code == 200:
                try:
                    out["server_info"] = json.loads(body)
                except ValueError:
                    pass
    if args.get("follow_s"):
        for ln in out["log_tail"]:
            progress(line=ln)
        follow(args, float(args["follow_s"]))
    return out


def follow(args, seconds):
    """Stream the container's new log lines for `seconds` (each a progress report)."""
    proc = subprocess.Popen(
        [args["engine"], "logs", "-f", "--since", "0s", args["container"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    end = time.monotonic() + seconds
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        pending = b""
        while time.monotonic() < end and proc.poll() is None:
            chunk = proc.stdout.read() or b""
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for ln in lines:
                progress(line=ln.decode(errors="replace"))
            if not chunk:
                time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()


def stop(args):
    before = state_of(inspect(args))
    if not before["running"]:
        return {"stopped": False, "container": before}
    t0 = time.monotonic()
    code, _, err = engine(
        args, "stop", "-t", str(int(args["grace_s"])), args["container"], timeout=float(args["grace_s"]) + 60
    )
    if code != 0:
        raise UserError(
            f"{args['engine']} stop {args['container']} failed: "
            f"{(err.strip().splitlines() or ['no output'])[-1][:200]}"
        )
    after = state_of(inspect(args))
    record(
        args,
        {
            "shape": "entrypoint",
            "state": "stopped",
            "container": after["id"],
            "operator": args.get("operator"),
        },
    )
    return {"stopped": True, "container": after, "took_s": round(time.monotonic() - t0, 3)}


def main(args):
    action = args["action"]
    if action == "status" or args.get("plan"):
        # read-only: no lock, nothing written
        return status(args) if action == "status" else restart(args)
    lock = locked(args)
    try:
        return {"restart": restart, "stop": stop}[action](args)
    finally:
        lock.close()
