# sglops: include patch_lib
# Apply or revert one patch on this host, all or nothing, in one round trip, under the lock:
#   verify pre-image hashes -> copy originals aside -> stage new contents next to the targets
#   -> py_compile the staged files -> write the journal (state "prepared") -> rename into place
#   -> write the ledger -> journal "committed" (the commit point) -> keep backups, drop journal.
# Any failure before the commit point restores every file and the ledger. SIGHUP/SIGPIPE are
# ignored, so a dropped SSH connection cannot stop it half-way; a SIGKILL leaves the journal,
# which the next sglops patch step finishes or rolls back (patch_lib.recover).
import py_compile
import secrets
import tempfile


def _compile(staged, target):
    with tempfile.TemporaryDirectory() as tmp:
        try:
            py_compile.compile(staged, cfile=_os.path.join(tmp, "x.pyc"), dfile=target, doraise=True)
        except py_compile.PyCompileError as exc:
            raise UserError("py_compile failed for " + target + ": " + str(exc.msg).strip().splitlines()[-1]) from None


def _now():
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime())


def main(args):
    root, info = sglang_root(args.get("sglang_root"))
    shield()
    op, patch = args["op"], args["patch"]
    with Lock(root, args.get("lock_wait_s", 30), args.get("operator", "") + " " + op + " " + patch):
        recover(root)
        d = state_dir(root)
        book = ledger(root)
        files = args["files"]
        # 1. pre-images: exactly what the laptop decided on, else someone changed them meanwhile
        changed = [rel for rel, f in files.items() if sha256_file(resolve(root, rel)) != f["before"]]
        if changed:
            raise UserError("changed on the host since it was checked: " + ", ".join(changed) + "; nothing changed")
        txn = _time.strftime("%Y%m%d-%H%M%S", _time.gmtime()) + "-" + secrets.token_hex(3)
        txn_dir = _os.path.join(d, "txn", txn)
        journal = {"id": txn, "op": op, "patch": patch, "state": "prepared", "ledger_before": book, "files": {}}
        staged_paths = []
        try:
            # 2. originals aside, new contents staged beside their targets, compiled
            for rel, f in files.items():
                path = resolve(root, rel)
                old_copy = _os.path.join(txn_dir, "old", rel)
                _os.makedirs(_os.path.dirname(old_copy), exist_ok=True)
                if f["before"] is not None:
                    _shutil.copy2(path, old_copy)
                staged = path + STAGED_SUFFIX
                if "from_backup" in f:
                    src = _os.path.join(d, "backups", patch, rel)
                    if sha256_file(src) != f["after"]:
                        raise UserError("backup of " + rel + " is missing or not the recorded original; nothing changed")
                    _shutil.copy2(src, staged)
                else:
                    with open(staged, "wb") as fh:
                        fh.write(f["content"].encode("utf-8"))
                    if f["before"] is not None:
                        _shutil.copymode(path, staged)
                staged_paths.append(staged)
                after = sha256_file(staged)
                if f.get("after") and after != f["after"]:
                    raise UserError("staged " + rel + " does not hash as expected; nothing changed")
                if path.endswith(".py"):
                    _compile(staged, path)
                journal["files"][rel] = {"before": f["before"], "after": after, "old_copy": old_copy}
            # 3. the ledger as it will be
            entries = [e for e in book.get("applied", []) if e.get("patch") != patch]
            if op == "apply":
                entry = dict(args["entry"])
                entry.update({"patch": patch, "time": _now(), "sglang_version": info.get("version"),
                              "sglang_commit": info.get("commit"), "container": container_identity(),
                              "files": {rel: {"before": f["before"], "after": f["after"]}
                                        for rel, f in journal["files"].items()}})
                entries.append(entry)
            new_book = {"applied": entries}
            write_json(_os.path.join(d, JOURNAL), journal)
        except BaseException:
            for p in staged_paths:
                if _os.path.exists(p):
                    _os.remove(p)
            _shutil.rmtree(txn_dir, ignore_errors=True)
            raise
        # 4. rename into place (a test-only pause lets the fault tests cut the connection here)
        pause = float(args.get("test_pause_after_first_file_s") or 0)
        try:
            for k, rel in enumerate(journal["files"]):
                _os.replace(resolve(root, rel) + STAGED_SUFFIX, resolve(root, rel))
                say(step="renamed", file=rel, pid=_os.getpid())
                if pause and k == 0:
                    say(step="paused", file=rel, pid=_os.getpid())
                    _time.sleep(pause)
            fsync_dir(root)
            write_json(_os.path.join(d, LEDGER), new_book)
            journal["state"] = "committed"
            write_json(_os.path.join(d, JOURNAL), journal)
        except BaseException as exc:
            restored = rollback(root, journal)
            _shutil.rmtree(txn_dir, ignore_errors=True)
            _os.remove(_os.path.join(d, JOURNAL))
            raise UserError(op + " of " + patch + " failed (" + (str(exc) or type(exc).__name__)
                            + "); restored " + (", ".join(restored) or "nothing needed")) from None
        finish(root, journal)
        say(step="done")
        return {"txn": txn, "files": {rel: {"before": f["before"], "after": f["after"]}
                                      for rel, f in journal["files"].items()},
                "ledger": new_book}
