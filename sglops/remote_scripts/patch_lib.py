# sglops: include _common
# Host side of sglops patches (stdlib only): the lock, the ledger and the journal that make an
# apply or revert all-or-nothing even if the SSH connection drops or the process is killed.
#
# Layout under <sglang_root>/.sglops/:
#   lock           flock'ed for the whole of every patch step (holder written inside)
#   applied.json   the ledger: {"applied": [entry, ...]}
#   journal.json   present only while a transaction is in flight (or was cut short)
#   txn/<id>/old/  the files as they were before the transaction (rollback copies)
#   backups/<patch>/<rel>  originals kept after an apply (what revert restores)
import fcntl as _fcntl
import json as _json
import shutil as _shutil
import signal as _signal
import time as _time

LEDGER = "applied.json"
JOURNAL = "journal.json"
STAGED_SUFFIX = ".sglops-new"


def state_dir(root):
    return sglops_dir(root)


def resolve(root, rel):
    """A patch path (relative to the checkout root) on this host; installed packages lack python/."""
    full = _os.path.join(root, rel)
    if not _os.path.exists(full) and rel.startswith("python/"):
        alt = _os.path.join(root, rel[len("python/"):])
        if _os.path.exists(alt):
            return alt
    return full


def say(**fields):
    """progress() that survives a dropped connection (stdout gone: EPIPE is ignored)."""
    try:
        progress(**fields)
    except (OSError, ValueError):
        pass


def shield():
    """Ignore hang-ups and broken pipes: a dropped SSH session must not stop us half-way."""
    for sig in (_signal.SIGHUP, _signal.SIGPIPE, _signal.SIGINT):
        _signal.signal(sig, _signal.SIG_IGN)


class Lock:
    """flock on .sglops/lock: two operators patching one tree are serialised, never interleaved."""

    def __init__(self, root, wait_s=30.0, who=""):
        self.path = _os.path.join(state_dir(root), "lock")
        self.wait_s, self.who = wait_s, who

    def __enter__(self):
        self.fh = open(self.path, "a+")
        deadline = _time.monotonic() + self.wait_s
        while True:
            try:
                _fcntl.flock(self.fh, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if _time.monotonic() > deadline:
                    self.fh.seek(0)
                    holder = self.fh.read().strip() or "another process"
                    self.fh.close()
                    raise UserError("the patch lock " + self.path + " is held by " + holder
                                    + " (waited " + str(int(self.wait_s)) + " s); try again when it is done") from None
                _time.sleep(0.1)
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write("pid " + str(_os.getpid()) + " " + self.who + " since "
                      + _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()) + "\n")
        self.fh.flush()
        return self

    def __exit__(self, *exc):
        try:
            self.fh.truncate(0)
        finally:
            _fcntl.flock(self.fh, _fcntl.LOCK_UN)
            self.fh.close()


def read_json(path, default):
    try:
        with open(path) as fh:
            return _json.load(fh)
    except FileNotFoundError:
        return default
    except ValueError as exc:
        raise UserError(path + " is not valid JSON (" + str(exc) + "); fix or move it aside") from None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        _json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        _os.fsync(fh.fileno())
    _os.replace(tmp, path)
    fsync_dir(_os.path.dirname(path))


def fsync_dir(path):
    try:
        fd = _os.open(path, _os.O_RDONLY)
        try:
            _os.fsync(fd)
        finally:
            _os.close(fd)
    except OSError:
        pass


def ledger(root):
    return read_json(_os.path.join(state_dir(root), LEDGER), {"applied": []})


def copy_atomic(src, dst):
    """Copy src over dst through a temp file and a rename (keeps src's mode)."""
    _os.makedirs(_os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".sglops-tmp"
    _shutil.copy2(src, tmp)
    _os.replace(tmp, dst)


def rollback(root, journal):
    """Put every file of an unfinished transaction back as it was, and the ledger too."""
    restored = []
    for rel, f in journal["files"].items():
        path = resolve(root, rel)
        cur = sha256_file(path)
        if cur != f["before"]:
            if f["before"] is None:
                _os.remove(path)
            else:
                copy_atomic(f["old_copy"], path)
            restored.append(rel)
        staged = path + STAGED_SUFFIX
        if _os.path.exists(staged):
            _os.remove(staged)
    write_json(_os.path.join(state_dir(root), LEDGER), journal["ledger_before"])
    return restored


def finish(root, journal):
    """After the commit point: keep the originals as the patch's backups, drop the journal."""
    d = state_dir(root)
    txn_dir = _os.path.join(d, "txn", journal["id"])
    if journal["op"] == "apply":
        dest = _os.path.join(d, "backups", journal["patch"])
        if _os.path.exists(dest):
            _shutil.rmtree(dest)
        _os.makedirs(_os.path.dirname(dest), exist_ok=True)
        if _os.path.exists(_os.path.join(txn_dir, "old")):
            _os.replace(_os.path.join(txn_dir, "old"), dest)
    elif journal["op"] == "revert":
        _shutil.rmtree(_os.path.join(d, "backups", journal["patch"]), ignore_errors=True)
    _shutil.rmtree(txn_dir, ignore_errors=True)
    try:
        _os.remove(_os.path.join(d, JOURNAL))
    except FileNotFoundError:
        pass
    fsync_dir(d)


def recover(root):
    """Finish (after the commit point) or roll back (before it) a transaction cut short."""
    path = _os.path.join(state_dir(root), JOURNAL)
    journal = read_json(path, None)
    if journal is None:
        return None
    if journal.get("state") == "committed":
        finish(root, journal)
        return {"op": journal["op"], "patch": journal["patch"], "outcome": "finished"}
    restored = rollback(root, journal)
    _shutil.rmtree(_os.path.join(state_dir(root), "txn", journal["id"]), ignore_errors=True)
    _os.remove(path)
    return {"op": journal["op"], "patch": journal["patch"], "outcome": "rolled back", "restored": restored}


def sglang_root(hint):
    info = find_sglang(hint)
    return info["root"], info
