"""Which attention path will THIS launch take: predicted from the host's release, not from a table.

The `launch_*` probes (playbooks/probes.yaml) bring back the release's own selection functions in the probe's
one round trip; this module evaluates them (sglops/probe/launch_eval.py) for one launch (model, KV dtype,
compute capability, flags) with the bindings of playbooks/attention_rules.yaml, and joins the answer with the
per-backend FP8 read modes the same probe run found. Every answer carries the file:line of the rule that
decided it.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from sglops.core.errors import ConfigError
from sglops.probe.launch_eval import (
    Evaluator,
    Func,
    Instance,
    Obj,
    Outcome,
    Step,
    Unknown,
    guards,
    is_unknown,
)
from sglops.probe.launch_fp8 import sparse_impl_modes, sparse_mode
from sglops.probe.launch_rules import (
    LAUNCH_PROBES,
    READ_MODE_WORDS,
    STAGE_FLAGS,
    Choice,
    Launch,
    LaunchPath,
    Rules,
    launch_for,
    load_rules,
)
from sglops.probe.launch_text import short_where

if TYPE_CHECKING:
    from sglops.probe.report import ProbeReport


# -- sources from the probe report ------------------------------------------------------------------------
def _functions(report: ProbeReport, probe_id: str) -> list[dict]:
    return next((r.get("functions") or [] for r in report.results if r["id"] == probe_id), [])


def _fields(report: ProbeReport) -> dict[str, list]:
    return next((r.get("fields") or {} for r in report.results if r["id"] == "launch_fields"), {})


def _parse_all(items: list[dict]) -> list[Func]:
    return [f for f in (Func.parse(d) for d in items if not d.get("assign")) if f is not None]


def _module_exprs(items: list[dict]) -> dict[str, ast.expr]:
    """Module-level NAME = expr, from assign entries and each function's globals."""
    out: dict[str, ast.expr] = {}

    def add(name: str, source: str) -> None:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return
        st = tree.body[0] if tree.body else None
        if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
            out.setdefault(name, st.value)

    for d in items:
        if d.get("assign"):
            add(d["name"], d["source"])
        for name, g in (d.get("globals") or {}).items():
            add(name, g["source"])
    return out


# -- the evaluator for one launch -------------------------------------------------------------------------
class _Ctx:
    def __init__(self, report: ProbeReport, launch: Launch, rules: Rules, mla: Any = None) -> None:
        self.report, self.launch, self.rules = report, launch, rules
        self.defaults = _fields(report)
        helper_items = _functions(report, "launch_helpers")
        flat = [d for p in LAUNCH_PROBES for d in _functions(report, p)]
        self.funcs: dict[str, Func] = {}
        for f in _parse_all(helper_items):
            self.funcs.setdefault(f.name, f)
        self.module = _module_exprs(flat)
        self.mla = mla
        self.ev: Evaluator | None = None
        self.build()

    def build(self) -> None:
        launch = self.launch
        cfg = Obj("config", lambda a: launch.config.get(a))
        model = Obj("model", self._model_attr)
        args = Obj("args", self._arg)
        runner = Obj(
            "runner",
            lambda a: (
                self.mla
                if a == "use_mla_backend"
                else model
                if a == "model_config"
                else args
                if a == "server_args"
                else Unknown("runner." + a)
            ),
        )
        objs = {"args": args, "config": cfg, "model": model, "runner": runner}
        objects = {name: objs[kind] for name, kind in self.rules.objects.items() if kind in objs}
        platform = Obj("platform", self._platform)
        kv_torch = (
            "torch.float8_e4m3fn"
            if launch.kv_dtype.startswith("fp8_e4m3")
            else ("torch.float8_e5m2" if launch.kv_dtype.startswith("fp8_e5m2") else "torch.bfloat16")
        )
        names = {
            "major": launch.capability[0],
            "minor": launch.capability[1],
            "kv_torch": kv_torch,
            "sm": launch.capability[0] * 10 + launch.capability[1],
            "cuda": launch.cuda,
            "arch": launch.arch,
            "kv": launch.kv_dtype,
            **objs,
        }

        def value(text: str) -> Any:
            def get(env: dict) -> Any:
                if text == "mla":
                    return self.mla if self.mla is not None else Unknown("use_mla_backend")
                return _eval_small(text, names)

            return get

        binds: list[tuple[re.Pattern, Any]] = [(rx, value(v)) for rx, v in self.rules.bindings]
        binds.append((re.compile(r"get_platform\(\)|current_platform"), platform))
        self.objs = objs
        self.names = names
        self.ev = Evaluator(binds, self.funcs, self.rules.watched, objects, self.module)
        self.ev.self_for = self.self_for

    def self_for(self, fn: Func) -> dict[str, Any]:
        """`self` of a method whose file says whose methods it holds (attention_rules.yaml self_by_file)."""
        kind = self.rules.self_by_file.get(fn.file)
        return {"self": self.objs[kind]} if kind in self.objs else {}

    def _model_attr(self, a: str) -> Any:
        if a in ("hf_config", "hf_text_config"):
            return self.ev.objects.get("hf_config") if self.ev else None
        if a == "attention_arch":
            return "MLA" if self.mla else Unknown("attention_arch")
        return Unknown("model_config." + a)

    def _arg(self, a: str) -> Any:
        flags = self.launch.flags
        if a == "kv_cache_dtype":
            return self.launch.kv_dtype
        for name in _aliases(a):
            if name in flags:
                return flags[name]
        for name in _aliases(a):
            if name in self.defaults:
                return self.defaults[name][0]
        return Unknown("args." + a)

    def _platform(self, a: str) -> Any:
        table = self.ev.global_value(self.rules.platform_map) if self.ev and self.rules.platform_map else None
        if isinstance(table, dict) and isinstance(table.get(a), str):
            return self.ev.call_named(table[a])
        if self.ev and (a in self.ev.funcs or a in self.ev.module):
            return self.ev.call_named(a)
        return Unknown("platform." + a)


def _aliases(name: str) -> list[str]:
    """`nsa_prefill_backend` and `dsa_prefill_backend` are one flag under two release names."""
    m = re.fullmatch(r"(nsa|dsa)_(\w+)", name)
    return [name, ("dsa_" if m.group(1) == "nsa" else "nsa_") + m.group(2)] if m else [name]


def _eval_small(text: str, names: dict[str, Any]) -> Any:
    """A binding's value expression over the inputs (names, tuples, lists, ==, in, and/or)."""
    ev = Evaluator([], {}, re.compile("$^"), {})
    return ev.expr(ast.parse(text, mode="eval").body, dict(names), 0)


def _steps(path: list[Step]) -> list[str]:
    return [str(s) for s in path]


# -- the questions, in SGLang's order ---------------------------------------------------------------------
def _is_mla(ctx: _Ctx, out: LaunchPath) -> bool | None:
    fns = _parse_all(_functions(ctx.report, "launch_mla_arch"))
    rx = re.compile(r"attention_arch\s*=\s*AttentionArch\.MLA")
    unknown = None
    for fn in fns:
        for st, chain in guards(fn, rx):
            ok = _chain(ctx, chain, fn)
            if ok is True:
                out.mla_rule = f"{fn.file}:{st.lineno} ({_last_cond(chain)})"
                return True
            if ok is None:
                unknown = f"{fn.file}:{st.lineno}"
    if unknown:
        out.undetermined.append(f"MLA: a condition at {unknown} reads something the launch does not say")
        return None
    out.mla_rule = (
        f"no MLA branch of {fns[0].file}:{fns[0].name} holds for {ctx.launch.arch}" if fns else "no MLA rule"
    )
    return False


def _chain(ctx: _Ctx, chain: list, fn: Func, why: list[str] | None = None) -> bool | None:
    """Whether every `if` on the way to a statement takes the branch that leads there (None: one is UNKNOWN);
    `why` gets the first condition that does not."""
    env = ctx.self_for(fn)
    for node, branch in chain:
        v = ctx.ev.truth(node.test, dict(env), 0)
        if is_unknown(v):
            return None
        if bool(v) != branch:
            if why is not None:
                text = ast.unparse(node.test)
                why.append(f"{fn.file}:{node.lineno} {text if branch else 'not (' + text + ')'} is False")
            return False
    return True


def _last_cond(chain: list) -> str:
    if not chain:
        return "always"
    node, branch = chain[-1]
    text = ast.unparse(node.test)
    text = text if len(text) < 90 else text[:87] + "..."
    return text if branch else f"not ({text})"


def _sparse(ctx: _Ctx, out: LaunchPath) -> str | None:
    """The nsa/dsa value a sparse model is switched to, or None (dense). Unknown: recorded, None."""
    fns = _parse_all(_functions(ctx.report, "launch_sparse_switch"))
    rx = re.compile(
        r"attention_backend(\"\])?\s*=\s*['\"](nsa|dsa)['\"]|\[['\"]attention_backend['\"]\]\s*=\s*['\"](nsa|dsa)"
    )
    why: list[str] = []
    for fn in fns:
        for st, chain in guards(fn, rx):
            value = ctx.ev.expr(st.value, ctx.self_for(fn), 0) if isinstance(st, ast.Assign) else None
            ok = _chain(ctx, chain, fn, why)
            where = f"{fn.file}:{st.lineno}"
            if ok is True:
                out.sparse_rule = f"{where} ({' and '.join(_conds(chain))})"
                return value
            if ok is None:
                out.undetermined.append(
                    f"sparse switch {where}: a condition reads something the launch does not say"
                )
                return None
    out.sparse_rule = f"not switched to nsa/dsa: {why[0]}" if why else "this release has no nsa/dsa switch"
    return None


def _conds(chain: list) -> list[str]:
    out = []
    for node, branch in chain:
        text = ast.unparse(node.test)
        text = text if len(text) < 70 else text[:67] + "..."
        out.append(text if branch else f"not ({text})")
    return out


def _registry(ctx: _Ctx) -> dict[str, Func]:
    return {d: f for f in _parse_all(_functions(ctx.report, "launch_registry")) for d in f.decorators}


def _backend_file(ctx: _Ctx, value: str | None) -> tuple[str | None, str]:
    """The backend file an option value builds (the registry's own function), or why not."""
    if value is None:
        return None, ""
    fn = _registry(ctx).get(value)
    if fn is None:
        return None, f"no registry entry for {value!r}"
    res = ctx.ev.run(fn)
    if res.raised:
        return None, f"refused at {res.raised_at}: {res.raised}"
    if isinstance(res.returned, Instance) and res.returned.module:
        mod = res.returned.module.rsplit(".", 1)[-1]
        return mod.removesuffix("_backend"), f"{res.returned_at}"
    if res.undetermined:
        return None, f"undetermined at {res.undetermined}"
    return None, f"{fn.file}:{fn.line} builds {getattr(res.returned, 'cls', res.returned)!r}"


def _dense(ctx: _Ctx, out: LaunchPath) -> None:
    flags = ctx.launch.flags
    default: Any = None
    where, because = "", []
    if not flags.get("attention_backend") and not all(flags.get(f) for f in STAGE_FLAGS.values()):
        fns = _parse_all(_functions(ctx.report, "launch_default_backend"))
        if not fns:
            out.undetermined.append("no default attention backend rule in this release")
        else:
            fn = fns[0]
            res = ctx.ev.run(
                fn, {"use_mla_backend": ctx.mla, "model_config": ctx.ev.objects.get("model_config")}
            )
            if res.undetermined:
                out.undetermined.append(f"default backend: undetermined at {res.undetermined}")
            default, where, because = res.returned, res.returned_at or "", _steps(res.path)
    for stage, flag in STAGE_FLAGS.items():
        if flags.get(flag):
            ch = Choice(stage, flags[flag], f"--{flag.replace('_', '-')}", ["set by the launch"])
        elif flags.get("attention_backend"):
            ch = Choice(stage, flags["attention_backend"], "--attention-backend", ["set by the launch"])
        else:
            ch = Choice(stage, default if isinstance(default, str) else None, where, because)
        out.choices.append(ch)


def _sparse_backends(ctx: _Ctx, out: LaunchPath) -> None:
    fns = [f for f in _parse_all(_functions(ctx.report, "launch_dsa_backends")) if _writes_stage(f)]
    res: Outcome | None = None
    fn = None
    for fn in fns:
        res = ctx.ev.run(fn, {"kv_cache_dtype": ctx.launch.kv_dtype, "major": ctx.launch.capability[0]})
        break
    _indexer(ctx, out, res)
    for stage in ("prefill", "decode"):
        flag = f"dsa_{stage}_backend"
        user = next((ctx.launch.flags[a] for a in _aliases(flag) if ctx.launch.flags.get(a)), None)
        if user:
            out.choices.append(Choice(stage, user, f"--{flag.replace('_', '-')}", ["set by the launch"]))
            continue
        if res is None:
            out.undetermined.append(f"{stage}: no NSA/DSA backend rule found")
            continue
        if res.raised:
            out.refused.append(f"{res.raised_at}: {res.raised}")
        write = next((res.writes[a] for a in _aliases(flag) if a in res.writes), None)
        if write is not None and not is_unknown(write[0]):
            out.choices.append(Choice(stage, write[0], write[1], _steps(write[2])))
        elif res.undetermined:
            out.undetermined.append(f"{stage}: undetermined at {res.undetermined}")
        else:
            dflt = next((ctx.defaults[a] for a in _aliases(flag) if a in ctx.defaults), None)
            out.choices.append(
                Choice(
                    stage,
                    dflt[0] if dflt else None,
                    dflt[1] if dflt else f"{fn.file}:{fn.line}",
                    ["the rule sets nothing: the field's default"],
                )
            )


def _indexer(ctx: _Ctx, out: LaunchPath, res: Outcome | None) -> None:
    """The DSA indexer's backends (attention_rules.yaml
    indexer_fields): the rule's write, the flag, the default."""
    rx = re.compile(ctx.rules.indexer_fields)
    for name, (value, where) in sorted(ctx.defaults.items()):
        if not rx.fullmatch(name):
            continue
        if res is not None and name in res.writes and not is_unknown(res.writes[name][0]):
            value, where, how = res.writes[name][0], res.writes[name][1], "set by the rule"
        elif ctx.launch.flags.get(name):
            value, how = ctx.launch.flags[name], "set by the launch"
        else:
            how = "the field's default"
        out.indexer.append({"field": name, "value": value, "where": where, "how": how})


def _writes_stage(fn: Func) -> bool:
    for node in ast.walk(fn.node):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                name = (
                    t.attr
                    if isinstance(t, ast.Attribute)
                    else (
                        t.slice.value
                        if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                        else None
                    )
                )
                if isinstance(name, str) and re.fullmatch(r"(nsa|dsa)_(prefill|decode)_backend", name):
                    return True
    return False


def _read_mode(ctx: _Ctx, ch: Choice, sparse_modes: dict) -> None:
    if ch.backend_file in ("dsa", "nsa") and ch.value:
        ch.read_mode, ch.evidence = sparse_mode(ch.value, sparse_modes, ch.stage)
        if ch.read_mode == "unknown":
            ch.note = f"no {ch.value} branch or _forward_{ch.value} method found in the sparse backend"
        return
    if ch.backend_file:
        facts = ctx.report.facts
        ch.read_mode = facts.get(f"backend.{ch.backend_file}.fp8_read_mode")
        ch.evidence = list(facts.get(f"backend.{ch.backend_file}.fp8_read_evidence") or [])[:3]


# -- the whole answer -------------------------------------------------------------------------------------
def predict(report: ProbeReport, launch: Launch, rules: Rules | None = None) -> LaunchPath:
    """The attention path this launch takes on the release the report read."""
    rules = rules or load_rules()
    sm = f"sm{launch.capability[0]}{launch.capability[1]}"
    out = LaunchPath(report.facts.get("sglang_version"), launch.arch, launch.kv_dtype, sm, dict(launch.flags))
    out.assumed.append(
        f"CUDA {launch.cuda[0]}.{launch.cuda[1]}, a CUDA host, no speculative decoding; model config "
        f"from {launch.config_source}"
    )
    _refuse_unknown_values(report, launch, out)
    launch = _apply_aliases(report, launch, out)
    ctx = _Ctx(report, launch, rules)
    ctx.mla = out.mla = _is_mla(ctx, out)
    sparse_value = _sparse(ctx, out)
    out.sparse = bool(sparse_value)
    sparse_modes = sparse_impl_modes(report, rules)
    if sparse_value:
        out.limits = [
            f"{h['file']}:{h['line']} {h['text'][:100]}"
            for r in report.results
            if r["id"] == "launch_sparse_limits"
            for h in r.get("hits", [])
        ][:6]
        file, _why = _backend_file(ctx, sparse_value)
        _sparse_backends(ctx, out)
        for ch in out.choices:
            ch.backend_file = file or sparse_value
    else:
        _dense(ctx, out)
        for ch in out.choices:
            ch.backend_file, why = _backend_file(ctx, ch.value)
            if ch.backend_file is None and why:
                ch.note = why
                if why.startswith("refused"):
                    out.refused.append(f"--attention-backend {ch.value}: {why}")
    if all(c.value for c in out.choices) and ("sparse" if out.sparse else "dense") in rules.validate_on:
        _validate(ctx, out)
    for ch in out.choices:
        _read_mode(ctx, ch, sparse_modes)
        if ch.read_mode and launch.kv_dtype.startswith("fp8"):
            ch.note = ch.note or READ_MODE_WORDS.get(ch.read_mode, ch.read_mode)
    out.changes = _changes(ctx, out, sparse_modes)
    return out


def _validate(ctx: _Ctx, out: LaunchPath) -> None:
    """Run the release's start-up checks on the predicted
    backends: a raise is a refusal before any restart."""
    names = dict(ctx.names)
    for ch in out.choices:
        names[ch.stage] = ch.value
    for fn in _parse_all(_functions(ctx.report, "launch_validators")):
        a = fn.node.args
        params = a.posonlyargs + a.args + a.kwonlyargs
        defaults = len(a.defaults)
        optional = {p.arg for p in (a.posonlyargs + a.args)[len(a.posonlyargs + a.args) - defaults :]} | {
            p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None
        }
        args, missing = {}, []
        for p in params:
            spec = ctx.rules.validators.get(p.arg)
            if isinstance(spec, dict):
                ann = ast.unparse(p.annotation) if p.annotation is not None else "default"
                spec = spec.get(ann, spec.get("default"))
            if spec is None:
                if p.arg not in optional:
                    missing.append(p.arg)
                continue
            args[p.arg] = _eval_small(str(spec), names)
        if missing:
            out.assumed.append(
                f"start-up check {fn.name} ({fn.file}:{fn.line}) not run: it reads {', '.join(missing)}"
            )
            continue
        res = ctx.ev.run(fn, args)
        if res.raised:
            out.refused.append(f"{res.raised_at}: {res.raised}")
        elif res.undetermined:
            out.undetermined.append(f"start-up check {fn.name}: undetermined at {res.undetermined}")


def backend_aliases(report: ProbeReport) -> dict[str, tuple[str, str]]:
    """{old value: (new value, file:line)} from the release's
    own deprecated-alias dicts (launch_backend_aliases)."""
    out: dict[str, tuple[str, str]] = {}
    for r in report.results:
        if r["id"] != "launch_backend_aliases":
            continue
        for h in r.get("hits", []):
            try:
                d = ast.literal_eval(h["text"].split("=", 1)[1].strip())
            except (ValueError, SyntaxError, IndexError):
                continue
            if isinstance(d, dict):
                out.update(
                    {
                        k: (v, f"{h['file']}:{h['line']}")
                        for k, v in d.items()
                        if isinstance(k, str) and isinstance(v, str)
                    }
                )
    return out


def _apply_aliases(report: ProbeReport, launch: Launch, out: LaunchPath) -> Launch:
    """A deprecated value the release renames (tokenspeed_mla
    -> cutedsl_mla in 0.5.23) is predicted as its target."""
    aliases = backend_aliases(report)
    flags = dict(launch.flags)
    for key in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        if flags.get(key) in aliases:
            new, where = aliases[flags[key]]
            out.renamed.append(
                f"--{key.replace('_', '-')} {flags[key]} is a deprecated alias of {new} in sglang "
                f"{out.version} ({where})"
            )
            flags[key] = new
    return Launch(**{**launch.__dict__, "flags": flags})


def _refused_with(ctx: _Ctx, out: LaunchPath, stage: str, value: str) -> str | None:
    """Whether the release's start-up checks refuse this
    launch with `stage` set to `value` (where, else None)."""
    if ("sparse" if out.sparse else "dense") not in ctx.rules.validate_on:
        return None
    trial = LaunchPath(
        out.version,
        out.arch,
        out.kv_dtype,
        out.sm,
        out.flags,
        sparse=out.sparse,
        choices=[Choice(c.stage, value if c.stage == stage else c.value, "", []) for c in out.choices],
    )
    _validate(ctx, trial)
    return trial.refused[0].split(": ", 1)[0] if trial.refused else None


def _refuse_unknown_values(report: ProbeReport, launch: Launch, out: LaunchPath) -> None:
    from sglops.probe.backend_history import removed_note

    facts = report.facts
    for flag, fact in (
        ("attention_backend", "attention_backends"),
        ("prefill_attention_backend", "attention_backends"),
        ("decode_attention_backend", "attention_backends"),
        ("dsa_prefill_backend", "dsa_prefill_backends"),
        ("dsa_decode_backend", "dsa_decode_backends"),
    ):
        val = next((launch.flags[a] for a in _aliases(flag) if launch.flags.get(a)), None)
        valid = facts.get(fact)
        if val and valid and val not in valid:
            out.refused.append(
                f"--{flag.replace('_', '-')} {val} is not a choice of sglang {out.version}"
                + removed_note(fact, val, out.version)
            )


def _changes(ctx: _Ctx, out: LaunchPath, sparse_modes: dict[str, tuple[str, list[str]]]) -> list[str]:
    """What the user can set to get another path: each
    other choice of the deciding flag with its read mode."""
    facts = ctx.report.facts
    lines = []
    if out.sparse:
        for stage in ("decode", "prefill"):
            choices = facts.get(f"dsa_{stage}_backends") or []
            flag = facts.get(f"dsa_{stage}_backends.flag") or f"--dsa-{stage}-backend"
            cur = out.choice(stage)
            others, refused_by = [], {}
            for c in choices:
                if cur and c == cur.value:
                    continue
                refused = _refused_with(ctx, out, stage, c)
                if refused:
                    refused_by.setdefault(short_where(refused), []).append(c)
                else:
                    others.append(f"{c} ({READ_MODE_WORDS.get(sparse_mode(c, sparse_modes, stage)[0], '?')})")
            text = ", ".join(others) or "nothing else starts"
            for where, vals in refused_by.items():
                text += f"; refused at start-up by {where}: {', '.join(vals)}"
            if choices:
                lines.append(f"{flag}: {text}")
        if ctx.launch.kv_dtype.startswith("fp8"):
            alt = predict_with(ctx.report, ctx.launch, kv_dtype="bfloat16")
            lines.append(
                "--kv-cache-dtype bfloat16: " + ", ".join(f"{c.stage} {c.value}" for c in alt.choices)
            )
        lines.append(
            "--attention-backend X: leaves the sparse path (the release switches to nsa/dsa only when no "
            "attention backend is set)"
        )
    else:
        cur = out.choice("decode")
        names = [c for c in facts.get("attention_backends") or [] if c in _registry(ctx)]
        alts = []
        for c in names:
            if cur and c == cur.value:
                continue
            file, why = _backend_file(ctx, c)
            if file is None:
                continue
            mode = facts.get(f"backend.{file}.fp8_read_mode")
            req = [
                r
                for r in facts.get(f"backend.{file}.arch_rules") or []
                if r.get("kind") == "requirement" and c in r.get("values", [])
            ]
            guard = f", needs {req[0]['platform']} ({req[0]['where'].rsplit('/', 1)[-1]})" if req else ""
            alts.append(f"{c} -> {file}_backend.py ({READ_MODE_WORDS.get(mode or 'unknown', mode)}{guard})")
        if alts:
            lines.append(
                "--attention-backend: "
                + "; ".join(alts[:10])
                + (f" (+{len(alts) - 10} more: --json)" if len(alts) > 10 else "")
            )
    return lines


def predict_with(report: ProbeReport, launch: Launch, **changes: Any) -> LaunchPath:
    """The same launch with some inputs changed (no `changes` list of its own)."""
    new = Launch(**{**launch.__dict__, **changes})
    rules = load_rules()
    out = LaunchPath(report.facts.get("sglang_version"), new.arch, new.kv_dtype, "", dict(new.flags))
    ctx = _Ctx(report, new, rules)
    ctx.mla = out.mla = _is_mla(ctx, out)
    if _sparse(ctx, out):
        _sparse_backends(ctx, out)
    else:
        _dense(ctx, out)
    return out


LAUNCH_FLAGS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "dsa_prefill_backend",
    "dsa_decode_backend",
    "nsa_prefill_backend",
    "nsa_decode_backend",
    "enable_hisparse",
)


def ask(
    report: ProbeReport,
    *,
    arch: str | None,
    kv_dtype: str | None,
    sm: str | None,
    profile_args: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The launch question for a probe run: config.json as the same trip read it (else the --arch seed), the
    GPU from --sm or the trip's nvidia-smi, flags from a profile then the command line. Returns LaunchPath
    JSON."""
    rules = load_rules()
    profile_args = profile_args or {}
    model = report.extra.get("model") or {}
    config, source = None, ""
    if model.get("config") and not arch:
        config, source = model["config"], f"{model['path']} on the host"
    elif model.get("error") and not arch:
        raise ConfigError(
            f"cannot read the model's config.json on the host: {model['path']}: {model['error']} "
            "(pass --arch NAME to use a seed config)"
        )
    if not sm:
        gpus = (report.extra.get("gpus") or {}).get("gpus") or []
        if not gpus:
            why = (report.extra.get("gpus") or {}).get("error") or "no GPUs"
            raise ConfigError(f"the host reports no GPU ({why}): pass --sm sm90|sm100|sm120")
        sm = gpus[0]["sm"]
    merged = {k: v for k, v in profile_args.items() if k in LAUNCH_FLAGS and v is not None}
    merged.update({k: v for k, v in (flags or {}).items() if v is not None})
    kv = kv_dtype or str(profile_args.get("kv_cache_dtype") or "auto")
    launch = launch_for(
        rules, arch=arch, config=config, config_source=source, kv_dtype=kv, sm=sm, flags=merged
    )
    return predict(report, launch, rules).to_json()
