# One round trip before any patch decision: SGLang version and commit, the target files'
# contents and hashes, their git status, the ledger, the backups asked about.
#
# Read-only unless args["recover"]: no lock, no .sglops/ created, no journal rolled either way.
# A pending journal is reported ("recovery_needed") and the answer shows the tree as it will be
# once recovered (files, ledger, backups), so `inv patches` and dry runs tell the truth without
# changing anything. With "recover" (the mutating commands) it takes the lock and recovers first.
import hashlib
import os

from ._common import UserError, container_identity, sh, sha256_file, tree_path
from .patch_lib import (
    Lock,
    ledger,
    lock_holder,
    pending,
    read_json,
    recover,
    sglang_root,
    shield,
    state_dir,
    summary,
    view_after_recovery,
)


def _read(path, rel, want_text):
    if path is None or not os.path.isfile(path):
        return {"sha256": None, "text": None}
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8") if want_text else None
    except UnicodeDecodeError:
        raise UserError(rel + " is not UTF-8 text; sglops patches edit source files only") from None
    return {"sha256": hashlib.sha256(data).hexdigest(), "text": text, "git_modified": None}


def collect(root, info, args, view=None):
    files_from, book, backups_from = view or ({}, ledger(root), {})
    files = {}
    for rel in args.get("files", []):
        path = files_from[rel] if rel in files_from else tree_path(root, rel)
        files[rel] = _read(path, rel, args.get("contents", True))
    if info.get("kind") == "git" and files:
        rels = [r for r in files if files[r]["sha256"] is not None]
        rc, out, _ = sh(["git", "status", "--porcelain", "--untracked-files=no", "--", *rels], cwd=root)
        if rc == 0:
            changed = {ln[3:].strip() for ln in out.splitlines() if ln.strip()}
            for rel in rels:
                files[rel]["git_modified"] = rel in changed
                if rel in files_from and files[rel]["sha256"] is not None:
                    # restored from the journal's copy: git status of the file as it is now says nothing
                    files[rel]["git_modified"] = None
    backups = {}
    for key in args.get("backups_of", []):
        patch, _, frel = key.partition(":")
        base = backups_from.get(patch, os.path.join(state_dir(root, create=False), "backups", patch))
        backups[key] = sha256_file(os.path.join(base, frel)) if base else None
    return {
        "root": root,
        "version": info.get("version"),
        "commit": info.get("commit"),
        "kind": info.get("kind"),
        "files": files,
        "ledger": book,
        "backups": backups,
        "container": container_identity(),
        "ab": read_json(os.path.join(state_dir(root, create=False), "ab.json"), None),
    }


def main(args):
    root, info = sglang_root(args.get("sglang_root"))
    if not args.get("recover"):
        journal = pending(root)
        out = collect(root, info, args, view_after_recovery(root, journal) if journal else None)
        out.update(recovered=None, recovery_needed=summary(journal, lock_holder(root)) if journal else None)
        return out
    shield()
    with Lock(root, args.get("lock_wait_s", 30), args.get("operator", "")):
        recovered = recover(root, args.get("files", []))
        out = collect(root, info, args)
        out.update(recovered=recovered, recovery_needed=None)
        return out
