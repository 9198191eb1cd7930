# Which engine serves on this host, and where its tree is: for the commands that name no engine (facts, probe-
# backends, profile). The engine is the one sglops started here (server.json, else the last healthy start's
# launch.last-good.json), else the one whose launch module the process on the server port runs; its tree is
# found through that server's python. Names no engine: the specs come from the laptop (sglops.engine:
# host_spec()).
import json
import os
import re

from ._common import UserError, server_port, sglops_dir, try_find_sglang
from ._server_engine import find_tree
from ._server_proc import server_process


def _read(path):
    try:
        with open(path) as fh:
            doc = json.load(fh)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def state_root(sglang_root, engines, python=None):
    """The tree whose state folder holds this host's server: the inventory's tree, else the first engine's
    tree the python finds (server_inspect's rule, so every command meets the same server)."""
    found, why = try_find_sglang(sglang_root)
    if found:
        return found["root"]
    for spec in engines[1:]:
        try:
            return find_tree(spec, None, python)["root"]
        except UserError:
            continue
    return None


def _script_python(script_path, spec):
    """The python a launch script starts the engine's module with (`PY -m <launch_module>`), or None."""
    try:
        with open(script_path) as fh:
            text = fh.read()
    except OSError:
        return None
    m = re.search(r"(\S+)\s+-m\s+" + re.escape(spec["launch_module"]) + r"\b", text)
    return m.group(1).strip("'\"") if m else None


def serving_engine(args):
    """{spec, tree, python, port, port_from, proc, root, source} of the host's server when its engine is not
    the default one (engines[0]); None when it is the default's (or no other engine is known here)."""
    found = serving_server(args)
    if found is None:
        return None
    found["tree"] = find_tree(found["spec"], None, found["python"])
    return found


def serving_server(args):
    """serving_engine's answer without the tree (nothing is run): what a bench needs to read the server."""
    engines = args.get("engines") or []
    if len(engines) < 2:
        return None
    root = state_root(args.get("sglang_root"), engines, args.get("python"))
    port, port_from = server_port(root, args.get("port"))
    proc = server_process(port, root)
    state = sglops_dir(root, create=False) if root else None
    rec = _read(os.path.join(state, "server.json")) if state else {}
    good = _read(os.path.join(state, "launch.last-good.json")) if state else {}
    spec, source, script = None, None, None
    if proc and rec.get("engine_spec") and int(rec.get("port") or 0) == int(port):
        spec, source, script = rec["engine_spec"], "the server sglops started here", rec.get("script")
    elif proc and proc.get("argv"):
        spec = next((s for s in engines if s["launch_module"] in proc["argv"]), None)
        source = f"the process on port {port}" if spec else None
    if spec is None and good.get("engine_spec"):
        spec, source = good["engine_spec"], "the last server sglops started here (not running)"
        script = os.path.join(state, "launch.last-good.sh")
    if not spec or spec["name"] == engines[0]["name"]:
        return None
    # the laptop's spec of it is the newer
    spec = next((s for s in engines if s["name"] == spec["name"]), spec)
    python = (
        (proc or {}).get("python") or (_script_python(script, spec) if script else None) or args.get("python")
    )
    return {
        "spec": spec,
        "python": python,
        "port": port,
        "port_from": port_from,
        "proc": proc,
        "root": root,
        "source": source,
        "host": rec.get("host") if rec.get("engine_spec") else None,
        "log": rec.get("log") or (proc or {}).get("log"),
        "log_offset": rec.get("log_offset") if rec.get("log") else 0,
    }


def platform(spec, tree, log_lines=None):
    """(platform, where it was read): the running server's start-up line, else the install's marks."""
    if spec.get("platform_log"):
        rx = re.compile(spec["platform_log"])
        for line in reversed(log_lines or []):
            m = rx.search(line)
            if m:
                return m.group(1), "the server's start-up log"
    said = f"{tree.get('version_source') or ''} {tree.get('version') or ''}".lower()
    for mark, name in spec.get("platform_marks") or []:
        if mark in said:
            return name, f"the install ({tree.get('version_source') or tree.get('version')})"
    if spec.get("platform_default"):
        return spec[
            "platform_default"
        ], f"the install (no platform mark in {tree.get('version_source') or 'it'})"
    return None, None
