"""The candidates of an `inv sweep` and what rules each out before anything starts.

Why before: on a GPU host a start that was never going to work (a backend this release does not offer, an
SM100-only kernel on an H200, a patch that changes a file the candidate never runs) costs minutes of restart
each. The probe facts (sglops.probe.report: choices, FP8 read mode, argument rules with their platform) and
the host's compute capability (sglops.probe.facts) say so in advance; `--force` runs a candidate anyway, the
reason still shown.

A candidate is settings over the base profile (SGLang's own key names, as in a profile) plus a patch set:
`attention_backend=triton,kv_cache_dtype=fp8_e4m3+gather-cast`. `--vary KEY=a,b` gives the cross product of
every --vary and --patches axis; `--candidates "A;B;C"` is an explicit list.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from sglops.core.errors import ConfigError
from sglops.core.values import one_line

NO_PATCH = "none"
# profile key -> the probe fact with this release's choices for it
CHOICE_FACTS = {
    "attention_backend": "attention_backends",
    "prefill_attention_backend": "attention_backends",
    "decode_attention_backend": "attention_backends",
    "dsa_prefill_backend": "dsa_prefill_backends",
    "dsa_decode_backend": "dsa_decode_backends",
    "kv_cache_dtype": "kv_cache_dtypes",
}
BACKEND_KEYS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend")
DSA_KEYS = ("dsa_prefill_backend", "dsa_decode_backend")
# A platform predicate of SGLang's argument checks -> the GPU majors it holds for (most specific first).
PLATFORMS = (
    (re.compile(r"is_blackwell"), {10, 11, 12}),
    (re.compile(r"is_sm100_or_sm110"), {10, 11}),
    (re.compile(r"is_hopper"), {9}),
    # is_sm90 -> 9, is_sm100 -> 10, is_sm120 -> 12
    (re.compile(r"is_sm(\d+)"), None),
)


@dataclass(frozen=True)
class Candidate:
    """One configuration to start and bench: settings over the base profile and the patches it runs with."""

    index: int
    settings: tuple[tuple[str, Any], ...]
    patches: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        body = ",".join(f"{k}={v}" for k, v in self.settings) or "base profile"
        return body + "".join(f"+{p}" for p in self.patches)

    def get(self, key: str, profile_args: dict[str, Any]) -> Any:
        return dict(self.settings).get(key, profile_args.get(key))

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "label": self.label,
            "settings": dict(self.settings),
            "patches": list(self.patches),
        }


def _value(key: str, raw: str, where: str) -> Any:
    """A setting's value typed as the profile field is (sglops.launch.profiles.SCALARS)."""
    from sglops.launch.profiles import RANGES, SCALARS

    if key not in SCALARS:
        raise ConfigError(f"{where}: {key!r} is not a profile setting (one of {', '.join(sorted(SCALARS))})")
    kind, text = SCALARS[key], raw.strip()
    if not text:
        raise ConfigError(f"{where}: {key} has an empty value")
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        value = kind(text)
    except ValueError:
        raise ConfigError(f"{where}: {key} takes a {kind.__name__}, got {text!r}") from None
    low, high = RANGES.get(key, (None, None)) if key != "port" else (1, 65535)
    if low is not None and not (low <= value <= high) or (key == "chunked_prefill_size" and value == 0):
        raise ConfigError(f"{where}: {key} must be between {low} and {high}, got {text[:40]}")
    return value


def _patch_names(text: str, where: str) -> tuple[str, ...]:
    from sglops.core.values import Name

    if text.strip() == NO_PATCH:
        return ()
    names = tuple(p.strip() for p in text.split("+"))
    for p in names:
        if not p:
            raise ConfigError(f"{where}: an empty patch name in {text!r}")
        Name("patch").parse(p, where)
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: {text!r} names a patch twice")
    return names


def parse_vary(items: list[str]) -> list[tuple[str, list[Any]]]:
    """`--vary KEY=a,b` (repeatable) -> [(key, [values])], each key once."""
    axes: list[tuple[str, list[Any]]] = []
    for item in items:
        one_line(item, "--vary")
        key, sep, values = item.partition("=")
        key = key.strip()
        where = f"--vary {item}"
        if not sep or not key:
            raise ConfigError(f"{where}: write KEY=VALUE[,VALUE...] (e.g. attention_backend=triton,flashmla)")
        if key in (k for k, _ in axes):
            raise ConfigError(f"{where}: {key} is varied twice")
        vals = [_value(key, v, where) for v in values.split(",")]
        if len(set(vals)) != len(vals):
            raise ConfigError(f"{where}: a value is given twice")
        axes.append((key, vals))
    return axes


def parse_candidate(text: str, index: int) -> Candidate:
    """`KEY=VAL[,KEY=VAL...][+PATCH...]` (or `+PATCH` alone: the base profile with a patch)."""
    one_line(text, "candidate")
    where = f"candidate {text!r}"
    body, _, patches = text.strip().partition("+")
    settings: dict[str, Any] = {}
    for part in [p for p in body.split(",") if p.strip()] if body.strip() else []:
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"{where}: write KEY=VALUE[,KEY=VALUE...][+PATCH] (e.g. attention_backend=flashinfer"
                "+gather-cast)"
            )
        if key.strip() in settings:
            raise ConfigError(f"{where}: {key.strip()} is set twice")
        settings[key.strip()] = _value(key.strip(), val, where)
    names = _patch_names(patches, where) if patches else ()
    if not settings and not names:
        raise ConfigError(f"{where}: a candidate sets at least one key or names a patch")
    return Candidate(index, tuple(settings.items()), names)


def candidates(
    vary: list[str] | None, patches: list[str] | None, listed: list[str] | None
) -> list[Candidate]:
    """The sweep's candidates in order: the explicit list, or the cross product of --vary and --patches."""
    if listed:
        if vary or patches:
            raise ConfigError("give --candidates (a list) or --vary/--patches (a cross product), not both")
        out = [parse_candidate(t, i) for i, t in enumerate(listed, 1)]
    else:
        axes = parse_vary(vary or [])
        sets = [_patch_names(one_line(p, "--patches"), f"--patches {p}") for p in (patches or [])] or [()]
        if not axes and sets == [()]:
            raise ConfigError(
                "nothing to sweep: give --vary KEY=a,b (repeatable), --patches none,P or --candidates"
            )
        out = []
        for i, (combo, ps) in enumerate(itertools.product(itertools.product(*[v for _, v in axes]), sets), 1):
            out.append(Candidate(i, tuple(zip([k for k, _ in axes], combo, strict=True)), ps))
    labels = [c.label for c in out]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup:
        raise ConfigError(f"candidate {dup!r} is listed twice")
    if len(out) < 2:
        raise ConfigError(f"a sweep needs at least two candidates (got {len(out)}: {labels})")
    return out


# -- what rules a candidate out
# -------------------------------------------------------------------------------
def backend_rows(value: str, facts: dict[str, Any], aliases: dict[str, tuple[str, ...]]) -> list[str]:
    """The backend files an --attention-backend value can run: its own, and those whose aliases name it
    (`flashinfer` runs flashinfer_backend.py on MHA models and flashinfer_mla_backend.py on MLA ones)."""
    rows = [value] if facts.get(f"backend.{value}.exists") else []
    rows += [
        b for b, vals in aliases.items() if value in vals and facts.get(f"backend.{b}.exists") and b != value
    ]
    return rows


def platform_majors(predicate: str) -> set[int] | None:
    """The GPU majors SGLang's predicate (is_blackwell,
    is_sm100_supported, ...) holds for; None: cannot tell."""
    for rx, majors in PLATFORMS:
        m = rx.search(predicate)
        if m and majors is not None:
            return majors
        if m:
            digits = m.group(1)
            return {int(digits[:-1])} if len(digits) >= 2 else None
    return None


@dataclass
class Screen:
    """What the probe facts say about one candidate: reasons it cannot run here, and notes that still hold."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # backend file -> FP8 read mode
    fp8_modes: dict[str, str] = field(default_factory=dict)
    # every backend file it can run quantises q: outputs differ by design
    q_quantised: bool = False


def _short(where: str) -> str:
    return where.rsplit("/", 1)[-1]


def screen(
    c: Candidate,
    profile_args: dict[str, Any],
    facts: dict[str, Any],
    aliases: dict[str, tuple[str, ...]],
    compute_capability: str | None,
    patch_files: dict[str, list[str]],
) -> Screen:
    """Rule a candidate out (reasons) or annotate it (notes)
    from probe facts, the host's GPU and the patches."""
    out = Screen()
    version = facts.get("sglang_version") or "this release"
    _screen_choices(c, profile_args, facts, version, out)
    kv = str(c.get("kv_cache_dtype", profile_args) or "auto")
    fp8 = kv.startswith("fp8")
    device = str(c.get("device", profile_args) or "cuda")
    # a CPU server runs no GPU platform check true
    gpu = compute_capability if device in ("cuda", "auto") else None
    no_gpu = "the host has no GPU" if compute_capability is None else f"the server runs on device {device}"
    rows_all: list[str] = []
    for key in BACKEND_KEYS:
        val = c.get(key, profile_args)
        if val is None:
            continue
        rows = backend_rows(str(val), facts, aliases)
        rows_all += rows
        for row in rows:
            out.fp8_modes[row] = facts.get(f"backend.{row}.fp8_read_mode") or "unknown"
            _screen_arch_rules(str(val), facts.get(f"backend.{row}.arch_rules") or [], gpu, no_gpu, out)
        if fp8 and rows:
            _screen_fp8(kv, rows, facts, out)
    if fp8 and rows_all and all(out.fp8_modes.get(r) == "q_quantised" for r in rows_all):
        out.q_quantised = True
    _screen_dsa(c, profile_args, facts, version, rows_all, out)
    _screen_patches(c, patch_files, rows_all, out)
    return out


def _screen_choices(
    c: Candidate, profile_args: dict[str, Any], facts: dict[str, Any], version: str, out: Screen
) -> None:
    """A value the candidate sets that the release's flag does not offer."""
    for key, fact in CHOICE_FACTS.items():
        val = c.get(key, profile_args)
        choices = facts.get(fact)
        if val is None or choices is None or key not in dict(c.settings):
            continue
        if str(val) not in choices:
            flag = facts.get(f"{fact}.flag") or "--" + key.replace("_", "-")
            out.reasons.append(f"{flag} {val} is not a choice of sglang {version} ({', '.join(choices)})")


def _screen_arch_rules(val: str, rules: list[dict], gpu: str | None, no_gpu: str, out: Screen) -> None:
    """A backend file's platform rules for this value: a model override is a note, a requirement the host's
    GPU does not meet a reason."""
    major = int(gpu.split(".")[0]) if gpu else None
    for rule in rules:
        if val not in rule.get("values", []):
            continue
        where = _short(rule["where"])
        if rule["kind"] == "model_override":
            out.notes.append(
                f"{where}: a {rule['model']} override picks {val} by platform "
                f"({rule['platform']}); other models are not affected"
            )
            continue
        if rule["kind"] != "requirement":
            continue
        majors = platform_majors(rule.get("platform") or "")
        if majors is None:
            out.notes.append(f"{where}: {val} requires {rule.get('platform')} (not evaluated)")
        elif major is None:
            out.reasons.append(f"{val} requires {rule['platform']} ({where}) and {no_gpu}")
        elif major not in majors:
            out.reasons.append(
                f"{val} requires {rule['platform']} ({where}); the host's GPU is "
                f"sm{(gpu or '').replace('.', '')}"
            )


def _screen_fp8(kv: str, rows: list[str], facts: dict[str, Any], out: Screen) -> None:
    """An FP8 KV cache on backend files with no FP8 read path is a reason; the read mode of each is a note."""
    if all(
        facts.get(f"backend.{r}.fp8_read_mode") == "unknown" and not facts.get(f"backend.{r}.fp8_paths")
        for r in rows
    ):
        out.reasons.append(
            f"--kv-cache-dtype {kv}: no FP8 KV read path in {', '.join(rows)} or the kernels it imports"
        )
    ev = [(r, facts.get(f"backend.{r}.fp8_read_evidence") or []) for r in rows]
    out.notes.append(
        "FP8 read: "
        + "; ".join(f"{r} {out.fp8_modes[r]}" + (f" ({_short(e[0])})" if e else "") for r, e in ev)
    )


def _screen_dsa(
    c: Candidate,
    profile_args: dict[str, Any],
    facts: dict[str, Any],
    version: str,
    rows_all: list[str],
    out: Screen,
) -> None:
    """A DSA profile on a release without NSA/DSA flags, or on backend files without a DSA path."""
    dsa = [k for k in DSA_KEYS if c.get(k, profile_args)]
    if not dsa:
        return
    if facts.get("dsa_flag_prefix") is None and "dsa_flag_prefix" in facts:
        out.reasons.append(f"the profile sets {', '.join(dsa)} and sglang {version} has no NSA/DSA flags")
    dense = [r for r in rows_all if not facts.get(f"backend.{r}.nsa_dsa")]
    if rows_all and len(dense) == len(rows_all):
        out.reasons.append(
            f"a DSA profile ({', '.join(dsa)}) and {', '.join(dense)} has no NSA/DSA path in this "
            "release (DSA models take attention_backend dsa when none is set)"
        )


def _screen_patches(
    c: Candidate, patch_files: dict[str, list[str]], rows_all: list[str], out: Screen
) -> None:
    """A patch that changes only backend files the candidate never runs is the same code as without it."""
    for p in c.patches:
        files = patch_files.get(p) or []
        backends = {_backend_of(f) for f in files}
        if files and None not in backends and rows_all and not backends & set(rows_all):
            out.reasons.append(
                f"patch {p} changes only {', '.join(_short(f) for f in files)}, which "
                f"{', '.join(sorted(set(rows_all)))} never runs (same code as without it)"
            )


def _backend_of(path: str) -> str | None:
    m = re.search(r"srt/layers/attention/(\w+)_backend\.py$", path)
    return m.group(1) if m else None
