# What must be the same on every node of one server before any of them is stopped: the SGLang release and
# commit (and any hand edits), the patches the ledger says are applied (with their files' hashes), the kernels
# installed, and the model at the same path with the same config. Read-only; one round trip per node.
import hashlib
import json
import os

from ._common import find_sglang, sglops_dir, sha256_file
from .patch_lib import ledger


def _model(path):
    """The model folder's config.json hash (None: not a
    folder here; a hub id is loaded by name on every node)."""
    if not path:
        return {"path": path, "exists": False, "config_sha256": None}
    folder = os.path.expanduser(path)
    config = os.path.join(folder, "config.json")
    return {
        "path": path,
        "exists": os.path.isdir(folder),
        "config_sha256": sha256_file(config) if os.path.isfile(config) else None,
    }


def _kernels(root):
    try:
        with open(os.path.join(sglops_dir(root, create=False), "kernels", "installed.json")) as fh:
            records = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(records, dict):
        return {}
    return {
        name: (rec or {}).get("sha256") or (rec or {}).get("tag")
        for name, rec in sorted(records.items())
        if isinstance(rec, dict)
    }


def main(args):
    tree = find_sglang(args.get("sglang_root"))
    root = tree["root"]
    applied = []
    for entry in ledger(root).get("applied", []):
        files = entry.get("files") or {}
        applied.append(
            {
                "patch": entry.get("patch") or entry.get("name"),
                "variant": entry.get("variant"),
                "files": {
                    rel: (f or {}).get("after") if isinstance(f, dict) else f
                    for rel, f in sorted(files.items())
                }
                if isinstance(files, dict)
                else files,
            }
        )
    dirty = tree.get("dirty")
    return {
        "sglang": {
            "version": tree.get("version"),
            "commit": tree.get("commit"),
            "kind": tree.get("kind"),
            "dirty": hashlib.sha256(json.dumps(dirty, sort_keys=True).encode()).hexdigest()[:12]
            if dirty
            else None,
        },
        "patches": sorted(applied, key=lambda e: str(e["patch"])),
        "kernels": _kernels(root),
        "model": _model(args.get("model_path")),
    }
