# Apply or revert one patch on this host, all or nothing, in one round trip, under the lock:
#   recover any earlier transaction -> verify pre-image hashes -> journal "preparing" (names every
#   file it will create) -> copy originals aside, stage new contents next to the targets, compile
#   -> journal "prepared" -> rename into place -> write the ledger -> journal "committed" (the
#   commit point) -> keep (apply) or drop (revert) the backups -> remove txn/<id>/ -> remove journal.
# Any failure before the commit point restores every file and the ledger. SIGHUP/SIGPIPE are
# ignored, so a dropped SSH connection cannot stop it half-way; after a SIGKILL the next mutating
# patch step finishes or rolls back from the journal (patch_lib.recover). Each durable step calls
# step(name): the crash-point tests kill the process there (see patch_lib).
import os
import py_compile
import secrets
import shutil
import tempfile
import time

from ._common import UserError, container_identity, sha256_file, tree_path
from .ab_journal import holder
from .patch_lib import (
    LEDGER,
    STAGED_SUFFIX,
    Lock,
    abort,
    copy_durable,
    finish,
    fsync_dir,
    journal_path,
    ledger,
    recover,
    remove,
    say,
    set_state,
    sglang_root,
    shield,
    state_dir,
    step,
    txn_dir,
    write_json,
)


def _compile(staged, target, tdir):
    # the compiled copy goes into the transaction's own folder, which the journal names and every end of the
    # transaction (commit, abort, recovery after a kill) removes: nothing is left behind on the host
    with tempfile.TemporaryDirectory(dir=tdir) as tmp:
        try:
            py_compile.compile(staged, cfile=os.path.join(tmp, "x.pyc"), dfile=target, doraise=True)
        except py_compile.PyCompileError as exc:
            raise UserError(
                "py_compile failed for " + target + ": " + str(exc.msg).strip().splitlines()[-1]
            ) from None


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _new_ledger(book, op, patch, args, info, files):
    entries = [e for e in book.get("applied", []) if e.get("patch") != patch]
    if op == "apply":
        entry = dict(args["entry"])
        entry.update(
            {
                "patch": patch,
                "time": _now(),
                "sglang_version": info.get("version"),
                "sglang_commit": info.get("commit"),
                "container": container_identity(),
                "files": {rel: {"before": f["before"], "after": f["after"]} for rel, f in files.items()},
            }
        )
        entries.append(entry)
    return {"applied": entries}


def _already(root, book, op, patch, files):
    """The ledger entry (apply) or {} (revert) when this exact change is already in place: the files are
    what it would make them and the ledger says so. Two applies of one patch race for the lock; the one
    that waited finds the work done, and says "already applied" as a second apply always does."""
    entry = next((e for e in book.get("applied", []) if e.get("patch") == patch), None)
    if (entry is not None) != (op == "apply"):
        return None
    if any(sha256_file(tree_path(root, rel)) != f["after"] for rel, f in files.items()):
        return None
    return entry if op == "apply" else {}


def _stage(root, d, patch, rel, f, j, k, tdir):
    """Keep the original aside and write the new content beside its target, checked and compiled."""
    path, staged = j["path"], j["staged"]
    if f["before"] is not None:
        copy_durable(path, j["old_copy"])
    step("saved " + str(k))
    if f["after"] is None:
        # the transaction deletes this file: nothing to stage
        return
    if "from_backup" in f:
        src = os.path.join(d, "backups", patch, rel)
        if sha256_file(src) != f["after"]:
            raise UserError("backup of " + rel + " is missing or not the recorded original; nothing changed")
        copy_durable(src, staged)
    else:
        with open(staged, "wb") as fh:
            fh.write(f["content"].encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        if f["before"] is not None:
            shutil.copymode(path, staged)
    if sha256_file(staged) != f["after"]:
        raise UserError("staged " + rel + " does not hash as expected; nothing changed")
    if path.endswith(".py"):
        _compile(staged, path, tdir)


def _put_in_place(j):
    if j["after"] is None:
        remove(j["path"])
    else:
        os.replace(j["staged"], j["path"])


def main(args):
    root, info = sglang_root(args.get("sglang_root"))
    shield()
    op, patch, files = args["op"], args["patch"], args["files"]
    with Lock(root, args.get("lock_wait_s", 30), args.get("operator", "") + " " + op + " " + patch):
        recovered = recover(root, list(files))
        held = holder(root, args)
        # an ab or sweep owns the host: its restore would silently undo this change
        if held is not None:
            return {"owned_by": held, "recovered": recovered}
        d = state_dir(root)
        book = ledger(root)
        done = _already(root, book, op, patch, files)
        # another operator's same change won the race for the lock: nothing to do
        if done is not None:
            return {"already": done, "files": {}, "ledger": book, "recovered": recovered}
        # pre-images: exactly what the laptop decided on, else someone changed them meanwhile
        changed = [rel for rel, f in files.items() if sha256_file(tree_path(root, rel)) != f["before"]]
        if changed:
            raise UserError(
                "changed on the host since it was checked: " + ", ".join(changed) + "; nothing changed"
            )
        txn = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
        tdir = txn_dir(root, txn)
        jfiles = {}
        for rel, f in files.items():
            path = tree_path(root, rel)
            jfiles[rel] = {
                "before": f["before"],
                "after": f["after"],
                "path": path,
                "staged": path + STAGED_SUFFIX,
                "old_copy": os.path.join(tdir, "old", rel),
            }
        journal = {
            "id": txn,
            "op": op,
            "patch": patch,
            "state": "preparing",
            "files": jfiles,
            "ledger_before": book,
            "ledger_after": _new_ledger(book, op, patch, args, info, files),
        }
        # write-ahead: before anything it names exists
        write_json(journal_path(root), journal)
        step("preparing")
        try:
            os.makedirs(os.path.join(tdir, "old"))
            for k, (rel, f) in enumerate(files.items(), 1):
                _stage(root, d, patch, rel, f, jfiles[rel], k, tdir)
                step("staged " + str(k))
            set_state(root, journal, "prepared")
            for k, rel in enumerate(jfiles, 1):
                _put_in_place(jfiles[rel])
                fsync_dir(os.path.dirname(jfiles[rel]["path"]))
                step("renamed " + str(k))
            write_json(os.path.join(d, LEDGER), journal["ledger_after"])
            step("ledger written")
            set_state(root, journal, "committed")
        except BaseException as exc:
            restored = abort(root, journal)
            if isinstance(exc, UserError):
                raise
            raise UserError(
                op
                + " of "
                + patch
                + " failed ("
                + (str(exc) or type(exc).__name__)
                + "); restored "
                + (", ".join(restored) or "nothing needed")
            ) from None
        finish(root, journal)
        say(step="done")
        return {
            "txn": txn,
            "files": {rel: {"before": f["before"], "after": f["after"]} for rel, f in jfiles.items()},
            "ledger": journal["ledger_after"],
            "recovered": recovered,
        }
