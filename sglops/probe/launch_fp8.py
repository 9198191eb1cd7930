"""How each NSA/DSA implementation reads an FP8 KV pool, read from the sparse backend's own code.

The `launch_sparse_impls` probe brings back forward_extend / forward_decode, the `_forward_<impl>` methods and
the kernel functions they import; the lines of each implementation's branch are matched against the modes of
playbooks/attention_rules.yaml (`sparse_impl.modes`), first hit wins, evidence kept.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from sglops.probe.launch_eval import Func

if TYPE_CHECKING:
    from sglops.probe.launch_rules import Rules
    from sglops.probe.report import ProbeReport


def _functions(report: ProbeReport, probe_id: str) -> list[dict]:
    return next((r.get("functions") or [] for r in report.results if r["id"] == probe_id), [])


STAGE_FORWARD = {"prefill": "forward_extend", "decode": "forward_decode"}


def _impl_lines(report: ProbeReport) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """{impl: {stage: [(file:line, text)]}}: the lines of each `if <impl var> == "impl"` branch of the sparse
    backend's forward_extend / forward_decode, with the `_forward_*` methods (and the kernel functions they
    import) those branches call; an impl no branch names
    gets its `_forward_<impl>*` methods for both stages."""
    items = _functions(report, "launch_sparse_impls")
    text: dict[str, list[tuple[str, str]]] = {}
    for d in items:
        key = d.get("via") or d["name"]
        text.setdefault(key, []).extend(
            (f"{d['file']}:{d['line'] + i}", ln) for i, ln in enumerate(d["source"].splitlines())
        )
    by_name = {f.name: (f, d) for d in items if not d.get("via") for f in [Func.parse(d)] if f}
    out: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for stage, fname in STAGE_FORWARD.items():
        if fname not in by_name:
            continue
        fn, d = by_name[fname]
        src = d["source"].splitlines()
        for node in ast.walk(fn.node):
            if not isinstance(node, ast.If):
                continue
            names = {
                c.value
                for c in ast.walk(node.test)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
            if not names or not any(isinstance(n, ast.Name) and "impl" in n.id for n in ast.walk(node.test)):
                continue
            first, last = node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno
            lines = [
                (f"{fn.file}:{n}", src[n - fn.line])
                for n in range(first, last + 1)
                if 0 <= n - fn.line < len(src)
            ]
            called = {m.group(1) for _, ln in lines for m in re.finditer(r"self\.(_forward_\w+)\(", ln)}
            for m in sorted(called):
                lines += text.get(m, [])
            for impl in names:
                out.setdefault(impl, {}).setdefault(stage, []).extend(lines)
    for key, lines in text.items():
        m = re.fullmatch(r"_forward_(\w+)", key)
        if m and m.group(1) not in out and not any(m.group(1).startswith(k + "_") for k in out):
            out[m.group(1)] = {"prefill": lines, "decode": lines}
    return out


def sparse_impl_modes(report: ProbeReport, rules: Rules) -> dict[str, dict[str, tuple[str, list[str]]]]:
    """How each NSA/DSA implementation reads FP8 KV, per stage: the first mode of attention_rules.yaml's
    sparse_impl whose regex hits one of its lines (comments skipped), with up to three file:lines."""
    modes = rules.sparse_impl.get("modes") or []
    out: dict[str, dict[str, tuple[str, list[str]]]] = {}
    for impl, stages in _impl_lines(report).items():
        for stage, lines in stages.items():
            for mode in modes:
                rx = re.compile(mode["regex"])
                ev = list(
                    dict.fromkeys(w for w, ln in lines if rx.search(ln) and not ln.strip().startswith("#"))
                )
                if ev:
                    out.setdefault(impl, {})[stage] = (mode["mode"], ev[:3])
                    break
            else:
                out.setdefault(impl, {})[stage] = ("unknown", [])
    return out


def sparse_mode(impl: str, modes: dict, stage: str = "decode") -> tuple[str, list[str]]:
    hit = modes.get(impl) or next((v for k, v in modes.items() if k.startswith(impl + "_")), None)
    return (hit.get(stage) or next(iter(hit.values()))) if hit else ("unknown", [])
