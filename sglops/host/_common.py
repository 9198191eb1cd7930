# Helpers shared by the remote scripts (imported by them: `from ._common import sh`; standard library only).
import hashlib
import os
import re
import subprocess
import sys

# Read-only steps stay read-only: `git status` must not refresh (write) the tree's index.
os.environ.setdefault("GIT_OPTIONAL_LOCKS", "0")


def progress(**fields):
    """Report progress to the laptop while the script runs (shown as a progress bar there)."""
    import json

    sys.stdout.write("@@SGLOPS-PROGRESS@@" + json.dumps(fields) + "\n")
    sys.stdout.flush()


class UserError(Exception):
    """Something the operator can fix; shown as one line."""


def sh(argv, cwd=None, timeout=30, input=None):
    """Run argv without a shell: (exit code, stdout, stderr); a missing program is 127."""
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=input)
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError:
        return 127, "", argv[0] + ": not found"
    except subprocess.TimeoutExpired:
        return 124, "", " ".join(argv) + ": timed out"


def tree_path(root, rel):
    """A patch path (relative to a checkout root, python/sglang/...)
    on this host: installed packages lack python/."""
    full = os.path.join(root, rel)
    if not os.path.exists(full) and rel.startswith("python/"):
        alt = os.path.join(root, rel[len("python/") :])
        if os.path.exists(alt):
            return alt
    return full


def sha256_file(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def http(url, body=None, timeout=2.0, headers=None, limit=64 << 20):
    """(status, body text) of a GET, or of a JSON POST when body is given, to the host's own server;
    (None, error) when nothing answers, or an answer is cut short (a server dying mid-response: http.client's
    IncompleteRead / RemoteDisconnected are not OSErrors). HTTP errors are answers too (their status and
    body). `timeout` bounds the WHOLE request (a server that trickles a byte at a time, or keeps the body
    open, ends there too: the request runs in a daemon thread this call stops waiting for); an answer over
    `limit` bytes is cut there and said."""
    import threading

    out = [(None, f"no complete answer from {url} within {timeout:g} s")]

    def ask():
        out[0] = _http_once(url, body, timeout, headers, limit)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(timeout)
    return out[0]


def _http_once(url, body, timeout, headers, limit):
    import json
    import urllib.error
    import urllib.request
    from http.client import HTTPException

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={**({} if body is None else {"Content-Type": "application/json"}), **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            got = resp.read(limit + 1)
            if len(got) > limit:
                return None, f"answer from {url} over {limit} bytes"
            return resp.status, got.decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(limit).decode(errors="replace")
    except (OSError, ValueError, HTTPException) as exc:
        return None, str(getattr(exc, "reason", exc)) or type(exc).__name__


# state holds launch scripts with env secrets (HF_TOKEN, API keys): owner only
PRIVATE_DIR = 0o700
# ledger, journal, logs, records
PRIVATE_FILE = 0o600
# launch scripts
PRIVATE_SCRIPT = 0o700


def is_checkout(root):
    """A git checkout (its .git is a folder, or a file in a worktree): its state may live inside it."""
    return bool(root) and os.path.exists(os.path.join(root, ".git"))


def user_state_dir(root):
    """Per-user state for a tree that is not a checkout (a pip-installed site-packages, a read-only copy):
    $XDG_STATE_HOME/sglops/<tree-id> (default ~/.local/state/sglops/<tree-id>), the id readable and unique."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    real = os.path.realpath(root)
    slug = ""
    for part in reversed([re.sub(r"[^A-Za-z0-9.]+", "-", p).strip("-") for p in real.split(os.sep) if p]):
        if slug and len(part) + len(slug) > 48:
            break
        slug = part + ("-" + slug if slug else "")
    slug = slug[-48:].lstrip("-") or "root"
    return os.path.join(base, "sglops", slug + "-" + hashlib.sha256(real.encode()).hexdigest()[:10])


def sglops_dir(root, create=True):
    """sglops' state on the host for this tree (ledger, lock, backups, server and kernel records).

    A git checkout keeps it in <root>/.sglops, made with a .gitignore of `*` so `git status` stays clean.
    Any other tree (a pip-installed site-packages) keeps it in a per-user state folder (user_state_dir):
    nothing is written inside an installed package. Either is made 0700, and tightened to 0700 when found
    looser (it holds launch scripts with secrets). With create=False nothing is made or changed (dry runs
    and read-only inspections change nothing).
    """
    if not is_checkout(root):
        d = user_state_dir(root)
        if create and not os.path.isdir(d):
            os.makedirs(d, mode=PRIVATE_DIR, exist_ok=True)
            with open_private(os.path.join(d, "tree"), "w") as fh:
                fh.write(os.path.realpath(root) + "\n")
        if create and os.stat(d).st_mode & 0o777 != PRIVATE_DIR:
            os.chmod(d, PRIVATE_DIR)
        return d
    d = os.path.join(root, ".sglops")
    if not create:
        return d
    try:
        st = os.stat(d)
    except FileNotFoundError:
        try:
            os.mkdir(d, PRIVATE_DIR)
        except FileExistsError:
            pass
        with open_private(os.path.join(d, ".gitignore"), "w") as fh:
            fh.write("# sglops state on this host (not part of the SGLang tree)\n*\n")
        st = os.stat(d)
    if st.st_mode & 0o777 != PRIVATE_DIR:
        os.chmod(d, PRIVATE_DIR)
    return d


def open_private(path, mode="w", perm=PRIVATE_FILE):
    """open() for a file only its owner may read: created with perm, tightened if found looser."""
    flags = {
        "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
        "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        "a+": os.O_RDWR | os.O_CREAT | os.O_APPEND,
    }[mode.replace("b", "")]
    fd = os.open(path, flags, perm)
    try:
        if os.fstat(fd).st_mode & 0o777 != perm:
            os.fchmod(fd, perm)
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def _expand(p):
    return os.path.abspath(os.path.expanduser(p))


_COMMON_CHECKOUTS = ["~/sglang", "/sgl-workspace/sglang", "/root/sglang", "/opt/sglang", "/workspace/sglang"]


def _package_dir_under(path):
    """Accept a checkout root, its python/ folder, the package folder, or a site-packages."""
    for cand in (path, os.path.join(path, "python", "sglang"), os.path.join(path, "sglang")):
        if os.path.isfile(os.path.join(cand, "srt", "server_args.py")) or (
            os.path.basename(cand) == "sglang" and os.path.isfile(os.path.join(cand, "__init__.py"))
        ):
            return cand
    return None


# A version file's own top-level assignment: setuptools-scm / vcs-versioning write
# `__version__ = version = '0.5.15'` (before setuptools-scm 7: `version = '0.5.15'`), hand-kept files
# `__version__ = "0.4.10"`, annotated ones `__version__: str = "..."`. Only column 0 counts:
# assignments inside try/except are fallbacks (`"0.0.0.dev0"`), not the release.
_VERSION_LINE = re.compile(
    r"^(?:__version__|version)\s*(?::[^=\n]*)?=\s*(?:\w+\s*=\s*)*(['\"])([^'\"\n]+)\1\s*(?:#.*)?$", re.M
)
_COMMIT_LINE = re.compile(
    r"^(?:__commit_id__|__git_commit__)\s*(?::[^=\n]*)?=\s*(?:\w+\s*=\s*)*(['\"])([^'\"\n]+)\1", re.M
)
# Generated at build time first (they say what was built), then the hand-kept version.py.
_VERSION_FILES = ("_version.py", "_build_meta.py", "version.py")


def version_from_files(pkg):
    """(version, source, build commit) from the package's own version file, or (None, None, None)."""
    for name in _VERSION_FILES:
        try:
            with open(os.path.join(pkg, name), errors="replace") as fh:
                text = fh.read(65536)
        except OSError:
            continue
        m = _VERSION_LINE.search(text)
        if m:
            c = _COMMIT_LINE.search(text)
            return m.group(2), os.path.basename(pkg) + "/" + name, c.group(2) if c else None
    return None, None, None


def _norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def version_from_metadata(site, dists):
    """(version, source) from the `Version:` header of the dist-info METADATA in SITE of one of DISTS
    (names the distribution had), what importlib.metadata reads, else the dist-info folder's name;
    (None, None) without one. With several dist-info folders (a botched upgrade), the newest, said so."""
    want = {_norm(d) for d in dists}
    found = [
        e for e in _listing(site) if e.endswith(".dist-info") and _norm(e[:-10].rpartition("-")[0]) in want
    ]
    if not found:
        return None, None
    if len(found) > 1:
        found.sort(key=lambda e: os.stat(os.path.join(site, e)).st_mtime)
    info = found[-1]
    note = f" (newest of {len(found)} dist-info folders)" if len(found) > 1 else ""
    try:
        with open(os.path.join(site, info, "METADATA"), errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    # end of the headers
                    break
                if line.lower().startswith("version:"):
                    return line.split(":", 1)[1].strip(), info + "/METADATA" + note
    except OSError:
        pass
    return info[:-10].rpartition("-")[2], info + " (folder name)" + note


_DESCRIBE = ["git", "describe", "--tags", "--long", "--match", "v[0-9]*", "--match", "[0-9]*"]


def version_from_describe(out):
    """What `git describe --tags --long` says: {"version", "source", "tag", "commits_after_tag"} or None.

    On a release tag the version is the tag's (v0.5.15 -> 0.5.15); N commits after it, git's own
    words (0.5.15-3-gabc1234), so no variant made for the release is taken as an exact match.
    """
    m = re.match(r"^(.+)-(\d+)-g([0-9a-f]+)$", out.strip())
    if not m:
        return None
    tag, after = m.group(1), int(m.group(2))
    base = tag[1:] if tag[:1] in "vV" else tag
    if after == 0:
        return {"version": base, "source": "git tag " + tag, "tag": tag, "commits_after_tag": 0}
    return {
        "version": f"{base}-{after}-g{m.group(3)}",
        "source": f"git describe: {after} commit{'' if after == 1 else 's'} after tag {tag}",
        "tag": tag,
        "commits_after_tag": after,
    }


def package_version(pkg, dists, describe=None):
    """The release of the package at PKG and where it came from, in order of trust.

    A git checkout: its release tag (`git describe`, already run: DESCRIBE is its output), since a
    version file cannot know the commits made after it was written; without a reachable tag
    (shallow clones), the version file. An installed package: its version file, then the
    dist-info METADATA beside it.
    """
    found = version_from_describe(describe) if describe else None
    file_version, file_source, build_commit = version_from_files(pkg)
    if found is None and file_version:
        found = {"version": file_version, "source": file_source}
    if found is None:
        version, source = version_from_metadata(os.path.dirname(pkg), dists)
        if version:
            found = {"version": version, "source": source}
    found = found or {"version": None, "source": "no version file, dist-info or release tag found"}
    info = {"version": found["version"], "version_source": found["source"]}
    for key in ("tag", "commits_after_tag"):
        if key in found:
            info[key] = found[key]
    if build_commit:
        info["build_commit"] = build_commit
    return info


def _git_info(pkg):
    """Checkout root, commit, branch, dirty files and `git describe`: rev-parse answers three questions in one
    call; only in a checkout, status and describe then run at once (describe hides behind status)."""
    rc, out, _ = sh(["git", "rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD"], cwd=pkg)
    lines = out.split("\n")
    if rc != 0 or len(lines) < 3:
        return None
    top, commit, branch = (ln.strip() for ln in lines[:3])
    (_, status, _), (drc, described, _) = parallel(
        lambda: sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=top),
        lambda: sh(_DESCRIBE, cwd=pkg),
    )
    dirty = [ln[3:] for ln in status.splitlines() if ln.strip()]
    return {
        "root": top,
        "commit": commit or None,
        "branch": branch or None,
        "dirty": bool(dirty),
        "dirty_files": dirty[:50],
        "describe": described.strip() if drc == 0 else None,
    }


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
            # a package in site-packages is an install even inside someone's git repo (a project's .venv):
            # that repo's commit and tags say nothing about SGLang
            installed = os.path.basename(os.path.dirname(pkg)) in ("site-packages", "dist-packages")
            git = None if installed else _git_info(pkg)
            info = {
                "package_dir": pkg,
                "kind": "git" if git else "installed",
                "root": git["root"] if git else os.path.dirname(pkg),
                "commit": None,
                "branch": None,
                "dirty": False,
                "dirty_files": [],
            }
            if git:
                describe = git.pop("describe")
                info.update(git)
            info.update(package_version(pkg, ("sglang",), describe if git else None))
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
    """(port, where it came from): --port wins, then the server sglops started here (its state's server.json),
    then SGLang's default."""
    import json

    if given:
        return int(given), "--port"
    port = None
    if root:
        try:
            with open(os.path.join(sglops_dir(root, create=False), "server.json")) as fh:
                port = json.load(fh).get("port")
        except (OSError, ValueError, AttributeError):
            port = None
    if port:
        return int(port), (".sglops/server.json" if is_checkout(root) else "server.json (sglops state)")
    return DEFAULT_SERVER_PORT, "default"


def python_info():
    return {"executable": sys.executable, "version": ".".join(map(str, sys.version_info[:3]))}


_LISTINGS = {}


def _listing(path):
    if path not in _LISTINGS:
        try:
            _LISTINGS[path] = os.listdir(path)
        except OSError:
            _LISTINGS[path] = []
    return _LISTINGS[path]


def dist_version(name, import_name=None, paths=None):
    """An installed distribution's version and package folder, found on sys.path (or on `paths`, another
    python's path) without importing it (nor importlib.metadata, which costs more than the lookup itself);
    the version is the dist-info folder's name (pip writes it from METADATA's Version)."""
    dist = _norm(name)
    module = import_name or dist.split("_python")[0]
    version = location = source = None
    for entry in sys.path if paths is None else paths:
        entry = entry or os.getcwd()
        for item in _listing(entry):
            if version is None and item.endswith(".dist-info"):
                stem = item[: -len(".dist-info")]
                dname, _, ver = stem.rpartition("-")
                if _norm(dname) == dist:
                    version, source = ver, item
            if location is None and item == module and os.path.isdir(os.path.join(entry, item)):
                location = os.path.join(entry, item)
        if version and location:
            break
    if not (version or location):
        return None
    return {"version": version, "version_source": source, "location": location}


def torch_info(paths=None):
    """torch's version WITH its local tag (2.11.0+cu130) and the CUDA it was built for, read from the
    package's own version.py without importing torch: some installers name the dist-info without the tag
    (2.11.0)."""
    info = dist_version("torch", paths=paths)
    if not info:
        return None
    try:
        with open(os.path.join(info["location"] or "", "version.py"), encoding="utf-8") as fh:
            text = fh.read(4096)
    except OSError:
        text = ""
    full = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    cuda = re.search(r"^cuda\s*(?::\s*[\w.\[\]]+\s*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    if full and (not info["version"] or full.group(1).startswith(info["version"])):
        info["version"], info["version_source"] = full.group(1), "torch/version.py"
    if cuda:
        info["cuda"] = cuda.group(1)
    elif "+cu" in (info["version"] or ""):
        info["cuda"] = info["version"].split("+cu")[1]
    return info


def flashinfer_info():
    """FlashInfer's version, where it came from, and its package folder; None when not installed.

    Its build writes flashinfer/_build_meta.py (`__version__`, `__git_commit__`), which version.py
    imports: that file first, then the dist-info METADATA beside the package.
    """
    found = dist_version("flashinfer-python", "flashinfer") or dist_version("flashinfer")
    if found and found["location"]:
        pkg = found["location"]
        info = package_version(pkg, ("flashinfer-python", "flashinfer"))
        if info["version"] is None and found["version"]:
            info.update(version=found["version"], version_source=found["version_source"] + " (on sys.path)")
        found = {**found, **info}
    return found


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
    """{'id', 'image'} of the container this step runs in
    (sglops passes it with `docker exec -e`), else None."""
    parts = os.environ.get("SGLOPS_CONTAINER", "").split()
    return {"id": parts[0], "image": parts[1]} if len(parts) == 2 else None
