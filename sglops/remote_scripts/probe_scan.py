# sglops: include _common
# Run a whole probe set against this host's SGLang tree and FlashInfer headers in one round trip.
# ripgrep where the host has it, else a stdlib scanner; both feed the same post-processing,
# so results are identical. Choice lists are read with `ast` (no import of sglang).
import ast
import glob
import json
import os
import re
import shutil
import time

_OS_ERROR = re.compile(r"\s*\(os error \d+\)$")
_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:def|class)\s+(\w+)")


def _glob_files(root, patterns):
    """Files under root matching the globs (sorted, relative paths), broken links included."""
    found = {}
    for pat in patterns:
        for path in glob.glob(os.path.join(root, pat), recursive=True):
            if os.path.isdir(path):
                continue
            found[os.path.normpath(path)] = None
    return sorted(found)


def _rel(root, path):
    rel = os.path.relpath(path, root)
    return rel.replace(os.sep, "/")


class _Files:
    """Each file read at most once per scan (bytes split into lines)."""

    def __init__(self):
        self.lines = {}
        self.errors = {}

    def get(self, path):
        if path in self.lines:
            return self.lines[path]
        if path in self.errors:
            return None
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            self.errors[path] = exc.strerror or type(exc).__name__
            return None
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        self.lines[path] = [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]
        return self.lines[path]


def _grep_python(files, probe, reader):
    rx = re.compile(probe["regex"], re.I if probe.get("ignore_case") else 0)
    hits = []
    for path in files:
        lines = reader.get(path)
        if lines is None:
            continue
        for i, line in enumerate(lines, 1):
            if rx.search(line):
                hits.append((path, i, line))
    return hits


def _grep_rg(rg, files, probe, reader):
    """ripgrep over the same files; None when rg cannot take this regex (the caller falls back)."""
    if not files:
        return []
    argv = [rg, "--json", "--no-config", "-a", "-e", probe["regex"]]
    if probe.get("ignore_case"):
        argv.insert(3, "-i")
    rc, out, err = sh(argv + ["--"] + files, timeout=120)
    hits, summary = [], False
    for line in out.splitlines():
        msg = json.loads(line)
        if msg["type"] == "summary":
            summary = True
        elif msg["type"] == "match":
            d = msg["data"]
            path = d["path"].get("text") or d["path"].get("bytes")
            lines = d["lines"]
            text = lines.get("text")
            if text is None:
                import base64

                text = base64.b64decode(lines["bytes"]).decode("utf-8", "replace")
            hits.append((os.path.normpath(path), d["line_number"], text.rstrip("\n").rstrip("\r")))
    if not summary:
        return None
    for line in err.splitlines():
        m = re.match(r"^rg: (.+?): (.+)$", line)
        if m:
            reader.errors.setdefault(os.path.normpath(m.group(1)), _OS_ERROR.sub("", m.group(2)))
    return hits


def _enclosing(lines, lineno):
    """The def/class a line sits in, so a hit reads `forward_decode` rather than L822."""
    if not lines or lineno > len(lines):
        return None
    here = lines[lineno - 1]
    indent = len(here) - len(here.lstrip())
    for i in range(lineno - 2, -1, -1):
        m = _DEF.match(lines[i])
        if m and len(m.group(1)) < indent:
            return m.group(2)
    return None


# -- choices: an option's choice list as the tree's Python source defines it -----------------------
def _literal_list(node, names, depth=0):
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                out.append(elt.value)
            elif isinstance(elt, ast.Starred):
                out.extend(_literal_list(elt.value, names, depth + 1) or [])
        return out
    if isinstance(node, ast.Name) and depth < 5 and node.id in names:
        return _literal_list(names[node.id], names, depth + 1)
    return None


def _module_names(tree):
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names[node.target.id] = node.value
    return names


def _kw(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _const(node):
    return node.value if isinstance(node, ast.Constant) else None


def _definitions(tree, options):
    """(flag, line, choices node, deprecated) for argparse add_argument calls and dataclass fields."""
    wanted = set(options)
    fields = {o.lstrip("-").replace("-", "_"): o for o in options}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags = [_const(a) for a in node.args]
            flag = next((f for f in flags if f in wanted), None)
            if flag:
                action = _kw(node, "action")
                helptext = _const(_kw(node, "help")) or ""
                deprecated = "Deprecat" in ast.dump(action) if action is not None else False
                yield flag, node.lineno, _kw(node, "choices"), deprecated or helptext.startswith("[Deprecated]")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            for call in ast.walk(node.annotation):
                if isinstance(call, ast.Call) and _kw(call, "choices") is not None:
                    cli = _const(_kw(call, "cli_name"))
                    flag = cli if cli else fields.get(node.target.id)
                    if flag in wanted and _const(_kw(call, "no_cli")) is not True:
                        yield flag, node.lineno, _kw(call, "choices"), False
                    break


def _choices(root, files, candidates, probe, reader, errors):
    """Parse the candidate files; resolve NAME choices through module-level lists in any probe file."""
    names, trees = {}, {}
    for path in files:
        lines = reader.get(path)
        if lines is None:
            continue
        text = "\n".join(lines)
        if path not in candidates and not re.search(r"_CHOICES\s*=", text):
            continue
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as exc:
            errors.append({"file": _rel(root, path), "error": "cannot parse: " + str(exc.msg) + " (line " + str(exc.lineno) + ")"})
            continue
        trees[path] = tree
        names.update(_module_names(tree))
    defs = []
    for path in sorted(candidates):
        tree = trees.get(path)
        if tree is None:
            continue
        local = {**names, **_module_names(tree)}
        for flag, line, node, deprecated in _definitions(tree, probe["options"]):
            values = _literal_list(node, local) if node is not None else None
            defs.append({"flag": flag, "file": _rel(root, path), "line": line, "choices": values,
                         "deprecated": bool(deprecated),
                         "text": (reader.get(path) or [""])[line - 1].strip()})
    order = {o: i for i, o in enumerate(probe["options"])}
    defs.sort(key=lambda d: (d["deprecated"], order.get(d["flag"], 99), d["file"], d["line"]))
    return defs


def _grep(engine, rg, files, probe, reader, fallbacks):
    if engine == "rg":
        hits = _grep_rg(rg, files, probe, reader)
        if hits is not None:
            return hits
        fallbacks.append(probe["id"])
    return _grep_python(files, probe, reader)


def main(args):
    start = time.monotonic()
    sglang = find_sglang(args.get("sglang_root"))
    fi = dist_version("flashinfer-python") or dist_version("flashinfer")
    roots = {"sglang": sglang["package_dir"], "flashinfer": fi.get("location") if fi else None}
    want = args.get("engine") or "auto"
    rg = shutil.which("rg")
    if want == "rg" and not rg:
        raise UserError("--engine rg: ripgrep (rg) is not on this host's PATH")
    engine = "rg" if (rg and want in ("auto", "rg")) else "python"
    engine_label = "python"
    if engine == "rg":
        rc, out, _ = sh([rg, "--version"])
        engine_label = "rg " + (out.split()[1] if rc == 0 and out.split()[1:] else "?")
    reader, fallbacks, errors = _Files(), [], []
    backend_files = _glob_files(roots["sglang"], [args["backends"]["files"]])
    results = []
    for probe in args["probes"]:
        root = roots.get(probe.get("root") or "sglang")
        res = {"id": probe["id"], "root": probe.get("root") or "sglang", "hits": [], "files": 0}
        if not root:
            res["missing_root"] = True
            results.append(res)
            continue
        files = backend_files if probe.get("scope") == "backend" else _glob_files(root, probe["files"])
        res["files"] = len(files)
        res["file_list"] = [_rel(root, f) for f in files]
        if probe.get("kind") == "choices":
            pat = {"regex": "|".join(re.escape(o) + "|" + re.escape(o.lstrip("-").replace("-", "_")) + r"\s*:"
                                     for o in probe["options"]), "id": probe["id"]}
            cand = {h[0] for h in _grep(engine, rg, files, pat, reader, fallbacks)}
            res["definitions"] = _choices(root, files, cand, probe, reader, errors)
        else:
            hits = _grep(engine, rg, files, probe, reader, fallbacks)
            for path, line, text in hits:
                res["hits"].append({"file": _rel(root, path), "line": line, "text": text.strip()[:300],
                                    "func": _enclosing(reader.get(path), line)})
            res["hits"].sort(key=lambda h: (h["file"], h["line"]))
        results.append(res)
    unreadable = [{"file": p, "error": e} for p, e in sorted(reader.errors.items())]
    for u in unreadable:
        for name, root in roots.items():
            if root and os.path.abspath(u["file"]).startswith(os.path.abspath(root) + os.sep):
                u["file"] = _rel(root, u["file"])
                u["root"] = name
    return {
        "sglang": sglang,
        "flashinfer": fi,
        "engine": engine_label,
        "fallbacks": sorted(set(fallbacks)),
        "backend_files": [_rel(roots["sglang"], f) for f in backend_files],
        "results": results,
        "unreadable": unreadable + errors,
        "seconds": round(time.monotonic() - start, 4),
    }
