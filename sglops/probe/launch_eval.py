"""A small evaluator for SGLang's own backend-selection functions, read from the release's source.

SGLang picks a launch's attention backends in plain Python (`get_default_attn_backend`, the DSA resolvers, the
registry). Rather than restating those rules per release, sglops runs the release's functions symbolically:
the inputs (GPU capability, model config, flags) are bound by data (playbooks/attention_rules.yaml), anything
else is UNKNOWN, and a branch that depends on an UNKNOWN condition is reported, never guessed. Nothing is
imported or executed; only the AST is walked.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Unknown:
    """A value the evaluator cannot know (an input no rule binds); carries the expression for the report."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Unknown({self.text})"


def is_unknown(v: Any) -> bool:
    return isinstance(v, Unknown)


@dataclass
class Obj:
    """An input object (the server args, the model config, the runner): attribute -> value via a lookup."""

    kind: str
    get: Callable[[str], Any]


@dataclass
class Instance:
    """`SomeBackend(runner)`: a class constructed, and the module it was imported from."""

    cls: str
    module: str | None


@dataclass
class Partial:
    """`partial(f, k=v)` (how SGLang builds its platform predicates): f's name and the bound keywords."""

    func: str
    kwargs: dict[str, Any]


@dataclass
class Func:
    """One function of the release: where it is and its parsed body (line numbers are the file's)."""

    file: str
    name: str
    line: int
    node: ast.FunctionDef
    decorators: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, d: dict) -> Func | None:
        try:
            tree = ast.parse(textwrap.dedent(d["source"]))
        except SyntaxError:
            return None
        node = tree.body[0] if tree.body else None
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        ast.increment_lineno(tree, d["line"] - node.lineno)
        return cls(d["file"], d["name"], d["line"], node, d.get("decorators", []))


@dataclass
class Step:
    """A condition taken on the way to a result: file:line, the condition's text and its value."""

    where: str
    text: str
    value: bool

    def __str__(self) -> str:
        return f"{self.where} {'' if self.value else 'not '}({self.text})"


@dataclass
class Outcome:
    """What running a function gave: its return, a raise, the fields it wrote, or where it got stuck."""

    returned: Any = None
    returned_at: str | None = None
    raised: str | None = None
    raised_at: str | None = None
    # field -> (value, file:line, path)
    writes: dict[str, tuple[Any, str, list[Step]]] = field(default_factory=dict)
    # "file:line: cond" where an UNKNOWN condition decided something that mattered
    undetermined: str | None = None
    path: list[Step] = field(default_factory=list)
    done: bool = False


class _Stop(Exception):
    pass


MAX_DEPTH = 6


class Evaluator:
    """Runs a Func with bindings. `bindings`: (regex on ast.unparse(expr), value-or-callable) checked first
    for names, attributes and calls; `funcs`: other functions of the release a call may enter (by name)."""

    def __init__(
        self,
        bindings: list[tuple[re.Pattern, Any]],
        funcs: dict[str, Func],
        watched: re.Pattern,
        objects: dict[str, Obj],
        module: dict[str, ast.expr] | None = None,
    ) -> None:
        self.bindings = bindings
        self.funcs = funcs
        # field names whose writes are recorded (e.g. dsa_prefill_backend)
        self.watched = watched
        # names bound to input objects wherever they appear (self, view, cfg, hf_config)
        self.objects = objects
        # module-level NAME = expr of the release (predicates, name lists)
        self.module = module or {}
        self.self_for: Callable[[Func], dict[str, Any]] = lambda fn: {}
        self._module_values: dict[str, Any] = {}

    def global_value(self, name: str, depth: int = 0) -> Any:
        """A module-level name of the release, evaluated once (Unknown when the tree does not define it)."""
        if name not in self._module_values:
            # a cycle reads Unknown
            self._module_values[name] = Unknown(name)
            if name in self.module:
                self._module_values[name] = self.expr(self.module[name], {}, depth)
        return self._module_values[name]

    def call_named(self, name: str, args: dict[str, Any] | None = None, depth: int = 0) -> Any:
        """Call a function or predicate of the release by name (no positional args)."""
        if name in self.funcs:
            res = self.run(self.funcs[name], args, depth + 1)
            return Unknown(name + "()") if res.undetermined or res.raised or not res.done else res.returned
        target = self.global_value(name, depth)
        if isinstance(target, Partial) and target.func in self.funcs:
            return self.call_named(target.func, {**target.kwargs, **(args or {})}, depth + 1)
        return Unknown(name + "()")

    # -- statements ------------------------------------------------------------------------------
    def run(self, fn: Func, args: dict[str, Any] | None = None, depth: int = 0) -> Outcome:
        env: dict[str, Any] = {}
        params = [a.arg for a in fn.node.args.posonlyargs + fn.node.args.args]
        for p in params:
            env[p] = self.objects.get(p, Unknown(p))
        env.update(self.self_for(fn))
        env.update(args or {})
        out = Outcome()
        try:
            self._block(fn.node.body, env, fn, out, [], depth)
        except _Stop:
            pass
        return out

    def _where(self, fn: Func, node: ast.AST) -> str:
        return f"{fn.file}:{node.lineno}"

    def _block(
        self, stmts: list[ast.stmt], env: dict, fn: Func, out: Outcome, path: list[Step], depth: int
    ) -> None:
        for st in stmts:
            self._stmt(st, env, fn, out, path, depth)
            if out.done:
                return

    def _matters(self, stmts: list[ast.stmt]) -> bool:
        """A block that returns, raises or writes a watched
        field: an UNKNOWN condition over it is decisive."""
        for node in (n for st in stmts for n in ast.walk(st)):
            if isinstance(node, (ast.Return, ast.Raise)):
                return True
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(self._field(t) for t in targets):
                    return True
        return False

    def _field(self, t: ast.AST) -> str | None:
        """`self.X = ` / `view.X = ` / `declared["X"] = ` on a watched field: the field name."""
        name = None
        if isinstance(t, ast.Attribute):
            name = t.attr
        elif (
            isinstance(t, ast.Subscript)
            and isinstance(t.slice, ast.Constant)
            and isinstance(t.slice.value, str)
        ):
            name = t.slice.value
        return name if name and self.watched.fullmatch(name) else None

    def _stmt(self, st: ast.stmt, env: dict, fn: Func, out: Outcome, path: list[Step], depth: int) -> None:
        if isinstance(st, ast.Return):
            out.returned = self.expr(st.value, env, depth) if st.value is not None else None
            out.returned_at, out.path, out.done = self._where(fn, st), list(path), True
        elif isinstance(st, ast.Raise):
            out.raised = _raise_text(st)
            out.raised_at, out.path, out.done = self._where(fn, st), list(path), True
        elif isinstance(st, ast.If):
            cond = self.truth(st.test, env, depth)
            if is_unknown(cond):
                if self._matters(st.body) or self._matters(st.orelse):
                    out.undetermined = f"{self._where(fn, st)}: {ast.unparse(st.test)}"
                    out.path, out.done = list(path), True
                    raise _Stop
                return
            step = Step(self._where(fn, st), _cond_text(st.test, env), bool(cond))
            self._block(st.body if cond else st.orelse, env, fn, out, path + [step], depth)
        elif isinstance(st, (ast.Assign, ast.AnnAssign)):
            if st.value is None:
                return
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            value = self.expr(st.value, env, depth)
            for t in targets:
                self._assign(t, value, env, fn, out, path, st)
        elif isinstance(st, (ast.Try,)):
            self._block(st.body, env, fn, out, path, depth)
        elif isinstance(st, (ast.With,)):
            self._block(st.body, env, fn, out, path, depth)
        elif isinstance(st, ast.ImportFrom):
            for a in st.names:
                env[a.asname or a.name] = Instance(a.name, st.module) if st.module else Unknown(a.name)
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            if isinstance(st.value.func, ast.Attribute) and st.value.func.attr == "update":
                target = self.expr(st.value.func.value, env, depth)
                if isinstance(target, dict) and st.value.args:
                    other = self.expr(st.value.args[0], env, depth)
                    if isinstance(other, dict):
                        target.update(other)
        elif isinstance(st, (ast.For, ast.While)):
            if self._matters(st.body):
                # a loop over data the evaluator does not hold: only fatal when it is reached at all
                out.undetermined = (
                    f"{self._where(fn, st)}: a loop"
                    f" ({ast.unparse(st.iter if isinstance(st, ast.For) else st.test)[:60]})"
                )
                out.path, out.done = list(path), True
                raise _Stop

    def _assign(
        self, t: ast.AST, value: Any, env: dict, fn: Func, out: Outcome, path: list[Step], st: ast.stmt
    ) -> None:
        if isinstance(t, ast.Name):
            env[t.id] = value
            text = " ".join(ast.unparse(st.value).split())
            env.setdefault("__src__", {})[t.id] = text if len(text) <= 160 else text[:157] + "..."
        elif isinstance(t, ast.Tuple):
            for i, elt in enumerate(t.elts):
                v = (
                    value[i]
                    if isinstance(value, (tuple, list)) and i < len(value)
                    else Unknown(ast.unparse(elt))
                )
                self._assign(elt, v, env, fn, out, path, st)
        else:
            name = self._field(t)
            if name:
                out.writes[name] = (value, self._where(fn, st), list(path))
            if isinstance(t, ast.Subscript):
                holder = self.expr(t.value, env, 0)
                key = self.expr(t.slice, env, 0)
                if isinstance(holder, dict) and isinstance(key, str):
                    holder[key] = value

    # -- expressions -----------------------------------------------------------------------------
    def _bound(self, node: ast.AST, env: dict) -> tuple[bool, Any]:
        text = ast.unparse(node)
        for rx, value in self.bindings:
            if rx.fullmatch(text):
                return True, value(env) if callable(value) else value
        return False, None

    def truth(self, node: ast.AST, env: dict, depth: int) -> Any:
        v = self.expr(node, env, depth)
        if is_unknown(v):
            return v
        if isinstance(v, (Obj, Instance)):
            return True
        return bool(v)

    def expr(self, node: ast.AST | None, env: dict, depth: int) -> Any:  # noqa: C901 (one dispatch)
        if node is None:
            return None
        found, value = self._bound(node, env)
        if found:
            return value
        text = ast.unparse(node)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.objects:
                return self.objects[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            if node.id in self.module:
                return self.global_value(node.id, depth)
            return Unknown(text)
        if isinstance(node, ast.BinOp):
            a, b = self.expr(node.left, env, depth), self.expr(node.right, env, depth)
            if is_unknown(a) or is_unknown(b):
                return Unknown(text)
            try:
                return _BINOPS[type(node.op)](a, b)
            except (KeyError, TypeError, ZeroDivisionError):
                return Unknown(text)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [self.expr(e, env, depth) for e in node.elts]
            if isinstance(node, ast.Set):
                try:
                    return set(items)
                except TypeError:
                    return Unknown(text)
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            if not node.keys:
                return {}
            return {
                self.expr(k, env, depth): self.expr(v, env, depth)
                for k, v in zip(node.keys, node.values, strict=False)
                if k is not None
            }
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, env, depth)
            if isinstance(base, Obj):
                return base.get(node.attr)
            return Unknown(text)
        if isinstance(node, ast.Subscript):
            base, key = self.expr(node.value, env, depth), self.expr(node.slice, env, depth)
            if is_unknown(base) or is_unknown(key):
                return Unknown(text)
            try:
                return base[key]
            except (KeyError, IndexError, TypeError):
                return Unknown(text)
        if isinstance(node, ast.BoolOp):
            return self._boolop(node, env, depth)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.truth(node.operand, env, depth)
            return v if is_unknown(v) else not v
        if isinstance(node, ast.IfExp):
            c = self.truth(node.test, env, depth)
            if is_unknown(c):
                return Unknown(text)
            return self.expr(node.body if c else node.orelse, env, depth)
        if isinstance(node, ast.Compare):
            return self._compare(node, env, depth)
        if isinstance(node, ast.Call):
            return self._call(node, env, depth)
        if isinstance(node, ast.JoinedStr):
            return Unknown(text)
        return Unknown(text)

    def _boolop(self, node: ast.BoolOp, env: dict, depth: int) -> Any:
        """Python's and/or (the operand, not a bool: `archs or []`); an UNKNOWN operand only matters if
        reached before the answer is decided."""
        is_and = isinstance(node.op, ast.And)
        unknown = None
        value: Any = None
        for v in node.values:
            value = self.expr(v, env, depth)
            t = value if is_unknown(value) else (True if isinstance(value, (Obj, Instance)) else bool(value))
            if is_unknown(t):
                unknown = unknown or t
            # False in an and, True in an or: decided whatever the unknowns are
            elif t is (not is_and):
                return value
        return unknown if unknown is not None else value

    def _compare(self, node: ast.Compare, env: dict, depth: int) -> Any:
        left = self.expr(node.left, env, depth)
        for op, comp in zip(node.ops, node.comparators, strict=False):
            right = self.expr(comp, env, depth)
            if is_unknown(left) or is_unknown(right) or isinstance(left, Obj) or isinstance(right, Obj):
                if (
                    isinstance(op, (ast.Is, ast.IsNot))
                    and right is None
                    and isinstance(left, (Obj, Instance))
                ):
                    ok = isinstance(op, ast.IsNot)
                else:
                    return Unknown(ast.unparse(node))
            else:
                try:
                    ok = _OPS[type(op)](left, right)
                except (TypeError, KeyError):
                    return Unknown(ast.unparse(node))
            if not ok:
                return False
            left = right
        return True

    def _call(self, node: ast.Call, env: dict, depth: int) -> Any:
        text = ast.unparse(node)
        func = node.func
        name = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        known = self._builtin(name, node, env, depth, text)
        if known is not _NOT_BUILTIN:
            return known
        return self._code_call(name, node, env, depth, text)

    def _builtin(self, name: str | None, node: ast.Call, env: dict, depth: int, text: str) -> Any:
        """A call of a builtin the evaluator knows (isinstance, hasattr, getattr, set, bool, len, ...,
        dict.get); _NOT_BUILTIN for any other call."""
        func = node.func
        if name == "isinstance" and len(node.args) == 2 and isinstance(func, ast.Name):
            v = self.expr(node.args[0], env, depth)
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            types = {"dict": dict, "list": list, "tuple": tuple, "str": str, "int": int, "bool": bool}
            if is_unknown(v) or not all(isinstance(k, ast.Name) and k.id in types for k in kinds):
                return Unknown(text)
            return not isinstance(v, (Obj, Instance)) and isinstance(v, tuple(types[k.id] for k in kinds))
        if name == "hasattr" and len(node.args) == 2:
            base, attr = self.expr(node.args[0], env, depth), self.expr(node.args[1], env, depth)
            if isinstance(base, Obj) and isinstance(attr, str):
                v = base.get(attr)
                return Unknown(text) if is_unknown(v) else v is not None
            return Unknown(text)
        if name == "getattr" and len(node.args) >= 2:
            base, attr = self.expr(node.args[0], env, depth), self.expr(node.args[1], env, depth)
            if isinstance(base, Obj) and isinstance(attr, str):
                v = base.get(attr)
                if v is None and len(node.args) > 2:
                    return self.expr(node.args[2], env, depth)
                return v
            return Unknown(text)
        if name in ("frozenset", "set") and isinstance(func, ast.Name) and len(node.args) == 1:
            v = self.expr(node.args[0], env, depth)
            return Unknown(text) if is_unknown(v) or not isinstance(v, (list, tuple, set, dict)) else set(v)
        if (
            name in ("bool", "str", "int", "len", "tuple", "list")
            and isinstance(func, ast.Name)
            and node.args
        ):
            v = self.expr(node.args[0], env, depth)
            if is_unknown(v) or isinstance(v, Obj):
                return Unknown(text) if name != "bool" or is_unknown(v) else True
            try:
                return {"bool": bool, "str": str, "int": int, "len": len, "tuple": tuple, "list": list}[name](
                    v
                )
            except (TypeError, ValueError):
                return Unknown(text)
        if name == "get" and isinstance(func, ast.Attribute):
            base = self.expr(func.value, env, depth)
            key = self.expr(node.args[0], env, depth) if node.args else None
            if isinstance(base, dict) and isinstance(key, str):
                return base.get(key, self.expr(node.args[1], env, depth) if len(node.args) > 1 else None)
        return _NOT_BUILTIN

    def _code_call(self, name: str | None, node: ast.Call, env: dict, depth: int, text: str) -> Any:
        """A call into the evaluated code: a class constructed, a decorated or partial function, a function of
        the module or the class followed (to MAX_DEPTH)."""
        func = node.func
        callee = env.get(name) if isinstance(func, ast.Name) else None
        # an imported class, constructed
        if isinstance(callee, Instance) and callee.cls[:1].isupper():
            return Instance(callee.cls, callee.module)
        # lru_cache(maxsize=1)(partial(...)): the decorated thing itself
        if isinstance(func, ast.Call):
            inner = func.func.id if isinstance(func.func, ast.Name) else getattr(func.func, "attr", None)
            if inner in ("lru_cache", "cache") and node.args:
                return self.expr(node.args[0], env, depth)
        if name == "partial" and node.args and isinstance(node.args[0], ast.Name):
            return Partial(
                node.args[0].id, {k.arg: self.expr(k.value, env, depth) for k in node.keywords if k.arg}
            )
        if (
            isinstance(func, ast.Name)
            and name not in self.funcs
            and name in self.module
            and depth < MAX_DEPTH
        ):
            return self.call_named(name, None, depth)
        if name in self.funcs and depth < MAX_DEPTH:
            fn = self.funcs[name]
            params = [a.arg for a in fn.node.args.posonlyargs + fn.node.args.args]
            if params and params[0] == "self" and isinstance(func, ast.Attribute):
                params = params[1:]
            bound = {p: self.expr(a, env, depth) for p, a in zip(params, node.args, strict=False)}
            bound.update({k.arg: self.expr(k.value, env, depth) for k in node.keywords if k.arg})
            res = self.run(fn, bound, depth + 1)
            if res.undetermined or res.raised or not res.done:
                return Unknown(text)
            return res.returned
        if isinstance(func, ast.Name) and name and name[:1].isupper():
            return Instance(name, None)
        return Unknown(text)


# _builtin's answer for a call it does not evaluate itself
_NOT_BUILTIN = object()


def _cond_text(test: ast.expr, env: dict) -> str:
    """A condition as written, with the definition of a local flag it tests (`is_glm_sm12_fp8 [= ...]`)."""
    text = ast.unparse(test)
    name = test.operand if isinstance(test, ast.UnaryOp) else test
    src = env.get("__src__", {}).get(name.id) if isinstance(name, ast.Name) else None
    return f"{text} [{name.id} = {src}]" if src else text


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitOr: lambda a, b: a | b,
}

_OPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _raise_text(st: ast.Raise) -> str:
    exc = st.exc
    if isinstance(exc, ast.Call) and exc.args:
        first = exc.args[0]
        if isinstance(first, ast.Constant):
            return str(first.value)
        if isinstance(first, ast.JoinedStr):
            return "".join(
                v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                for v in first.values
            )
        return ast.unparse(first)
    return ast.unparse(exc) if exc is not None else "raise"


def guards(fn: Func, line_rx: re.Pattern) -> list[tuple[ast.stmt, list[tuple[ast.If, bool]]]]:
    """The statements of fn matching line_rx (by their unparsed text) and the `if`s on the way to each: (if,
    branch taken: True for its body, False for its else). Used for `attention_arch = AttentionArch.MLA` and
    the sparse switch."""
    found: list[tuple[ast.stmt, list[tuple[ast.If, bool]]]] = []

    def walk(stmts: list[ast.stmt], chain: list[tuple[ast.If, bool]]) -> None:
        for st in stmts:
            if isinstance(st, ast.If):
                walk(st.body, chain + [(st, True)])
                walk(st.orelse, chain + [(st, False)])
            elif isinstance(st, (ast.For, ast.While, ast.With, ast.Try)):
                walk(st.body, chain)
            elif line_rx.search(ast.unparse(st)) and not isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                found.append((st, chain))

    walk(fn.node.body, [])
    return found
