"""The result of a probe scan: raw hits -> stable facts -> one row per backend.

Facts are the contract other steps test (patch requirements read `report.facts`), so their
keys are documented in docs/probes.md and only ever added to, never renamed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sglops.core.result import Observation

if TYPE_CHECKING:
    from sglops.probe.spec import ProbeSet

BACKEND_SUFFIX = "_backend.py"
CAST_FLAG = "sglang_casts_whole_pool_while_flashinfer_takes_fp8"


def backend_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return base[: -len(BACKEND_SUFFIX)] if base.endswith(BACKEND_SUFFIX) else base.rsplit(".", 1)[0]


def line_refs(hits: list[dict], limit: int = 4) -> str:
    shown = ", ".join(f"L{h['line']}" for h in hits[:limit])
    return shown + (f" (+{len(hits) - limit})" if len(hits) > limit else "")


def by_func(hits: list[dict]) -> str:
    return ", ".join(f"{h['func'] or '?'} L{h['line']}" for h in hits)


@dataclass
class BackendRow:
    """What the probes found in one srt/layers/attention/<name>_backend.py."""

    name: str
    file: str | None
    # fact -> hits
    hits: dict[str, list[dict]] = field(default_factory=dict)
    # why the file could not be read (then no probe result means anything)
    unreadable: str | None = None

    @property
    def exists(self) -> bool:
        return self.file is not None

    def has(self, fact: str) -> bool:
        return bool(self.hits.get(fact))

    def verdict(self, facts: dict[str, Any]) -> str:
        if not self.exists:
            return "absent in this release"
        if self.unreadable:
            return f"unreadable: {self.unreadable}"
        casts, native = self.has("casts_whole_pool"), self.has("fp8_native")
        funcs = sorted({h["func"] for h in self.hits.get("casts_whole_pool", []) if h.get("func")})
        where = f" in {', '.join(funcs)}" if funcs else ""
        mode, evidence = fp8_read_mode(self)
        first = f" ({_short(evidence[0])})" if evidence else ""
        if native and casts:
            text = f"plans with the KV dtype, still casts the pool{where}"
        elif casts and self.has("plans_model_dtype"):
            text = f"casts whole pool to model dtype{where}"
        elif casts:
            text = f"casts whole pool{where}"
        elif mode == "q_quantised":
            text = (
                f"reads FP8 KV, quantises q to the KV dtype{first}: outputs differ from BF16-q backends by"
                " design"
            )
        elif mode == "dequant_in_smem":
            text = f"reads FP8 KV, q in the model dtype; the kernel converts KV tiles{first}"
        elif mode == "rows_cast":
            text = f"casts only the rows each request reads{first}"
        elif native:
            text = "takes FP8 KV natively"
        elif self.has("fp8_paths"):
            text = "no whole-pool cast; has FP8 code paths (read mode unknown)"
        else:
            text = "no FP8 KV handling found"
        if self.name == "flashinfer_mla" and facts.get(CAST_FLAG):
            text += f"; FlashInfer {facts.get('flashinfer_version')} could take FP8 KV"
        return text

    def to_json(self, facts: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": self.name,
            "file": self.file,
            "exists": self.exists,
            "unreadable": self.unreadable,
            "verdict": self.verdict(facts),
            **{fact: self.has(fact) for fact in self.hits},
            "hits": {fact: hits for fact, hits in self.hits.items() if hits},
        }


@dataclass
class ProbeReport(Observation):
    """One host's probe run (read-only: an observation); the table, --json and probe.json are views of it."""

    host: str
    probe_file: str
    engine: str
    sglang: dict[str, Any]
    flashinfer: dict[str, Any] | None
    results: list[dict[str, Any]]
    backends: list[BackendRow]
    facts: dict[str, Any]
    flags: list[str]
    unreadable: list[dict[str, Any]]
    fallbacks: list[str]
    seconds: float
    meanings: dict[str, tuple[str, str]]
    # backend fact -> what a miss means
    fact_miss: dict[str, str] = field(default_factory=dict)
    # ids of global grep probes
    global_greps: list[str] = field(default_factory=list)
    # what the trip also read: the model's config.json, GPUs
    extra: dict[str, Any] = field(default_factory=dict)
    # the launch path (sglops/probe/launch_path.py), when one was asked
    launch: dict[str, Any] | None = None

    # -- building --------------------------------------------------------------------------
    @classmethod
    def build(cls, host: str, probe_set: ProbeSet, raw: dict[str, Any]) -> ProbeReport:
        by_id = {r["id"]: r for r in raw["results"]}
        names = {backend_name(f): f for f in raw["backend_files"]}
        rows = {n: BackendRow(n, f) for n, f in names.items()}
        for n in probe_set.expect:
            rows.setdefault(n, BackendRow(n, None))
        for u in raw.get("unreadable", []):
            row = rows.get(backend_name(u["file"]))
            if row is not None and row.file == u["file"]:
                row.unreadable = u["error"]
        facts: dict[str, Any] = {
            "sglang_version": raw["sglang"].get("version"),
            "sglang_commit": raw["sglang"].get("commit"),
            "sglang_kind": raw["sglang"].get("kind"),
            "sglang_package_dir": raw["sglang"].get("package_dir"),
            "flashinfer_version": (raw.get("flashinfer") or {}).get("version"),
            "flashinfer_location": (raw.get("flashinfer") or {}).get("location"),
        }
        for probe in probe_set.probes:
            res = by_id.get(probe.id, {})
            fact = probe.fact or probe.id
            if probe.scope == "backend":
                follows = res.get("follows") or {}
                hits = res.get("hits", [])
                # each file's hits by position: a row takes its files' hits in the answer's order
                at: dict[str, list[int]] = {}
                for i, h in enumerate(hits):
                    at.setdefault(h["file"], []).append(i)
                for row in rows.values():
                    mine = {row.file, *follows.get(row.file or "", [])}
                    row.hits[fact] = [hits[i] for i in sorted(i for f in mine for i in at.get(f, ()))]
            # attribute: backends -> a guard that names the backend nearby
            elif probe.window is not None:
                for row in rows.values():
                    names = exact_names(probe_set, row.name, rows)
                    row.hits[fact] = [
                        {**h, **applies_to(h)} for h in res.get("hits", []) if names & set(h.get("names", []))
                    ]
                facts[fact] = bool(res.get("hits")) if res.get("files") else None
            elif probe.kind in ("functions", "fields"):
                # source for the launch path (sglops/probe/launch_path.py), kept in results
                continue
            elif probe.kind == "choices":
                defs = res.get("definitions") or []
                primary = next((d for d in defs if d["choices"] is not None), None)
                facts[fact] = primary["choices"] if primary else None
                facts[f"{fact}.flag"] = primary["flag"] if primary else None
                facts[f"{fact}.deprecated_flags"] = sorted({d["flag"] for d in defs if d["deprecated"]})
            else:
                scanned = res.get("files", 0) and not res.get("missing_root")
                facts[fact] = bool(res.get("hits")) if scanned else None
        order = [n for n in probe_set.expect] + sorted(n for n in rows if n not in probe_set.expect)
        backends = [rows[n] for n in order]
        for row in backends:
            facts[f"backend.{row.name}.exists"] = row.exists
            for fact in row.hits:
                facts[f"backend.{row.name}.{fact}"] = row.has(fact)
            if row.exists and not row.unreadable:
                mode, evidence = fp8_read_mode(row)
                facts[f"backend.{row.name}.fp8_read_mode"] = mode
                facts[f"backend.{row.name}.fp8_read_evidence"] = evidence
            else:
                facts[f"backend.{row.name}.fp8_read_mode"] = None
                facts[f"backend.{row.name}.fp8_read_evidence"] = []
            if "arch_guard_args" in row.hits:
                names = exact_names(probe_set, row.name, rows)
                facts[f"backend.{row.name}.arch_rules"] = [
                    arch_rule(h, names) for h in row.hits["arch_guard_args"]
                ]
        _derive(facts)
        flags = []
        if facts.get("backend.flashinfer_mla.casts_whole_pool"):
            # the cast costs what the pool holds whatever FlashInfer can do: flag it always, say the way out
            alt = (
                f"while FlashInfer {facts['flashinfer_version']} could take FP8 KV directly "
                f"({facts['flashinfer_mla_fp8_reason']})"
                if facts.get(CAST_FLAG)
                else "-> inv apply-patch gather-cast (casts only the rows a step reads)"
            )
            flags.append(
                f"sglang {facts['sglang_version']} flashinfer_mla casts the whole KV pool every layer "
                f"({by_func(rows['flashinfer_mla'].hits['casts_whole_pool'])}) {alt}"
            )
        return cls(
            host=host,
            probe_file=probe_set.path,
            engine=raw["engine"],
            sglang=raw["sglang"],
            flashinfer=raw.get("flashinfer"),
            results=raw["results"],
            backends=backends,
            facts=facts,
            flags=flags,
            unreadable=raw.get("unreadable", []),
            fallbacks=raw.get("fallbacks", []),
            seconds=raw.get("seconds", 0.0),
            meanings={p.id: (p.hit, p.miss) for p in probe_set.probes},
            fact_miss={(p.fact or p.id): p.miss for p in probe_set.probes if p.scope == "backend"},
            global_greps=[
                p.id
                for p in probe_set.probes
                if p.scope == "global" and p.kind == "grep" and p.window is None
            ],
        )

    # -- views -----------------------------------------------------------------------------
    def backend(self, name: str) -> BackendRow | None:
        return next((b for b in self.backends if b.name == name), None)

    def hits(self, probe_id: str) -> list[dict]:
        return next((r.get("hits", []) for r in self.results if r["id"] == probe_id), [])

    def payload(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "probe_file": self.probe_file,
            "engine": self.engine,
            "sglang": {
                k: self.sglang.get(k)
                for k in (
                    "version",
                    "version_source",
                    "commit",
                    "branch",
                    "dirty",
                    "kind",
                    "root",
                    "package_dir",
                )
            },
            "flashinfer": self.flashinfer,
            "facts": self.facts,
            "flags": self.flags,
            "backends": [b.to_json(self.facts) for b in self.backends],
            "probes": [
                {
                    **r,
                    "hit": self.meanings.get(r["id"], ("", ""))[0],
                    "miss": self.meanings.get(r["id"], ("", ""))[1],
                }
                for r in self.results
            ],
            "unreadable": self.unreadable,
            "fallbacks": self.fallbacks,
            "seconds": self.seconds,
            **({"launch": self.launch} if self.launch is not None else {}),
        }

    def cell(self, b: BackendRow, fact: str, found: str) -> str:
        """A backend's cell for fact: found when it hit, else
        why not (not probed, or the fact's miss text)."""
        if fact not in b.hits:
            return "not probed"
        if not b.hits[fact]:
            return self.fact_miss.get(fact, "not found")
        return found

    def arch_cell(self, b: BackendRow) -> str:
        parts = []
        if b.has("arch_guard"):
            parts.append(line_refs(b.hits["arch_guard"]))
        if b.has("arch_guard_args"):
            parts.append(
                "args: "
                + ", ".join(
                    f"{h['file'].rsplit('/', 1)[-1]}:{h['line']}" + _applies(h)
                    for h in b.hits["arch_guard_args"][:3]
                )
                + (f" (+{len(b.hits['arch_guard_args']) - 3})" if len(b.hits["arch_guard_args"]) > 3 else "")
            )
        if parts:
            return "; ".join(parts)
        if "arch_guard" not in b.hits and "arch_guard_args" not in b.hits:
            return "not probed"
        return "no architecture guard found"


# -- FP8 read mode: how a backend's attention reads an FP8 KV pool -------------------------------------
# (mode, the backend fact that shows it), in precedence order: the first that hits is the backend's mode.
FP8_READ_MODES = (
    # the whole layer's pool cast to the model dtype every call
    ("whole_pool_cast", "casts_whole_pool"),
    # the pool read as FP8, q quantised to FP8 first: outputs differ by design
    ("q_quantised", "q_quantised"),
    # the pool read as FP8, tiles converted inside the kernel
    ("dequant_in_smem", "kv_dequant_in_kernel"),
    # only the rows a request reads, cast in Python
    ("rows_cast", "rows_cast"),
    # plans with the KV dtype, nothing above found
    ("native", "fp8_native"),
)


def _where(h: dict) -> str:
    return f"{h['file']}:{h['line']}"


def _short(where: str) -> str:
    """`srt/layers/attention/x.py:12` -> `x.py:12` (for table cells; JSON keeps the whole path)."""
    return where.rsplit("/", 1)[-1]


def fp8_read_mode(row: BackendRow) -> tuple[str, list[str]]:
    """The backend's FP8 read mode and the file:line evidence
    for it; `unknown` (no evidence) when no probe hit."""
    for mode, fact in FP8_READ_MODES:
        if row.has(fact):
            return mode, [_where(h) for h in row.hits[fact]]
    return "unknown", []


def exact_names(probe_set: ProbeSet, backend: str, rows: dict[str, BackendRow]) -> set[str]:
    """The option values credited to a backend row: its own name, and an alias only when no backend file
    carries that exact name (`flashinfer` is flashinfer_backend.py's, never flashinfer_mla's; `fa3` is
    flashattention's)."""
    return {backend} | {a for a in probe_set.choice_names(backend) - {backend} if a not in rows}


_MODEL_OVERRIDE = re.compile(r"(?:^|/)model_overrides/(\w+)\.py$")
_PREDICATE = re.compile(
    r"\b(is_blackwell\w*|is_sm\d+\w*|is_hopper\w*|get_device_capability|compute_capability)"
)


def applies_to(hit: dict) -> dict[str, Any]:
    """Which model and platform an argument check applies to: the model of a `model_overrides/<model>.py` file
    (None: every model), the platform predicate on the line, whether it is negated and whether a `raise`
    follows."""
    text = hit.get("text", "")
    m = _MODEL_OVERRIDE.search(hit.get("file", ""))
    pred = _PREDICATE.search(text)
    name = pred.group(1) if pred else None
    negated = bool(name and re.search(r"\bnot\s+[\w.()]*" + re.escape(name), text))
    return {"model": m.group(1) if m else None, "platform": name, "negated": negated}


def arch_rule(hit: dict, names: set[str]) -> dict[str, Any]:
    """One argument check as a rule a sweep can evaluate: `requirement` (refuses unless the platform holds:
    `if not is_blackwell: raise`), `model_override` (one model's choice by platform) or `check` (a default or
    a branch)."""
    kind = (
        "model_override"
        if hit.get("model")
        else "requirement"
        if hit.get("negated") and hit.get("raises")
        else "check"
    )
    values = sorted(set(hit.get("names", [])) & names)
    return {
        "where": _where(hit),
        "values": values,
        "platform": hit.get("platform"),
        "kind": kind,
        "model": hit.get("model"),
        "text": hit.get("text", ""),
    }


def _applies(h: dict) -> str:
    """` (model nemotron_h, is_sm100)`: whom an argument check concerns, for the arch cell."""
    bits = [f"model {h['model']}"] if h.get("model") else []
    if h.get("platform"):
        bits.append(("not " if h.get("negated") else "") + h["platform"])
    return f" ({', '.join(bits)})" if bits else ""


def _derive(facts: dict[str, Any]) -> None:
    """Composite facts from the simple ones (missing inputs give None, never a guess)."""
    repack = facts.get("flashinfer_mla_fp8_repack")
    if facts.get("flashinfer_location") is None and facts.get("flashinfer_version") is None:
        fp8, reason = None, "flashinfer not installed"
    elif repack is None:
        fp8, reason = None, "mla.cuh not found under the flashinfer package"
    elif repack:
        fp8, reason = True, "mla.cuh has USE_KV_REPACK for __nv_fp8_e4m3 / repack_fp8_kv_to_bf16"
    elif facts.get("flashinfer_mla_rowsum_f16") and facts.get("flashinfer_mma_16bit_assert"):
        fp8, reason = (
            False,
            "mla.cuh calls m16k16_rowsum_f16f16f32, which has static_assert(sizeof(DType) == 2)",
        )
    else:
        fp8, reason = False, "mla.cuh has no FP8 KV path"
    facts["flashinfer_mla_fp8"] = fp8
    facts["flashinfer_mla_fp8_reason"] = reason
    flag = facts.get("dsa_prefill_backends.flag") or facts.get("dsa_decode_backends.flag")
    m = re.match(r"--(nsa|dsa)-", flag or "")
    facts["dsa_flag_prefix"] = m.group(1) if m else None
    facts.setdefault("attention_backends", None)
    facts[CAST_FLAG] = bool(facts.get("backend.flashinfer_mla.casts_whole_pool") and fp8 is True)
