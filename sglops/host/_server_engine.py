# Where a serving engine's tree is on this host and what its server says about itself, from the engine spec
# the laptop sends (sglops.engine: Engine.host_spec()); this side names no engine. A tree is found through the
# server's python (an installed package, found without importing it) or under a hint path.
import ast
import json
import os
import re
import subprocess
import sys

from ._common import UserError, package_version

_FIND = (
    "import importlib.util,json,sys;s=importlib.util.find_spec(sys.argv[1]);"
    "print(json.dumps(list(s.submodule_search_locations) if s and s.submodule_search_locations else None))"
)


def package_dirs(package, python=None):
    """Folders the given python finds the package in (not imported); [] when it has none."""
    # a venv's python is a link to the base interpreter: compare the paths as given, not where they lead
    if not python or os.path.abspath(python) == os.path.abspath(sys.executable):
        import importlib.util

        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            return []
        return list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    try:
        out = subprocess.run([python, "-c", _FIND, package], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    try:
        return (
            json.loads(out.stdout.strip().splitlines()[-1]) or []
            if out.returncode == 0 and out.stdout.strip()
            else []
        )
    except ValueError:
        return []


def find_tree(spec, hint=None, python=None):
    """{package_dir, kind, root, version, ...} of the engine's
    tree: under hint, else where its python finds it."""
    looked = []
    candidates = [hint] if hint else package_dirs(spec["package"], python)
    for cand in candidates:
        path = os.path.abspath(os.path.expanduser(cand))
        looked.append(path)
        for pkg in (path, os.path.join(path, spec["package"])):
            if os.path.isfile(os.path.join(pkg, spec["tree_marker"])):
                info = {
                    "package_dir": pkg,
                    "kind": "installed",
                    "root": os.path.dirname(pkg),
                    "commit": None,
                    "branch": None,
                    "dirty": False,
                    "dirty_files": [],
                }
                info.update(package_version(pkg, tuple(spec["dists"])))
                return info
    where = ", ".join(looked) or f"nowhere ({python or sys.executable} finds no {spec['package']} package)"
    raise UserError(f"{spec['title']} not found: looked in {where}; give the profile the server's `python`")


def _arg_logged(log_lines, pattern):
    """The last start-up line naming the arguments (a Python dict's text) as a dict; {} when none reads."""
    rx = re.compile(pattern)
    for line in reversed(log_lines):
        m = rx.search(line)
        if not m:
            continue
        try:
            value = ast.literal_eval(m.group(1))
            return value if isinstance(value, dict) else {}
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            return _literal_pairs(m.group(1))
    return {}


def _literal_pairs(text):
    """The `'key': literal` pairs of a dict's text whose values read as literals (others are left out)."""
    out = {}
    for m in re.finditer(r"'(\w+)': ('(?:[^'\\]|\\.)*'|-?[\d.e+]+|True|False|None)(?=, '|\}$)", text):
        try:
            out[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
    return out


def _with_version(info, spec, fetch_json):
    """info with the version the engine's version endpoint answers, where it has one; None when empty."""
    if spec.get("version_path"):
        doc = fetch_json(spec["version_path"])
        if isinstance(doc, dict) and isinstance(doc.get("version"), str):
            info["version"] = doc["version"]
    return info or None


def logged_info(spec, fetch_json, log_lines):
    """What an engine whose server keeps no /server_info says about itself: its start-up arguments line and
    its version endpoint. fetch_json(path) -> dict or None."""
    info = dict(_arg_logged(log_lines, spec["args_log"])) if spec.get("args_log") else {}
    return _with_version(info, spec, fetch_json)


_OPEN, _CLOSE = "([{", ")]}"


def _top_level(text):
    """`a=1, b=X(c=2, d=[3, 4]), e='f, g'` -> ["a=1", "b=X(c=2, d=[3, 4])", "e='f, g'"]: split at the commas
    outside brackets and quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _config_logged(log_lines, pattern):
    """The last resolved-config line (`key=value, ...`) as a dict: literal values as read (2048, True, None,
    'x'), others as their text (`torch.bfloat16`, `auto`, a nested config's repr); {} when none."""
    rx = re.compile(pattern)
    for line in reversed(log_lines):
        m = rx.search(line)
        if not m:
            continue
        out = {}
        for part in _top_level(m.group(1).rstrip().rstrip(",")):
            key, eq, value = part.partition("=")
            if not eq or not re.fullmatch(r"\w+", key.strip()):
                continue
            try:
                out[key.strip()] = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                out[key.strip()] = value.strip()
        return out
    return {}


def engine_config(spec, fetch_json, log_lines):
    """What a bench records as the configuration of a server that keeps no /server_info: its arguments line
    (the non-default ones), its resolved-config line (defaults included) and /v1/models' fields over it (what
    serves), its version; every key under the profile's name for it (spec["config_names"]). None when the
    server says nothing."""
    names = spec.get("config_names") or {}
    info = {}
    sources = [_arg_logged(log_lines, spec["args_log"]) if spec.get("args_log") else {}]
    sources.append(_config_logged(log_lines, spec["config_log"]) if spec.get("config_log") else {})
    if spec.get("model_fields"):
        doc = fetch_json("/v1/models")
        data = doc.get("data") if isinstance(doc, dict) else None
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        sources.append({k: first[k] for k in spec["model_fields"] if k in first})
    for source in sources:
        for key, value in source.items():
            info[names.get(key, key)] = value
    return _with_version(info, spec, fetch_json)
