# A JSON answer about a tree, kept on the host until the tree changes: a probe reads the same files every
# time, and between two probes they change only when a patch (the ledger), a checkout or an edit says so. What
# says so here is the stat (mtime, ctime, size, inode) of every file the answer read and of every folder its
# globs listed (a file added or removed changes its folder's mtime). Checking that is a few thousand stat
# calls (~10 ms); the scan it saves is ~0.8 s of CPU. A cache that cannot be read or written is simply not
# used.
import hashlib
import json
import os
import re

from ._common import open_private

_MAGIC = re.compile(r"[*?[]")
# answers kept (a tree and probe set each); the oldest go first
KEEP = 32


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "sglops", "probe-scan")


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino]


def glob_folders(root, patterns):
    """The folders a glob of these patterns lists, so their stats say whether its answer could change."""
    out = set()
    for pat in patterns:
        parts = pat.split("/")
        magic = [i for i, p in enumerate(parts) if _MAGIC.search(p)]
        if not magic:
            # a plain path: the file's own stat says it all
            continue
        base = os.path.normpath(os.path.join(root, *parts[: magic[0]]))
        out.add(base)
        # a wildcard above the file name: every folder below may be listed
        if magic[0] < len(parts) - 1:
            for here, dirs, _ in os.walk(base):
                out.update(os.path.join(here, d) for d in dirs)
    return out


class TreeCache:
    """One cached answer, named by everything it was computed
    from (`key`) and valid while `watch` is unchanged."""

    def __init__(self, key, enabled=True):
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        self.path = os.path.join(cache_dir(), digest + ".json") if enabled else None

    def load(self):
        """The kept answer if every watched path stats as it did when it was kept, else None."""
        if not self.path:
            return None
        try:
            with open(self.path) as fh:
                kept = json.load(fh)
        except (OSError, ValueError):
            return None
        watch = kept.get("watch") if isinstance(kept, dict) else None
        if not isinstance(watch, dict) or any(_stat(p) != s for p, s in watch.items()):
            return None
        return kept.get("answer")

    def snapshot(self, paths):
        """The stats of `paths`, taken before the answer is
        computed (a change during it then shows next time)."""
        return {p: _stat(p) for p in sorted(paths)} if self.path else {}

    def save(self, answer, watch):
        """Keep the answer with the snapshot taken before it
        (atomic: a reader sees the old file or the new one)."""
        if not self.path:
            return
        tmp = self.path + ".tmp" + str(os.getpid())
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            with open_private(tmp, "w") as fh:
                json.dump({"watch": watch, "answer": answer}, fh)
            os.replace(tmp, self.path)
            _prune(os.path.dirname(self.path))
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(folder):
    """Keep the KEEP answers used last (a hit does not touch its file: last written, then)."""
    entries = []
    for entry in os.scandir(folder):
        if entry.name.endswith(".json"):
            try:
                entries.append((entry.stat().st_mtime_ns, entry.path))
            except OSError:
                pass
    for _, path in sorted(entries)[:-KEEP]:
        try:
            os.unlink(path)
        except OSError:
            pass
