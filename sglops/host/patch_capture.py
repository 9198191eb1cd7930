# What was edited by hand in this SGLang tree, for `inv capture-patch`: each changed file's
# current text and its pristine text (from git HEAD), or, against the PyPI release, the files
# whose sha256 differs from the wheel's RECORD (the laptop holds the wheel's text).
import os

from ._common import UserError, sh, sha256_file
from .patch_lib import Lock, ledger, pending, recover, sglang_root


def _pkg_rel(root, path):
    rel = os.path.relpath(path, root)
    return rel if rel.startswith("python/") else "python/" + rel


def main(args):
    root, info = sglang_root(args.get("sglang_root"))
    against = args["against"]
    only = set(args.get("files") or [])
    if args.get("read_only"):
        journal = pending(root)
        if journal:
            raise UserError(
                "recovery needed: "
                + journal.get("op", "?")
                + " of "
                + journal.get("patch", "?")
                + " was cut short on this host; the next apply-patch or revert-patch recovers it (this "
                + "dry run changes nothing)"
            )
        return _capture(root, info, against, only, args)
    with Lock(root, args.get("lock_wait_s", 30), args.get("operator", "")):
        recover(root)
        return _capture(root, info, against, only, args)


def _capture(root, info, against, only, args):
    """The changed files' texts (before and after) and the ledger."""
    out = {}
    if against == "commit":
        if info.get("kind") != "git":
            raise UserError("SGLang at " + root + " is not a git checkout; use --against release")
        rc, status, err = sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
        if rc != 0:
            raise UserError("git status failed in " + root + ": " + err.strip())
        for line in status.splitlines():
            rel = line[3:].strip()
            if not rel or (only and rel not in only):
                continue
            path = os.path.join(root, rel)
            rc, head, _ = sh(["git", "show", "HEAD:" + rel], cwd=root)
            cur = open(path, encoding="utf-8").read() if os.path.isfile(path) else None
            out[rel] = {"before": head if rc == 0 else None, "after": cur, "sha256": sha256_file(path)}
    else:
        # {"sglang/...py": sha256}
        wanted = args["release_hashes"]
        pkg = info["package_dir"]
        base = os.path.dirname(pkg)
        for dirpath, _dirs, names in os.walk(pkg):
            for n in names:
                if not n.endswith(".py"):
                    continue
                path = os.path.join(dirpath, n)
                key = os.path.relpath(path, base)
                rel = _pkg_rel(root, path)
                if (only and rel not in only) or key not in wanted:
                    continue
                digest = sha256_file(path)
                if digest != wanted[key]:
                    out[rel] = {"key": key, "after": open(path, encoding="utf-8").read(), "sha256": digest}
    return {
        "root": root,
        "version": info.get("version"),
        "commit": info.get("commit"),
        "files": out,
        "ledger": ledger(root),
    }
