# Run a whole probe set against this host's SGLang tree and FlashInfer headers in one round trip.
# ripgrep where the host has it, else a stdlib scanner; both feed the same post-processing,
# so results are identical. Choice lists are read with `ast` (no import of sglang).
import ast
import bisect
import collections
import glob
import json
import os
import re
import shutil
import sys
import time

from ._common import UserError, find_sglang, flashinfer_info, sglops_dir, sh
from ._tree_cache import TreeCache, glob_folders

_OS_ERROR = re.compile(r"\s*\(os error \d+\)$")
_QUOTED = re.compile(r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:def|class)\s+(\w+)")


_GLOBS = {}


def _glob_files(root, patterns):
    """Files under root matching the globs (sorted, normalised paths), broken links included."""
    key = (root, tuple(patterns))
    if key not in _GLOBS:
        found = {}
        for pat in patterns:
            for path in glob.glob(os.path.join(root, pat), recursive=True):
                if not os.path.isdir(path):
                    found[os.path.normpath(path)] = None
        _GLOBS[key] = sorted(found)
    return _GLOBS[key]


def _rel(root, path):
    rel = os.path.relpath(path, root)
    return rel.replace(os.sep, "/")


class _Files:
    """Each file read at most once per scan: its text decoded whole, split into lines only when asked."""

    def __init__(self):
        self.lines, self.errors = {}, {}
        self._text, self._starts, self._defs, self._trees, self._index = {}, {}, {}, {}, {}

    def text(self, path):
        """The file's text, lines joined by \\n without their
        \\r or the last line break ("" if unreadable)."""
        if path in self._text:
            return self._text[path]
        if path in self.errors:
            return ""
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            self.errors[path] = exc.strerror or type(exc).__name__
            return ""
        # a line break never falls inside a UTF-8 sequence
        text = data.decode("utf-8", "replace")
        if text.endswith("\n"):
            text = text[:-1]
        if "\r" in text:
            text = "\n".join(ln.rstrip("\r") for ln in text.split("\n"))
        if not data:
            self.lines[path] = []
        self._text[path] = text
        return text

    def get(self, path):
        """The file's lines, or None if it cannot be read."""
        if path not in self.lines:
            text = self.text(path)
            if path in self.errors:
                return None
            self.lines.setdefault(path, text.split("\n"))
        return self.lines[path]

    def starts(self, path):
        """Offset of each line's start in text(path)."""
        if path not in self._starts:
            out, pos = [], 0
            for line in self.get(path) or []:
                out.append(pos)
                pos += len(line) + 1
            self._starts[path] = out
        return self._starts[path]

    def defs(self, path):
        """(line, indent, name) of every def/class, in order."""
        if path not in self._defs:
            out = []
            for i, line in enumerate(self.get(path) or [], 1):
                if ("def " in line or "class " in line) and (m := _DEF.match(line)):
                    out.append((i, len(m.group(1)), m.group(2)))
            self._defs[path] = out
        return self._defs[path]

    def tree(self, path):
        """The parsed module (cached); SyntaxError propagates."""
        if path not in self._trees:
            self._trees[path] = ast.parse(self.text(path), filename=path)
        return self._trees[path]

    def index(self, path, lines):
        """The option definitions in a module that span one of `lines` (the grep's hits there), found in one
        walk that enters no statement away from them: (flag-or-field, line, node, deprecated)."""
        key = (path, tuple(sorted(set(lines))))
        if key not in self._index:
            self._index[key] = list(_all_definitions(_walk_near(self.tree(path), key[1])))
        return self._index[key]


def _walk_near(tree, lines):
    """ast.walk's nodes in ast.walk's order, less the subtrees whose lines hold none of `lines` (sorted)."""
    todo = collections.deque([tree])
    while todo:
        node = todo.popleft()
        for child in ast.iter_child_nodes(node):
            lo = getattr(child, "lineno", None)
            if lo is None:
                todo.append(child)
                continue
            i = bisect.bisect_left(lines, lo)
            if i < len(lines) and lines[i] <= (getattr(child, "end_lineno", None) or lo):
                todo.append(child)
        yield node


def _compile(job):
    flags = re.I if job.get("ignore_case") else 0
    return re.compile(job["regex"], flags), re.compile(job["regex"], flags | re.M)


def _grep_python(job, reader):
    """Lines of job's files matching its regex. Whole-text search (re.M) jumps to candidate lines;
    each is confirmed on its own, so semantics stay per line, as with rg."""
    rx, whole = _compile(job)
    hits = []
    for path in job["paths"]:
        lines = reader.get(path)
        if lines is None:
            continue
        text, starts, pos = reader.text(path), reader.starts(path), 0
        while True:
            m = whole.search(text, pos)
            if m is None:
                break
            i = bisect.bisect_right(starts, m.start()) - 1
            if rx.search(lines[i]):
                hits.append((path, i + 1, lines[i]))
            if i + 1 >= len(starts):
                break
            pos = starts[i + 1]
    return hits


def _rg_lines(rg, patterns, paths, reader):
    """One ripgrep run for several patterns: {path: [(line, text)]}; None if rg refused a pattern."""
    argv = [rg, "--json", "--no-config", "-a"]
    for pat in patterns:
        argv += ["-e", pat]
    rc, out, err = sh(argv + ["--"] + paths, timeout=300)
    found, summary = {}, False
    for line in out.splitlines():
        msg = json.loads(line)
        if msg["type"] == "summary":
            summary = True
        elif msg["type"] == "match":
            d = msg["data"]
            text = d["lines"].get("text")
            if text is None:
                import base64

                text = base64.b64decode(d["lines"]["bytes"]).decode("utf-8", "replace")
            path = os.path.normpath(d["path"].get("text") or "")
            found.setdefault(path, []).append((d["line_number"], text.rstrip("\n").rstrip("\r")))
    if not summary:
        return None
    given = set(paths)
    for line in err.splitlines():
        # rg 13 prints `PATH: why`, later ones `rg: PATH: why`
        line = line[4:] if line.startswith("rg: ") else line
        path, sep, why = line.partition(": ")
        while sep and path not in given:
            head, sep, why = why.partition(": ")
            path = path + ": " + head
        if sep and path in given:
            reader.errors.setdefault(path, _OS_ERROR.sub("", why))
    return found


def _grep_rg(rg, jobs, reader, fallbacks):
    """One rg process per probe, run concurrently (one big alternation is slower: a single Unicode
    \\b drops rg off its fast engine for every pattern). Each probe's own regex then confirms
    rg's lines, so both engines apply Python's semantics; a regex rg refuses goes to the stdlib scanner."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job):
        if not job["paths"]:
            return job["id"], []
        pat = ("(?i)" if job.get("ignore_case") else "") + job["regex"]
        found = _rg_lines(rg, [pat], job["paths"], reader)
        if found is None:
            fallbacks.append(job["id"])
            return job["id"], _grep_python(job, reader)
        rx, _ = _compile(job)
        return job["id"], [
            (path, n, t) for path in job["paths"] for n, t in found.get(path, []) if rx.search(t)
        ]

    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        return dict(pool.map(one, jobs))


def _enclosing(reader, path, lineno):
    """The def/class a line sits in, so a hit reads `forward_decode` rather than L822."""
    lines = reader.get(path)
    if not lines or lineno > len(lines):
        return None
    defs = reader.defs(path)
    here = lines[lineno - 1]
    indent = len(here) - len(here.lstrip())
    for i in range(bisect.bisect_left(defs, (lineno,)) - 1, -1, -1):
        if defs[i][1] < indent:
            return defs[i][2]
    return None


# -- follow: the kernels a backend calls, as the modules it imports -----------------------------------
# One left-to-right pass over the text: strings and comments are stepped over whole, so `import` is only seen
# where the parser would see a statement (anywhere: lazy imports inside functions too). Linear in the file's
# size, the same answer as walking the parsed module without building it. Every alternative starts with a
# literal character, so the regex engine skips to the next quote, `#`, `f` or `i` at C speed.
# blanks, and a backslash's line break
_WS = r"(?:[ \t]|\\\n)*"
_IMPORT_SCAN = re.compile(
    r"'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*'''"
    r'|"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*"""'
    r"|'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*'"
    r'|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"'
    r"|#[^\n]*"
    r"|from\b(?P<dots>(?:[ \t.]|\\\n)*)(?P<from>[A-Za-z_][\w. \t]*?)?" + _WS + r"import\b"
    r"|import\b"
)
_PAREN_BODY = re.compile(r"[ \t]*\(((?:#[^\n]*|[^)#])*)")
_LINE_BODY = re.compile(r"(?:\\\n|[^\n;#])*")


def _import_names(text, pos):
    """The names an import statement lists from pos (after `import`): parenthesised (comments and line breaks
    inside), or to the end of the logical line; `a.b as c` -> `a.b`."""
    m = _PAREN_BODY.match(text, pos)
    if m:
        body = re.sub(r"#[^\n]*", "", m.group(1))
    else:
        body = _LINE_BODY.match(text, pos).group(0).replace("\\\n", " ")
    return [n.split()[0] for n in body.split(",") if n.split()]


def _import_statements(text):
    """(module, names, level) of every import in the source: `import a.b` -> ("a.b", (), 0)."""
    out = []
    for m in _IMPORT_SCAN.finditer(text):
        word, before = m.group(0), text[m.start() - 1] if m.start() else " "
        if word[0] in "'\"#" or before.isalnum() or before in "_.":
            continue
        names = _import_names(text, m.end())
        if word[0] == "f":
            module = re.sub(r"[ \t]", "", m.group("from") or "") or None
            out.append((module, tuple(names), m.group("dots").count(".")))
        else:
            out.extend((name, (), 0) for name in names)
    return out


def _imported_files(reader, pkg, path):
    """Files of the sglang package (folder pkg) that module
    `path` imports, anywhere in it (lazy imports too)."""
    text = reader.text(path)
    if path in reader.errors:
        return []
    here = os.path.relpath(os.path.dirname(path), pkg).replace(os.sep, "/").split("/")
    out = []
    for module, names, level in _import_statements(text):
        mod = module or ""
        if level:
            base = [b for b in here[: len(here) - level + 1] if b and b != "."]
            mod = ".".join(["sglang", *base, *([module] if module else [])])
        parts = mod.split(".")
        if parts[0] != "sglang":
            continue
        base = os.path.join(pkg, *parts[1:])
        for cand in [base + ".py", os.path.join(base, "__init__.py")] + [
            os.path.join(base, n + ".py") for n in names
        ]:
            if os.path.isfile(cand):
                out.append(os.path.normpath(cand))
    return sorted(set(out))


def _follows(reader, pkg, backend_files, globs):
    """{backend file: [imported files matching globs]} (one level: the modules the backend file names)."""
    allowed = set(_glob_files(pkg, globs))
    return {f: [m for m in _imported_files(reader, pkg, f) if m in allowed and m != f] for f in backend_files}


def _raises_after(lines, line, limit=4):
    """A `raise` within `limit` lines below the hit and indented deeper: the check refuses, not just picks."""
    if not lines or line > len(lines):
        return False
    indent = len(lines[line - 1]) - len(lines[line - 1].lstrip())
    for text in lines[line : line + limit]:
        stripped = text.lstrip()
        if stripped and len(text) - len(stripped) <= indent:
            return False
        if stripped.startswith("raise "):
            return True
    return False


# -- choices: an option's choice list as the tree's Python source defines it -----------------------
def _literal_list(node, lookup, depth=0):
    """The strings of a list/tuple literal; a NAME is looked up (module-level, any probe file)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                out.append(elt.value)
            elif isinstance(elt, ast.Starred):
                out.extend(_literal_list(elt.value, lookup, depth + 1) or [])
        return out
    if isinstance(node, ast.Name) and depth < 5:
        value = lookup(node.id)
        return _literal_list(value, lookup, depth + 1) if value is not None else None
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


def _all_definitions(nodes):
    """argparse add_argument calls ("--flag") and dataclass fields with choices= ("--field-name")."""
    for node in nodes:
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            action = _kw(node, "action")
            helptext = _const(_kw(node, "help"))
            deprecated = ("Deprecat" in ast.dump(action) if action is not None else False) or (
                isinstance(helptext, str) and helptext.startswith("[Deprecated]")
            )
            for arg in node.args:
                flag = _const(arg)
                if isinstance(flag, str) and flag.startswith("--"):
                    yield flag, node.lineno, _kw(node, "choices"), deprecated
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            for call in ast.walk(node.annotation):
                if isinstance(call, ast.Call) and _kw(call, "choices") is not None:
                    if _const(_kw(call, "no_cli")) is not True:
                        cli = _const(_kw(call, "cli_name"))
                        yield (
                            cli or "--" + node.target.id.replace("_", "-"),
                            node.lineno,
                            _kw(call, "choices"),
                            False,
                        )
                    break


def _choices(root, files, candidates, probe, reader, errors):
    """Option definitions in the candidate files ({path: hit
    lines}); NAME choices resolve through the probe's files."""

    def parsed(path):
        try:
            return reader.tree(path)
        except SyntaxError as exc:
            err = {
                "file": _rel(root, path),
                "error": "cannot parse: " + str(exc.msg) + " (line " + str(exc.lineno) + ")",
            }
            if err not in errors:
                errors.append(err)
            return None

    def lookup_in(local):
        def lookup(name):
            if name in local:
                return local[name]
            rx = re.compile(r"^" + re.escape(name) + r"\s*[:=]", re.M)
            for path in files:
                if rx.search(reader.text(path)):
                    tree = parsed(path)
                    value = _module_names(tree).get(name) if tree else None
                    if value is not None:
                        return value
            return None

        return lookup

    wanted = set(probe["options"])
    defs = []
    for path in sorted(candidates):
        tree = parsed(path)
        if tree is None:
            continue
        lookup = lookup_in(_module_names(tree))
        for flag, line, node, deprecated in reader.index(path, candidates[path]):
            if flag not in wanted:
                continue
            values = _literal_list(node, lookup) if node is not None else None
            defs.append(
                {
                    "flag": flag,
                    "file": _rel(root, path),
                    "line": line,
                    "choices": values,
                    "deprecated": bool(deprecated),
                    "text": reader.get(path)[line - 1].strip(),
                }
            )
    order = {o: i for i, o in enumerate(probe["options"])}
    defs.sort(key=lambda d: (d["deprecated"], order.get(d["flag"], 99), d["file"], d["line"]))
    return defs


# -- functions / fields: source the laptop evaluates (launch
# path), read with `ast`, nothing imported ------------
def _functions(root, paths, probe, reader, errors):
    """Every def whose name matches probe["names"] (or, with a regex, the innermost def holding a matching
    line): file, name, first line, decorators' first string arguments and its source lines."""
    names = re.compile(probe["names"]) if probe.get("names") else None
    rx = re.compile(probe["regex"]) if probe.get("regex") else None
    out = []
    for path in paths:
        text = reader.text(path)
        if names is not None and not re.search(
            r"(?m)(?:def\s+(?:" + probe["names"] + r")\s*\(|^(?:" + probe["names"] + r")\s*[:=])", text
        ):
            continue
        if rx is not None and not rx.search(text):
            continue
        try:
            tree = reader.tree(path)
        except (SyntaxError, ValueError) as exc:
            errors.append({"file": _rel(root, path), "error": "cannot parse: " + str(exc)})
            continue
        lines = reader.get(path)
        defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        chosen = []
        if names is not None:
            chosen = [d for d in defs if names.fullmatch(d.name)]
        if rx is not None:
            hit_lines = [i for i, ln in enumerate(lines, 1) if rx.search(ln)]
            for n in hit_lines:
                inner = [d for d in defs if d.lineno <= n <= (d.end_lineno or d.lineno)]
                if inner:
                    chosen.append(max(inner, key=lambda d: d.lineno))
        module = {}
        for st in tree.body:
            targets = (
                st.targets
                if isinstance(st, ast.Assign)
                else [st.target]
                if isinstance(st, ast.AnnAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Name) and st.value is not None:
                    module[t.id] = st

        def src(node, lines=lines):
            return "\n".join(lines[node.lineno - 1 : node.end_lineno])

        for d in sorted({id(d): d for d in chosen}.values(), key=lambda d: d.lineno):
            decos = [
                c.args[0].value
                for c in d.decorator_list
                if isinstance(c, ast.Call)
                and c.args
                and isinstance(c.args[0], ast.Constant)
                and isinstance(c.args[0].value, str)
            ]
            used = {n.id for n in ast.walk(d) if isinstance(n, ast.Name)}
            out.append(
                {
                    "file": _rel(root, path),
                    "name": d.name,
                    "line": d.lineno,
                    "decorators": decos,
                    "source": src(d),
                    "globals": {
                        k: {"line": module[k].lineno, "source": src(module[k])}
                        for k in sorted(used)
                        if k in module
                    },
                }
            )
            if probe.get("follow"):
                out.extend(_followed(root, path, d, probe["follow"], reader))
        # module-level NAME = ... (lru_cache(partial(...)) predicates, dicts of names)
        if names is not None:
            for k, st in module.items():
                if names.fullmatch(k):
                    out.append(
                        {
                            "file": _rel(root, path),
                            "name": k,
                            "line": st.lineno,
                            "assign": True,
                            "source": src(st),
                        }
                    )
    return out


def _followed(root, path, fn, globs, reader):
    """The functions `fn` imports by name (`from sglang.x import f`, lazy imports too) from files matching
    globs: one level, so an implementation that hands its work to a kernel module is read with it."""
    allowed = set(_glob_files(root, globs))
    out = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.ImportFrom) or not node.module or not node.module.startswith("sglang."):
            continue
        target = os.path.normpath(os.path.join(root, *node.module.split(".")[1:]) + ".py")
        if target not in allowed or reader.get(target) is None:
            continue
        try:
            tree = reader.tree(target)
        except (SyntaxError, ValueError):
            continue
        wanted = {a.name for a in node.names}
        lines = reader.get(target)
        for d in tree.body:
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name in wanted:
                out.append(
                    {
                        "file": _rel(root, target),
                        "name": d.name,
                        "line": d.lineno,
                        "decorators": [],
                        "via": fn.name,
                        "source": "\n".join(lines[d.lineno - 1 : d.end_lineno]),
                    }
                )
    return out


def _fields(root, paths, reader, errors):
    """Class-level `name: T = CONSTANT` (dataclass defaults
    of the server arguments): {name: [value, file:line]}."""
    out = {}
    for path in paths:
        try:
            tree = reader.tree(path)
        except (SyntaxError, ValueError):
            continue
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                if (
                    isinstance(st, ast.AnnAssign)
                    and isinstance(st.target, ast.Name)
                    and isinstance(st.value, ast.Constant)
                ):
                    out.setdefault(st.target.id, [st.value.value, _rel(root, path) + ":" + str(st.lineno)])
    return out


def _model_config(path):
    """The model's config.json (architectures and the keys SGLang tests), or why not."""
    cfg = os.path.join(os.path.expanduser(path), "config.json")
    try:
        with open(cfg) as fh:
            return {"path": cfg, "config": json.load(fh)}
    except (OSError, ValueError) as exc:
        return {"path": cfg, "error": getattr(exc, "strerror", None) or str(exc)}


def _engine(want):
    """(rg path or None, the engine's label)."""
    rg = shutil.which("rg")
    if want == "rg" and not rg:
        raise UserError("--engine rg: ripgrep (rg) is not on this host's PATH")
    if not (rg and want in ("auto", "rg")):
        return None, "python"
    rc, out, _ = sh([rg, "--version"])
    return rg, "rg " + (out.split()[1] if rc == 0 and out.split()[1:] else "?")


def _probe_globs(args, roots):
    """{root folder: [patterns]}: every glob the scan will take (so their answers can be watched)."""
    out = {roots["sglang"]: [args["backends"]["files"]]}
    for probe in args["probes"]:
        root = roots.get(probe.get("root") or "sglang")
        if root:
            out.setdefault(root, []).extend(list(probe.get("files") or []) + list(probe.get("follow") or []))
    return out


def _plan(args, roots, backend_files, reader, errors):
    """Each probe's result (functions and fields filled in here) and the grep jobs the others need."""
    follows, jobs, results = {}, [], []
    for probe in args["probes"]:
        root_name = probe.get("root") or "sglang"
        root = roots.get(root_name)
        res = {"id": probe["id"], "root": root_name, "hits": [], "files": 0}
        results.append(res)
        if not root:
            res["missing_root"] = True
            continue
        paths = backend_files if probe.get("scope") == "backend" else _glob_files(root, probe["files"])
        if probe.get("follow") and probe.get("scope") == "backend":
            key = tuple(probe["follow"])
            if key not in follows:
                follows[key] = _follows(reader, root, backend_files, list(key))
            paths = sorted(set(paths) | {m for ms in follows[key].values() for m in ms})
            res["follows"] = {
                _rel(root, b): [_rel(root, m) for m in ms] for b, ms in follows[key].items() if ms
            }
        res["files"] = len(paths)
        kind = probe.get("kind")
        if kind == "functions":
            res["functions"] = _functions(root, paths, probe, reader, errors)
        elif kind == "fields":
            res["fields"] = _fields(root, paths, reader, errors)
        elif kind == "choices":
            regex = "|".join(
                re.escape(o) + "|" + re.escape(o.lstrip("-").replace("-", "_")) + r"\s*:"
                for o in probe["options"]
            )
            jobs.append({"id": probe["id"], "root": root_name, "paths": paths, "regex": regex})
        else:
            jobs.append(
                {
                    "id": probe["id"],
                    "root": root_name,
                    "paths": paths,
                    "regex": probe["regex"],
                    "ignore_case": probe.get("ignore_case"),
                }
            )
    return jobs, results


def _grep_hit(probe, root, path, line, text, reader):
    """One grep hit as the laptop reads it: where, the line, the def it sits in, names near it (window)."""
    hit = {
        "file": _rel(root, path),
        "line": line,
        "text": text.strip()[:300],
        "func": _enclosing(reader, path, line),
    }
    window = probe.get("window")
    if window is not None:
        near = (reader.get(path) or [])[max(0, line - 1 - window) : line]
        if probe.get("context"):
            ctx = re.compile(probe["context"])
            near = [ln for ln in near if ctx.search(ln)]
        hit["names"] = sorted({m for ln in near for m in _QUOTED.findall(ln)})
        hit["raises"] = _raises_after(reader.get(path), line)
    return hit


def _fill(args, roots, backend_files, results, found, reader, errors):
    """The grep probes' results from their hits (choices: the definitions the hits point at)."""
    by_id = {p["id"]: p for p in args["probes"]}
    for res in results:
        if res.get("missing_root") or res["id"] not in found:
            continue
        probe, root, hits = by_id[res["id"]], roots[res["root"]], found[res["id"]]
        if probe.get("kind") == "choices":
            paths = backend_files if probe.get("scope") == "backend" else _glob_files(root, probe["files"])
            hit_lines = {}
            for path, line, _ in hits:
                hit_lines.setdefault(path, []).append(line)
            res["definitions"] = _choices(root, paths, hit_lines, probe, reader, errors)
            continue
        res["hits"] = [_grep_hit(probe, root, path, line, text, reader) for path, line, text in sorted(hits)]


def _unreadable(reader, roots):
    out = [{"file": p, "error": e} for p, e in sorted(reader.errors.items())]
    for u in out:
        for name, root in roots.items():
            if root and os.path.abspath(u["file"]).startswith(os.path.abspath(root) + os.sep):
                u["file"] = _rel(root, u["file"])
                u["root"] = name
    return out


def _scan(args, roots, rg):
    """Everything the probes find in the trees' files (what the cache keeps)."""
    reader, fallbacks, errors = _Files(), [], []
    backend_files = _glob_files(roots["sglang"], [args["backends"]["files"]])
    jobs, results = _plan(args, roots, backend_files, reader, errors)
    found = _grep_rg(rg, jobs, reader, fallbacks) if rg else {j["id"]: _grep_python(j, reader) for j in jobs}
    _fill(args, roots, backend_files, results, found, reader, errors)
    return {
        "fallbacks": sorted(set(fallbacks)),
        "backend_files": [_rel(roots["sglang"], f) for f in backend_files],
        "results": results,
        "unreadable": _unreadable(reader, roots) + errors,
    }


def _cache(args, roots, sglang, engine_label):
    """The tree cache for this scan: named by the probes, the roots, the engine, this script and the Python
    that parses; watching every globbed file and folder and sglops' state folder (the patch ledger) of the
    tree."""
    loader = globals().get("__loader__")
    source = loader.get_source(__name__) if loader is not None and hasattr(loader, "get_source") else None
    key = {
        "probes": args["probes"],
        "backends": args["backends"],
        "roots": roots,
        "engine": engine_label,
        "script": source,
        "python": sys.version,
    }
    cache = TreeCache(key, enabled=bool(source) and args.get("cache", True))
    paths = {sglops_dir(sglang["root"], create=False)}
    for root, patterns in _probe_globs(args, roots).items():
        paths.update(glob_folders(root, patterns))
        for pat in patterns:
            paths.update(_glob_files(root, [pat]))
    return cache, paths


def main(args):
    start = time.monotonic()
    sglang = find_sglang(args.get("sglang_root"))
    fi = flashinfer_info()
    roots = {"sglang": sglang["package_dir"], "flashinfer": fi.get("location") if fi else None}
    rg, engine_label = _engine(args.get("engine") or "auto")
    cache, watched = _cache(args, roots, sglang, engine_label)
    found = cache.load()
    if found is None:
        watch = cache.snapshot(watched)
        found = _scan(args, roots, rg)
        cache.save(found, watch)
    extra = {}
    if args.get("model_path"):
        extra["model"] = _model_config(args["model_path"])
    if args.get("gpus"):
        from .facts import gpus

        rows, why = gpus()
        extra["gpus"] = {"gpus": rows, "error": why}
    return {
        "sglang": sglang,
        "flashinfer": fi,
        "engine": engine_label,
        **found,
        "seconds": round(time.monotonic() - start, 4),
        **extra,
    }
