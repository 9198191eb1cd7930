# The journal of an `inv ab` on this host: "an ab is in progress; the state to restore is X".
#
# Why on the host: the state it records (which server ran, which patches the ledger held) is the host's,
# and a laptop killed mid-round (SIGKILL, a lost laptop, another operator) leaves the host patched with
# nothing else saying so. The next `inv ab` reads it and restores X, not the patched state it finds;
# `inv patches` reports it (patch_state.py reads the same file). Kept beside the patch ledger (0600).
#
# The journal is also the host's owner record: "begin" creates it only where none is, or where the one there
# is the journal the caller takes over (an earlier run the laptop found dead), under the patch lock, so two
# operators that both read "none" cannot both begin: the second is told who owns the host.
#
# args: {"action": "begin", "doc": {...}, "takes_over": ID|None} | {"action": "write", "doc": {...}}
#     | {"action": "clear", "run_id": ID} | {"action": "read"}
import os

from ._common import UserError
from .patch_lib import Lock, read_json, sglang_root, state_dir, write_json

FILE = "ab.json"


def path(root, create=False):
    return os.path.join(state_dir(root, create), FILE)


def holder(root, args):
    """The journal of another run (an ab or sweep) that owns this host, or None: a mutating step (apply,
    revert, restart, stop) refuses while there is one, unless the caller is that run (args["experiment"]) or
    the laptop found its owner gone (args["owner_gone"]: an ab cut short on that machine)."""
    doc = read_json(path(root), None)
    if not doc or doc.get("run_id") in (args.get("experiment"), args.get("owner_gone")):
        return None
    return doc


def main(args):
    root, _info = sglang_root(args.get("sglang_root"))
    action = args.get("action")
    if action == "read":
        return {"journal": read_json(path(root), None)}
    if action == "begin":
        with Lock(root, wait_s=30.0, who="journal begin " + str(args["doc"].get("run_id"))):
            now = read_json(path(root), None)
            if now is not None and now.get("run_id") != args.get("takes_over"):
                return {"begun": False, "journal": now}
            write_json(path(root, create=True), args["doc"])
        return {"begun": True, "journal": args["doc"]}
    if action == "write":
        write_json(path(root, create=True), args["doc"])
        return {"journal": args["doc"]}
    if action == "clear":
        now = read_json(path(root), None)
        if now is None:
            return {"cleared": False, "journal": None}
        # another ab's (or a newer) journal: never ours to drop
        if now.get("run_id") != args.get("run_id"):
            return {"cleared": False, "journal": now}
        os.remove(path(root))
        return {"cleared": True, "journal": None}
    raise UserError("ab_journal: unknown action " + repr(action))
