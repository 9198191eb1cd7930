# probe-backends on a host, whatever engine serves there: the default engine's tree is scanned here
# (probe_scan.py); another engine's (the one host/_engine_here.py finds serving) has the files its probe set
# reads sent back, read only, for the laptop's probes of that engine (sglops/probe/vllm_backends.py). One
# round trip.
import glob
import os
import time

from ._engine_here import serving_engine

# a probe set reads a few dozen source files (vLLM 0.32's MLA backends: ~0.7 MB)
MAX_BYTES = 8 << 20


def read_files(pkg, patterns):
    """{relative path: text} of the files under pkg matching the patterns (sorted, within MAX_BYTES)."""
    out, total = {}, 0
    for pat in patterns:
        for path in sorted(glob.glob(os.path.join(pkg, pat))):
            rel = os.path.relpath(path, pkg)
            if rel in out or not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            if total + size > MAX_BYTES:
                raise ValueError(f"the probe set's files under {pkg} pass {MAX_BYTES >> 20} MB at {rel}")
            with open(path, encoding="utf-8", errors="replace") as fh:
                out[rel] = fh.read()
            total += size
    return out


def main(args):
    start = time.monotonic()
    found = serving_engine(args) if args.get("engine_probes") else None
    patterns = (args.get("engine_probes") or {}).get(found["spec"]["name"]) if found else None
    if not patterns:
        from .probe_scan import main as scan

        return scan(args)
    tree = found["tree"]
    files = read_files(tree["package_dir"], patterns)
    return {
        "engine_tree": {
            "engine": found["spec"]["name"],
            "title": found["spec"]["title"],
            "package_dir": tree["package_dir"],
            "version": tree.get("version"),
            "version_source": tree.get("version_source"),
            "kind": tree["kind"],
            "source": found["source"],
            "python": found.get("python"),
        },
        "files": files,
        "seconds": round(time.monotonic() - start, 4),
    }
