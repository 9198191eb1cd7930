# Helpers shared by the remote scripts (prepended to them; standard library only).
import hashlib as _hashlib
import os as _os
import re as _re
import subprocess as _subprocess
import sys as _sys


def progress(**fields):
    """Report progress to the laptop while the script runs (shown as a progress bar there)."""
    import json as _json

    _sys.stdout.write("@@SGLOPS-PROGRESS@@" + _json.dumps(fields) + "\n")
    _sys.stdout.flush()


class UserError(Exception):
    """Something the operator can fix; shown as one line."""


def sh(argv, cwd=None, timeout=30, input=None):
    """Run argv without a shell: (exit code, stdout, stderr); a missing program is 127."""
    try:
        p = _subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=input)
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError:
        return 127, "", argv[0] + ": not found"
    except _subprocess.TimeoutExpired:
        return 124, "", " ".join(argv) + ": timed out"


def sha256_file(path):
    h = _hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def http(url, body=None, timeout=2.0):
    """(status, body text) of a GET, or of a JSON POST when body is given, to the host's own server;
    (None, error) when nothing answers. HTTP errors are answers too (their status and body)."""
    import json as _json
    import urllib.error
    import urllib.request

    data = None if body is None else _json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={} if body is None else {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (OSError, ValueError) as exc:
        return None, str(getattr(exc, "reason", exc))


def sglops_dir(root, create=True):
    """<root>/.sglops: sglops' state on the host (ledger, lock, backups, server and kernel records).

    Created with a .gitignore of `*`, so the SGLang checkout's `git status` stays clean. With
    create=False nothing is made (dry runs and read-only inspections change nothing).
    """
    d = _os.path.join(root, ".sglops")
    if create and not _os.path.isdir(d):
        _os.makedirs(d, exist_ok=True)
        with open(_os.path.join(d, ".gitignore"), "w") as fh:
            fh.write("# sglops state on this host (not part of the SGLang tree)\n*\n")
    return d


def _expand(p):
    return _os.path.abspath(_os.path.expanduser(p))


_COMMON_CHECKOUTS = ["~/sglang", "/sgl-workspace/sglang", "/root/sglang", "/opt/sglang", "/workspace/sglang"]


def _package_dir_under(path):
    """Accept a checkout root, its python/ folder, the package folder, or a site-packages."""
    for cand in (path, _os.path.join(path, "python", "sglang"), _os.path.join(path, "sglang")):
        if _os.path.isfile(_os.path.join(cand, "srt", "server_args.py")) or (
            _os.path.basename(cand) == "sglang" and _os.path.isfile(_os.path.join(cand, "__init__.py"))
        ):
            return cand
    return None


def _read_version(pkg):
    """The release from _version.py, dist-info, pyproject or git, without importing sglang."""
    for name in ("_version.py", "version.py"):
        try:
            text = open(_os.path.join(pkg, name)).read()
        except OSError:
            continue
        m = _re.search(r"^(?:__version__|version)\s*(?::\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", text, _re.M)
        if m:
            return m.group(1)
    parent = _os.path.dirname(pkg)
    try:
        for entry in sorted(_os.listdir(parent)):
            if entry.startswith("sglang-") and entry.endswith(".dist-info"):
                return entry[len("sglang-"):-len(".dist-info")]
    except OSError:
        pass
    try:
        text = open(_os.path.join(parent, "pyproject.toml")).read()
        m = _re.search(r'^version\s*=\s*"([^"]+)"', text, _re.M)
        if m:
            return m.group(1)
    except OSError:
        pass
    rc, out, _ = sh(["git", "describe", "--tags", "--always"], cwd=pkg)
    return out.strip().lstrip("v") if rc == 0 and out.strip() else None


def _git_info(pkg):
    """Checkout root, commit, branch and dirty files: two git calls (rev-parse answers three questions)."""
    rc, out, _ = sh(["git", "rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD"], cwd=pkg)
    lines = out.split("\n")
    if rc != 0 or len(lines) < 3:
        return None
    top, commit, branch = (ln.strip() for ln in lines[:3])
    _, status, _ = sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=top)
    dirty = [ln[3:] for ln in status.splitlines() if ln.strip()]
    return {"root": top, "commit": commit or None, "branch": branch or None,
            "dirty": bool(dirty), "dirty_files": dirty[:50]}


def find_sglang(hint=None):
    """Where SGLang lives on this host: a git checkout or an installed package."""
    looked = []
    candidates = [hint] if hint else []
    if not hint:
        try:
            import importlib.util

            spec = importlib.util.find_spec("sglang")
            if spec and spec.submodule_search_locations:
                candidates.append(list(spec.submodule_search_locations)[0])
        except Exception:
            pass
        candidates += _COMMON_CHECKOUTS
    for cand in candidates:
        path = _expand(cand)
        looked.append(path)
        pkg = _package_dir_under(path)
        if pkg:
            git = _git_info(pkg)
            info = {"package_dir": pkg, "version": _read_version(pkg), "kind": "git" if git else "installed",
                    "root": git["root"] if git else _os.path.dirname(pkg), "commit": None, "branch": None,
                    "dirty": False, "dirty_files": []}
            if git:
                info.update(git)
            return info
    where = ", ".join(looked) if looked else "nowhere"
    how = "set sglang_root for this host in playbooks/hosts.yaml or pass --sglang-root PATH"
    if hint:
        raise UserError("SGLang not found at " + where + " (no sglang/srt/server_args.py there); " + how)
    raise UserError("SGLang not found: looked in the host python's packages and " + where + "; " + how)


def try_find_sglang(hint=None):
    """(info, None) or (None, the one-line reason): for steps that still answer without SGLang."""
    try:
        return find_sglang(hint), None
    except UserError as exc:
        return None, str(exc)


DEFAULT_SERVER_PORT = 30000


def server_port(root, given=None):
    """(port, where it came from): --port wins, then the server sglops started here (.sglops/server.json),
    then SGLang's default."""
    import json as _json

    if given:
        return int(given), "--port"
    try:
        with open(_os.path.join(root, ".sglops", "server.json")) as fh:
            port = _json.load(fh).get("port") if root else None
    except (OSError, ValueError, TypeError):
        port = None
    if port:
        return int(port), ".sglops/server.json"
    return DEFAULT_SERVER_PORT, "default"


def python_info():
    return {"executable": _sys.executable, "version": ".".join(map(str, _sys.version_info[:3]))}


_LISTINGS = {}


def _listing(path):
    if path not in _LISTINGS:
        try:
            _LISTINGS[path] = _os.listdir(path)
        except OSError:
            _LISTINGS[path] = []
    return _LISTINGS[path]


def dist_version(name, import_name=None):
    """An installed distribution's version and package folder, found on sys.path without importing
    it (nor importlib.metadata, which costs more than the lookup itself)."""
    dist = _re.sub(r"[-_.]+", "_", name).lower()
    module = import_name or dist.split("_python")[0]
    version = location = None
    for entry in _sys.path:
        entry = entry or _os.getcwd()
        for item in _listing(entry):
            if version is None and item.endswith(".dist-info"):
                stem = item[: -len(".dist-info")]
                dname, _, ver = stem.rpartition("-")
                if _re.sub(r"[-_.]+", "_", dname).lower() == dist:
                    version = ver
            if location is None and item == module and _os.path.isdir(_os.path.join(entry, item)):
                location = _os.path.join(entry, item)
        if version and location:
            break
    return {"version": version, "location": location} if (version or location) else None


def parallel(*calls):
    """Run independent zero-argument calls at once (most are waits on subprocesses)."""
    import threading

    results = [None] * len(calls)

    def run(i, fn):
        results[i] = fn()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def container_identity():
    """{'id', 'image'} of the container this step runs in (sglops passes it with `docker exec -e`), else None."""
    parts = _os.environ.get("SGLOPS_CONTAINER", "").split()
    return {"id": parts[0], "image": parts[1]} if len(parts) == 2 else None
