# The host's own server as the bench client finds it, over HTTP on loopback (sglops/host/_fetch.py): healthy
# or not, its launch arguments and model, the patches applied to its tree, and whether it went down or
# changed.
import http.client
import json
import os
import socket
import time

from . import _fetch
from ._common import UserError, sglops_dir, sha256_file, tree_path
from ._engine_here import serving_server
from ._fetch import LOOPBACK
from ._server_engine import engine_config
from ._server_info import kept_fields
from ._server_proc import death_cause, listening_pid
from .server_common import read_since

# the Authorization header the server's own --api-key asks for (set once per run: bench_client)
AUTH = {}


def get(port, path, timeout=10, limit=_fetch.ANSWER_MAX):
    """(status, body) of a GET: the whole answer within `timeout` seconds and `limit` bytes."""
    return _fetch.get(port, path, timeout=timeout, limit=limit, headers=AUTH)


def check_health(port):
    """The server must answer /health with 200 before anything is measured."""
    try:
        status, body = get(port, "/health")
    except ConnectionRefusedError:
        raise UserError(
            f"no server on {LOOPBACK}:{port} (connection refused); start it or pass --port"
        ) from None
    except (TimeoutError, socket.timeout):  # noqa: UP041 (python 3.8: socket.timeout is no TimeoutError)
        raise UserError(f"server on {LOOPBACK}:{port} did not answer /health within 10 s") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise UserError(f"server on {LOOPBACK}:{port} is unreachable: {exc or type(exc).__name__}") from None
    if status != 200:
        detail = body.decode(errors="replace").strip().splitlines()[:1]
        why = f" ({detail[0][:120]})" if detail else ""
        raise UserError(f"server on {LOOPBACK}:{port} is not healthy: /health answered HTTP {status}{why}")


def serving(args, port):
    """The server on port as sglops knows its engine (host/_engine_here.serving_server) when that engine is
    not the default one and it runs; None otherwise (the default engine's, or a server nothing describes)."""
    if len(args.get("engines") or []) < 2:
        return None
    found = serving_server({**args, "port": port})
    return found if found and (found.get("proc") or {}).get("pid") and found["port"] == port else None


def bench_api(args, found):
    """The API asked (--api), else the serving engine's own (vLLM serves no /generate), else the default
    engine's."""
    if args.get("api"):
        return args["api"]
    engines = args.get("engines") or [{}]
    return (found or {}).get("spec", {}).get("bench_api") or engines[0].get("bench_api") or "sglang"


def _get_json(port, path):
    try:
        status, body = get(port, path, limit=_fetch.INFO_MAX)
        return json.loads(body) if status == 200 else None
    except (OSError, ValueError, RecursionError, http.client.HTTPException):
        return None


def server_info(port, found=None):
    """The effective launch arguments: SGLang's /server_info (older /get_server_info); for an engine that
    keeps none (`found`: serving()), what its start-up log and endpoints say (engine_config); None when
    nothing says."""
    if found and not found["spec"].get("info_paths"):
        lines = read_since(found["log"], int(found.get("log_offset") or 0)) if found.get("log") else []
        return kept_fields(engine_config(found["spec"], lambda path: _get_json(port, path), lines))
    for path in ("/server_info", "/get_server_info"):
        doc = _get_json(port, path)
        if doc is not None:
            return kept_fields(doc)
    return None


def served_model(port, info):
    if info:
        for key in ("served_model_name", "model_path"):
            if isinstance(info.get(key), str) and info[key]:
                return info[key]
    try:
        status, body = get(port, "/v1/models")
        if status == 200:
            data = json.loads(body).get("data") or []
            if data and isinstance(data[0].get("id"), str):
                return data[0]["id"]
    except (OSError, ValueError, AttributeError, RecursionError, http.client.HTTPException):
        pass
    return "default"


def applied_patches(root):
    """Patches from the ledger, each file's current hash checked against the hash recorded after applying."""
    if not root:
        return []
    path = os.path.join(sglops_dir(root, create=False), "applied.json")
    try:
        with open(path) as fh:
            ledger = json.load(fh)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise UserError(f"patch ledger {path} is unreadable: {exc}") from None
    out = []
    for entry in ledger.get("applied") or []:
        entry = dict(entry)
        files = entry.get("files") or {}
        intact = True
        for rel, hashes in files.items():
            # installed trees lack python/
            full = rel if os.path.isabs(rel) else tree_path(root, rel)
            now = sha256_file(full)
            if isinstance(hashes, dict) and hashes.get("after") and now != hashes.get("after"):
                intact = False
        entry["intact"] = intact
        out.append(entry)
    return out


def _health(port):
    """(state, what /health said): ok, died (nothing listens)
    or unhealthy (answers, but not 200, or hangs)."""
    try:
        status, _ = get(port, "/health", timeout=5)
        if status == 200:
            return "ok", "HTTP 200"
        return "unhealthy", f"/health answered HTTP {status}"
    except ConnectionRefusedError:
        return "died", "connection refused"
    except TimeoutError:
        return "unhealthy", "/health did not answer within 5 s"
    except (OSError, http.client.HTTPException) as exc:
        # a server going down resets connections before it stops listening
        return "going", type(exc).__name__


def server_down(port, proc, log_mark):
    """None while /health answers 200; else what happened: died (with the cause from its log) or unhealthy."""
    state, health = _health(port)
    # a server on its way down: ask again until it is gone or back
    for _ in range(6):
        if state != "going":
            break
        time.sleep(0.5)
        state, health = _health(port)
    if state == "ok":
        return None
    if state == "going":
        state = "died"
    if proc and proc.get("pid") and not os.path.exists(f"/proc/{proc['pid']}"):
        state = "died"
    log = (proc or {}).get("log")
    if state == "died" and log:
        # the launcher writes the scheduler's traceback as it goes down
        time.sleep(0.5)
    return {
        "state": state,
        "health": health,
        "pid": (proc or {}).get("pid"),
        "log": log,
        "cause": death_cause(log, log_mark) if log else None,
    }


def down_line(port, down):
    what = "died" if down["state"] == "died" else "stopped answering"
    if down.get("cause"):
        cause = f": {down['cause']}"
    elif down.get("log") and down["state"] == "died":
        cause = ": no error in its log since the run began (killed by a signal? out of memory?)"
    else:
        cause = ""
    where = (
        f"log: {down['log']}"
        if down.get("log")
        else "its log is unknown (not started by sglops, stdout not a file)"
    )
    return f"the server on {LOOPBACK}:{port} {what} ({down['health']}){cause}; {where}"


# live state, not configuration
_VOLATILE = {"last_gen_throughput", "status", "internal_states"}


def config_changed(port, before, proc, found=None):
    """After measuring: did another server (or another configuration) answer than the one recorded before?
    A restart mid-run mixes two servers in one figure. Returns what differs, or None."""
    out = []
    after = server_info(port, found)
    if before is not None and after is not None:
        for key in sorted(set(before) | set(after)):
            if key not in _VOLATILE and before.get(key) != after.get(key):
                out.append(f"{key} {str(before.get(key))[:60]} -> {str(after.get(key))[:60]}")
    now = listening_pid(port) if proc and proc.get("pid") else None
    if now and now != proc["pid"]:
        out.insert(0, f"server pid {proc['pid']} -> {now}")
    return out or None
