# sglops: include patch_lib
# One round trip before any patch decision: SGLang version and commit, the target files'
# contents and hashes, their git status, the ledger; first finishing or rolling back any
# transaction a dropped connection or a crash left behind.


def main(args):
    root, info = sglang_root(args.get("sglang_root"))
    shield()
    with Lock(root, args.get("lock_wait_s", 30), args.get("operator", "")):
        recovered = recover(root)
        files = {}
        for rel in args.get("files", []):
            path = resolve(root, rel)
            if not _os.path.isfile(path):
                files[rel] = {"sha256": None, "text": None}
                continue
            with open(path, "rb") as fh:
                data = fh.read()
            try:
                text = data.decode("utf-8") if args.get("contents", True) else None
            except UnicodeDecodeError:
                raise UserError(rel + " is not UTF-8 text; sglops patches edit source files only") from None
            files[rel] = {"sha256": _hashlib.sha256(data).hexdigest(), "text": text,
                          "git_modified": None}
        if info.get("kind") == "git" and files:
            rels = [r for r in files if files[r]["sha256"] is not None]
            rc, out, _ = sh(["git", "status", "--porcelain", "--untracked-files=no", "--", *rels], cwd=root)
            if rc == 0:
                changed = {ln[3:].strip() for ln in out.splitlines() if ln.strip()}
                for rel in rels:
                    files[rel]["git_modified"] = rel in changed
        backups = {}
        for rel in args.get("backups_of", []):
            patch, _, frel = rel.partition(":")
            backups[rel] = sha256_file(_os.path.join(state_dir(root), "backups", patch, frel))
        return {"root": root, "version": info.get("version"), "commit": info.get("commit"),
                "kind": info.get("kind"), "files": files, "ledger": ledger(root),
                "recovered": recovered, "backups": backups, "container": container_identity()}
