# Host side of sglops patches (stdlib only): the lock, the ledger and the write-ahead journal that
# make an apply or revert all-or-nothing even if the SSH connection drops or the process is killed.
#
# Layout under <sglang_root>/.sglops/ (0700):
#   lock flock'ed for the whole of every mutating patch step (holder written inside)
#   applied.json the ledger: {"applied": [entry, ...]}
#   journal.json present only while a transaction is in flight (or was cut short)
#   txn/<id>/old/ the files as they were before the transaction (rollback copies)
#   backups/<patch>/<rel> originals kept after an apply (what revert restores)
#
# The journal protocol (a write-ahead log; every write is fsynced before the next step):
#   preparing the journal names every file it will create, before any is created
#   prepared originals copied to txn/<id>/old/, new contents staged as <file>.sglops-new
#   committed staged files renamed into place and the ledger written: THE COMMIT POINT
#   rolled-back (recovery only) the tree and the ledger are as before
# then the tail: backups kept (apply) or dropped (revert), txn/<id>/ removed, journal removed.
# Recovery (`recover`) rolls a journal in state committed wholly forward and any other wholly
# back; each of its steps checks before it acts, so a crash during recovery is recovered again.
import fcntl
import json
import os
import shutil
import signal
import time

from ._common import UserError, find_sglang, open_private, progress, sglops_dir, sha256_file, tree_path

LEDGER = "applied.json"
JOURNAL = "journal.json"
STAGED_SUFFIX = ".sglops-new"
COPY_SUFFIX = ".sglops-tmp"
FORWARD_STATES = ("committed",)

# Fault injection for the crash-point tests, set only in the HOST's environment (never by a flag):
# SGLOPS_CRASH_AT=<n or step name> SIGKILLs this process right after that durable step;
# SGLOPS_PAUSE_AT=<step name>:<seconds> sleeps there (to cut the connection meanwhile).
_CRASH_AT = os.environ.get("SGLOPS_CRASH_AT") or None
_PAUSE_AT = os.environ.get("SGLOPS_PAUSE_AT") or None
_STEPS = []


def step(name):
    """A durable step is done (the crash-point tests may stop the process here)."""
    if _CRASH_AT is None and _PAUSE_AT is None:
        return
    _STEPS.append(name)
    if _PAUSE_AT and _PAUSE_AT.rpartition(":")[0] == name:
        say(step="paused", at=name, pid=os.getpid())
        time.sleep(float(_PAUSE_AT.rpartition(":")[2]))
    if _CRASH_AT in (name, str(len(_STEPS))):
        say(crash_point=len(_STEPS), step=name)
        os.kill(os.getpid(), signal.SIGKILL)


def state_dir(root, create=True):
    return sglops_dir(root, create)


def say(**fields):
    """progress() that survives a dropped connection (stdout gone: EPIPE is ignored)."""
    try:
        progress(**fields)
    except (OSError, ValueError):
        pass


def shield():
    """Ignore hang-ups and broken pipes: a dropped SSH session must not stop us half-way."""
    for sig in (signal.SIGHUP, signal.SIGPIPE, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


class Lock:
    """flock on .sglops/lock: two operators patching one tree are serialised, never interleaved.

    Only mutating steps take it; read-only ones (status, dry runs) never do, nor create .sglops/.
    """

    def __init__(self, root, wait_s=30.0, who=""):
        self.path = os.path.join(state_dir(root), "lock")
        self.wait_s, self.who = wait_s, who

    def __enter__(self):
        self.fh = open_private(self.path, "a+")
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.fh.seek(0)
                    holder = self.fh.read().strip() or "another process"
                    self.fh.close()
                    raise UserError(
                        "the patch lock "
                        + self.path
                        + " is held by "
                        + holder
                        + " (waited "
                        + str(int(self.wait_s))
                        + " s); try again when it is done"
                    ) from None
                time.sleep(0.1)
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(
            "pid "
            + str(os.getpid())
            + " "
            + self.who
            + " since "
            + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            + "\n"
        )
        self.fh.flush()
        return self

    def __exit__(self, *exc):
        try:
            self.fh.truncate(0)
        finally:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()


def lock_holder(root):
    """The holder line of the patch lock if a process holds it now ("pid N <who> since T"), else None.

    Read-only: nothing is created; a shared flock that cannot be had means a transaction is live, so a journal
    seen meanwhile is in flight, not cut short (its helper outlives a dropped SSH session and finishes)."""
    path = os.path.join(state_dir(root, create=False), "lock")
    try:
        fh = open(path)
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return fh.read().strip() or "another process"
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def read_json(path, default):
    """The JSON at path, default when absent; a corrupt file is a one-line error, never `default`."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default
    except ValueError as exc:
        raise UserError(path + " is not valid JSON (" + str(exc) + "); fix or move it aside") from None


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path):
    try:
        fsync_file(path)
    except OSError:
        pass


def write_json(path, obj):
    """Replace path with obj durably: temp file, fsync, rename, fsync the folder (0600)."""
    tmp = path + ".tmp"
    with open_private(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def ledger(root):
    return read_json(os.path.join(state_dir(root, create=False), LEDGER), {"applied": []})


def copy_durable(src, dst):
    """Copy src to dst (mode kept) and fsync it."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst)
    fsync_file(dst)


def copy_atomic(src, dst):
    """Copy src over dst through a temp file and a rename (keeps src's mode)."""
    tmp = dst + COPY_SUFFIX
    copy_durable(src, tmp)
    os.replace(tmp, dst)


def remove(path):
    """Remove a file or a folder if it is there (idempotent)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


# -- the journal -------------------------------------------------------------------------------
def journal_path(root):
    return os.path.join(state_dir(root, create=False), JOURNAL)


def txn_dir(root, txn_id):
    return os.path.join(state_dir(root, create=False), "txn", txn_id)


def pending(root):
    """The journal of a transaction cut short, or None (read-only: no lock, nothing created)."""
    return read_json(journal_path(root), None)


def _file_paths(root, rel, f):
    path = f.get("path") or tree_path(root, rel)
    return path, f.get("staged") or path + STAGED_SUFFIX


def will(journal):
    return "roll forward" if journal.get("state") in FORWARD_STATES else "roll back"


def summary(journal, live=None):
    """What `inv patches` and dry runs say about a pending journal (`live`: the lock holder while it runs)."""
    return {
        "op": journal.get("op"),
        "patch": journal.get("patch"),
        "txn": journal.get("id"),
        "state": journal.get("state"),
        "will": will(journal),
        "files": sorted(journal.get("files", {})),
        "live": live,
    }


def set_state(root, journal, state):
    journal["state"] = state
    write_json(journal_path(root), journal)
    step(state)


def _roll_back(root, journal):
    """Every file and the ledger as before the transaction; idempotent (checks before it acts)."""
    restored = []
    if journal.get("state") != "rolled-back":
        for rel, f in journal["files"].items():
            path, staged = _file_paths(root, rel, f)
            if sha256_file(path) != f["before"]:
                if f["before"] is None:
                    remove(path)
                else:
                    if sha256_file(f["old_copy"]) != f["before"]:
                        raise UserError(
                            "cannot roll back "
                            + journal["op"]
                            + " of "
                            + journal["patch"]
                            + ": the copy of "
                            + rel
                            + " in "
                            + f["old_copy"]
                            + " is missing or altered; the journal "
                            + journal_path(root)
                            + " is left for a person to look at"
                        )
                    copy_atomic(f["old_copy"], path)
                restored.append(rel)
            remove(staged)
            remove(path + COPY_SUFFIX)
        fsync_dirs(root, journal)
        ledger_path = os.path.join(state_dir(root), LEDGER)
        if read_json(ledger_path, {"applied": []}) != journal["ledger_before"]:
            write_json(ledger_path, journal["ledger_before"])
        set_state(root, journal, "rolled-back")
    return restored


def _keep_or_drop_backups(root, journal):
    """After the commit point: an apply keeps the originals as the patch's backups, a revert drops them.
    Idempotent: the originals are moved only while txn/<id>/old/ still exists."""
    d = state_dir(root)
    dest = os.path.join(d, "backups", journal["patch"])
    if journal["op"] == "apply":
        src = os.path.join(txn_dir(root, journal["id"]), "old")
        if os.path.isdir(src):
            remove(dest)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(src, dest)
            fsync_dir(os.path.dirname(dest))
            step("backups kept")
    elif os.path.lexists(dest):
        remove(dest)
        fsync_dir(os.path.dirname(dest))
        step("backups dropped")


def _close(root, journal):
    """The tail of every transaction: its folder, then its journal (the last thing removed).
    (Steps are counted only where something changed, so a re-run advances past them.)"""
    d = state_dir(root)
    tdir = txn_dir(root, journal["id"])
    if os.path.lexists(tdir):
        remove(tdir)
        fsync_dir(os.path.dirname(tdir))
        step("txn removed")
    remove(journal_path(root))
    fsync_dir(d)
    step("journal removed")


def fsync_dirs(root, journal):
    for parent in sorted(
        {os.path.dirname(_file_paths(root, rel, f)[0]) for rel, f in journal["files"].items()}
    ):
        fsync_dir(parent)


def finish(root, journal):
    """Roll a committed transaction forward to its end (idempotent)."""
    _keep_or_drop_backups(root, journal)
    _close(root, journal)


def abort(root, journal):
    """Roll an uncommitted transaction back to before it began (idempotent)."""
    restored = _roll_back(root, journal)
    _close(root, journal)
    return restored


def clean_orphans(root, rels):
    """Leftovers no journal names: txn/ folders, temp files, staged copies beside the given files."""
    d = state_dir(root, create=False)
    gone = []
    txn_root = os.path.join(d, "txn")
    for name in sorted(os.listdir(txn_root)) if os.path.isdir(txn_root) else []:
        remove(os.path.join(txn_root, name))
        gone.append(".sglops/txn/" + name)
    for name in (LEDGER + ".tmp", JOURNAL + ".tmp"):
        if os.path.lexists(os.path.join(d, name)):
            remove(os.path.join(d, name))
            gone.append(".sglops/" + name)
    for rel in sorted(set(rels)):
        path = tree_path(root, rel)
        for suffix in (STAGED_SUFFIX, COPY_SUFFIX):
            if os.path.lexists(path + suffix):
                remove(path + suffix)
                gone.append(rel + suffix)
    return gone


def recover(root, rels=()):
    """Under the lock: finish (committed) or roll back (anything else) a transaction cut short, then
    clean what no journal names. None when there was nothing to do."""
    journal = pending(root)
    out = None
    if journal is not None:
        out = {"op": journal.get("op"), "patch": journal.get("patch"), "state": journal.get("state")}
        if journal.get("state") in FORWARD_STATES:
            finish(root, journal)
            out["outcome"] = "finished"
        else:
            out.update(outcome="rolled back", restored=abort(root, journal))
    ledger_rels = [rel for e in ledger(root).get("applied", []) for rel in e.get("files", {})]
    orphans = clean_orphans(root, list(rels) + ledger_rels)
    if orphans:
        out = out or {"op": None, "patch": None, "outcome": "cleaned"}
        out["orphans"] = orphans
    return out


def view_after_recovery(root, journal):
    """Read-only: where each thing will be once recovery has run, without running it.

    (files: rel -> the path holding its content then, or None for no file; ledger; backups base
    for the journal's patch, or None.) Dry runs and `inv patches` answer from this.
    """
    files = {}
    backups = {}
    if journal.get("state") in FORWARD_STATES:
        book = journal.get("ledger_after") or ledger(root)
        old = os.path.join(txn_dir(root, journal["id"]), "old")
        if journal["op"] == "apply" and os.path.isdir(old):
            backups[journal["patch"]] = old
        elif journal["op"] == "revert":
            backups[journal["patch"]] = None
    else:
        book = journal["ledger_before"]
        if journal.get("state") != "rolled-back":
            for rel, f in journal["files"].items():
                path, _ = _file_paths(root, rel, f)
                if sha256_file(path) != f["before"]:
                    files[rel] = f["old_copy"] if f["before"] is not None else None
    return files, book, backups


def sglang_root(hint):
    info = find_sglang(hint)
    return info["root"], info
