"""What the server was really running, and every way two runs differ in it.

A speed-up is only a speed-up of the change under test when nothing else changed: a public recipe once
shipped BF16 KV while claiming FP8. `inv bench` records, before measuring, the server's effective launch
arguments (`/server_info`, older `/get_server_info`), its SGLang version and the patches of the host ledger.
`config_diff` lists every difference between two runs and marks each as intended (a patch-set difference,
or a key the engineer named as the variable under test) or not; an unintended difference means the ratio
may not measure the change at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglops.bench.record import Run

# The settings a reviewer asks about first; recorded as `run_config.summary` and shown first in a diff.
HEADLINE_KEYS = (
    "model_path",
    "sglang_version",
    "patches",
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "kv_cache_dtype",
    "page_size",
    "dtype",
    "quantization",
    "disable_cuda_graph",
    "disable_decode_cuda_graph",
    "cuda_graph_max_bs",
    "cuda_graph_bs",
    "cuda_graph_max_bs_decode",
    "cuda_graph_config.decode.backend",
    "cuda_graph_config.decode.max_bs",
    "enable_torch_compile",
    "tp_size",
    "dp_size",
    "pp_size",
    "ep_size",
    "max_running_requests",
    "max_total_tokens",
    "chunked_prefill_size",
    "mem_fraction_static",
    "sampling_backend",
    "enable_deterministic_inference",
    "disable_radix_cache",
    "speculative_algorithm",
    "device",
)
# Launch arguments that differ between any two launches without changing what is computed: where it
# listens, its random seed (temperature 0 draws nothing), start-up timings, the command line (its parts
# are compared one by one), live status.
NOISE_KEYS = frozenset(
    {
        "host",
        "port",
        "random_seed",
        "startup_time",
        "status",
        "launch_command",
        "last_gen_throughput",
        "internal_states",
        "dist_init_addr",
        "nccl_port",
        "sglang_tree",
        # the stand-in server's decode model: what it computed from the served tree, not a launch argument
        "standin_decode_tps",
        "standin_decode_model",
    }
)
ALIASES = {
    "kv_dtype": "kv_cache_dtype",
    "tp": "tp_size",
    "dp": "dp_size",
    "pp": "pp_size",
    "ep": "ep_size",
    "attention": "attention_backend",
    "backend": "attention_backend",
    "version": "sglang_version",
    "model": "model_path",
    "patch": "patches",
}


def _noise(key: str) -> bool:
    top = key.split(".", 1)[0]
    return top in NOISE_KEYS or top.endswith("_port")


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def patch_set(patches: Iterable[dict] | None) -> list[str]:
    """The ledger's patches as `name[@variant]`, sorted,
    `(modified)` when a file no longer has its after-hash."""
    out = []
    for p in patches or []:
        name = str(p.get("patch") or "?") + (f"@{p['variant']}" if p.get("variant") else "")
        out.append(name + ("" if p.get("intact", True) else " (modified since applied)"))
    return sorted(out)


def effective(
    launch_args: dict | None,
    sglang: dict | None = None,
    patches: Iterable[dict] | None = None,
) -> dict[str, Any]:
    """One flat mapping of what served: every launch argument (dicts flattened to a.b), the SGLang version
    the server reported and the patch set of the host ledger."""
    out: dict[str, Any] = {}
    _flatten("", {k: v for k, v in (launch_args or {}).items() if k != "version"}, out)
    out["sglang_version"] = (launch_args or {}).get("version") or (sglang or {}).get("version")
    out["patches"] = patch_set(patches)
    return out


def summary(
    launch_args: dict | None,
    sglang: dict | None = None,
    patches: Iterable[dict] | None = None,
) -> dict[str, Any]:
    """The headline settings (HEADLINE_KEYS) that the server reported; `None` for one it does not know."""
    flat = effective(launch_args, sglang, patches)
    return {k: flat.get(k) for k in HEADLINE_KEYS if k in flat or k in ("sglang_version", "patches")}


def run_effective(run: Run) -> dict[str, Any]:
    doc = run.doc
    return effective(doc.get("launch_args") or doc.get("server_info"), doc.get("sglang"), doc.get("patches"))


def normalise_variable(variable: Iterable[str] | str | None) -> list[str]:
    """`kv_cache_dtype,page_size` or a list -> keys (with the short aliases: kv_dtype, tp, backend, ...)."""
    items = variable.split(",") if isinstance(variable, str) else list(variable or [])
    return [ALIASES.get(k.strip(), k.strip()) for k in items if k and k.strip()]


@dataclass
class Difference:
    key: str
    a: Any
    b: Any
    intended: bool
    # patch set / named as the variable / not named
    why: str

    def to_json(self) -> dict:
        return {"key": self.key, "a": self.a, "b": self.b, "intended": self.intended, "why": self.why}


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "+".join(map(str, value)) if value else "none"
    text = "-" if value is None else format(value, ".6g") if isinstance(value, float) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class ConfigDiff:
    """Every difference in what served between baseline A and run B, intended or not."""

    a: str
    b: str
    differences: list[Difference]
    variable: list[str] = field(default_factory=list)
    # runs that recorded no server configuration
    missing: list[str] = field(default_factory=list)

    @property
    def unintended(self) -> list[Difference]:
        return [d for d in self.differences if not d.intended]

    @property
    def same(self) -> bool:
        return not self.differences

    def line(self) -> str:
        if self.missing and not self.unintended:
            return f"config not compared: {', '.join(self.missing)} recorded no server configuration" + (
                " (" + ", ".join(d.key for d in self.differences) + " differ as intended)"
                if self.differences
                else ""
            )
        if not self.differences:
            return "same server config"
        bad = self.unintended
        if not bad:
            return "config differs only as intended (" + ", ".join(d.key for d in self.differences) + ")"
        shown = "; ".join(f"{d.key} {_shown(d.a)} -> {_shown(d.b)}" for d in bad[:3])
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return f"{len(bad)} UNINTENDED config difference{'s' if len(bad) > 1 else ''}: {shown}{more}"

    def rows(self) -> list[tuple[str, str, str, str]]:
        return [
            (d.key, _shown(d.a), _shown(d.b), "intended" if d.intended else "UNINTENDED")
            for d in self.differences
        ]

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "same": self.same,
            "variable": self.variable,
            "missing": self.missing,
            "differences": [d.to_json() for d in self.differences],
            "unintended": [d.key for d in self.unintended],
            "line": self.line(),
        }


def passed_flags(argv: Iterable[str] | None) -> set[str] | None:
    """The launch arguments a command line set explicitly, as server-info keys (`--page-size 64` ->
    page_size), each also under the profile's name an engine reports it by (vLLM's `--max-num-seqs` is
    max_running_requests in its recorded config); None when the run recorded no command line."""
    if argv is None:
        return None
    from sglops.engine import ENGINES

    keys = {
        a[2:].split("=", 1)[0].replace("-", "_") for a in argv if isinstance(a, str) and a.startswith("--")
    }
    return keys | {e.config_names[k] for e in ENGINES.values() for k in keys if k in e.config_names}


def diff_effective(
    ca: dict[str, Any],
    cb: dict[str, Any],
    variable: Iterable[str] | str | None = (),
    a: str = "A",
    b: str = "B",
    passed: set[str] | None = None,
) -> ConfigDiff:
    """Every key whose value differs (noise keys aside), headline keys first, each intended or not.

    `passed`: the keys either run's command line set. A key neither set is one SGLang chose itself (flashmla
    makes page_size 64, the pool's max_total_num_tokens follows from memory); when an intended key also
    differs, such a key follows from that change and is marked intended, saying so. Without command lines
    (None) every unnamed difference stays unintended."""
    named = normalise_variable(variable)
    keys = [k for k in dict.fromkeys([*HEADLINE_KEYS, *sorted(set(ca) | set(cb))]) if k in ca or k in cb]
    diffs = []
    for key in keys:
        if _noise(key) or ca.get(key) == cb.get(key):
            continue
        if key == "patches":
            intended, why = True, "the patch set under test"
        elif key in named or key.split(".", 1)[0] in named:
            intended, why = True, "named as the variable"
        else:
            intended, why = False, "not named as the variable"
        diffs.append(Difference(key, ca.get(key), cb.get(key), intended, why))
    causes = [d.key for d in diffs if d.intended]
    if passed is not None and causes:
        for d in diffs:
            if not d.intended and d.key.split(".", 1)[0] not in passed:
                d.intended = True
                d.why = f"set by SGLang, not on either command line: follows from {', '.join(causes)}"
    return ConfigDiff(a, b, diffs, named)


def _argv(run: Run) -> list[str] | None:
    server = run.doc.get("server")
    argv = server.get("argv") if isinstance(server, dict) else None
    return argv if isinstance(argv, list) else None


def config_diff(a: Run, b: Run, variable: Iterable[str] | str | None = ()) -> ConfigDiff:
    """What differs between the servers behind baseline A and run B (patches and `variable` keys intended)."""
    missing = [r.run_id for r in (a, b) if not (r.doc.get("launch_args") or r.doc.get("server_info"))]
    ca, cb = run_effective(a), run_effective(b)
    # without launch arguments only the version and the patches can be compared
    if missing:
        ca = {k: ca[k] for k in ("sglang_version", "patches")}
        cb = {k: cb[k] for k in ("sglang_version", "patches")}
    fa, fb = passed_flags(_argv(a)), passed_flags(_argv(b))
    passed = fa | fb if fa is not None and fb is not None else None
    out = diff_effective(ca, cb, variable, a.run_id, b.run_id, passed)
    out.missing = missing
    return out
