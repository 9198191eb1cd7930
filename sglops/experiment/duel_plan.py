"""A duel's plan, pure: two profiles of two engines
normalised to the same limits, or refused with the reasons.

Why normalise in one place: hand-run engine comparisons go wrong on the knobs each engine spells its own way
(one side eager, the other with graphs; different batch limits, KV dtypes, context lengths, KV pool sizes).
The first profile is the reference: every knob the second one sets differently is set to the reference's value
(each change named), a knob that cannot be made equal refuses the duel, and what may differ is only the engine
(its own attention backend among it). After both servers ran, what each REPORTED is checked the same way
(`effective_rows`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sglops.core.errors import ConfigError
from sglops.engine import get as get_engine

# knob -> (profile field, what it means); KV pool size and eager mode have their own rules below
SHARED = {
    "model": ("model_path", "the served model"),
    "context_length": ("context_length", "context length"),
    "max_running_requests": ("max_running_requests", "max running requests"),
    "kv_cache_dtype": ("kv_cache_dtype", "KV cache dtype"),
    "tp_size": ("tp_size", "tensor parallel size"),
}
KV_DTYPES = {
    "auto": "auto",
    None: "auto",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
# what the engine itself is: allowed to differ, named in the table
ENGINE_OWNED = ("attention_backend", "device", "sleep_on_idle", "grammar_backend", "mem_fraction_static")
# tokens per KV block (both engines' default on CPU): a pool is a whole number of blocks
BLOCK = 16


@dataclass
class DuelPlan:
    """The two profiles as they will run, and the table of what was made equal."""

    # Profile (reference)
    a: Any
    # Profile (normalised to a)
    b: Any
    # knob, a, b as asked, b as run, how
    rows: list[dict] = field(default_factory=list)
    bytes_per_token: int | None = None
    # the model's (config.json): both sides draw the same prompt ids below it
    vocab_size: int | None = None


# bytes per KV element of a (neutral) KV dtype
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


def kv_bytes_per_token(config: dict, dtype_bytes: int = 2) -> int:
    """Bytes one token's KV takes over all layers, from the model's config.json: K and V per KV head for plain
    attention; one latent row (kv_lora_rank + qk_rope_head_dim: 576 for DeepSeek-V2/V3 and GLM-5) for MLA,
    which both engines cache instead of K and V."""
    if config.get("kv_lora_rank"):
        latent = int(config["kv_lora_rank"]) + int(config.get("qk_rope_head_dim") or 0)
        return int(config["num_hidden_layers"]) * latent * dtype_bytes
    heads = int(config.get("num_attention_heads") or 1)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    return 2 * int(config["num_hidden_layers"]) * kv_heads * head_dim * dtype_bytes


def _extra(p: Any, flag: str | None) -> str | None:
    args = list(p.extra_args)
    return args[args.index(flag) + 1] if flag and flag in args and args.index(flag) + 1 < len(args) else None


def kv_pool_tokens(p: Any, per: int) -> int | None:
    """The profile's KV pool in tokens: max_total_tokens,
    or its engine's byte flag over the bytes per token."""
    flag = get_engine(p.engine).kv_pool_flag
    if flag is None:
        return p.args.get("max_total_tokens")
    had = _extra(p, flag)
    return int(had) // per if had else None


def _with(p: Any, **changes: Any) -> Any:
    return type(p)(**{**p.__dict__, **changes})


def plan(a: Any, b: Any, model_config: dict) -> DuelPlan:
    """Normalise profile b (the other engine) to profile a; ConfigError listing every knob that cannot be."""
    ea, eb = get_engine(a.engine), get_engine(b.engine)
    if ea.name == eb.name:
        raise ConfigError(f"a duel is between two engines: {a.name} and {b.name} are both {ea.title}")
    out = DuelPlan(a, b, vocab_size=model_config.get("vocab_size"))
    args_b, extra_b, cuda_graph_b = dict(b.args), list(b.extra_args), dict(b.cuda_graph)
    refusals = []
    for knob, (key, what) in SHARED.items():
        va, vb = a.args.get(key), b.args.get(key)
        if knob == "kv_cache_dtype":
            va, vb = KV_DTYPES.get(va, va), KV_DTYPES.get(vb, vb)
        if knob == "tp_size":
            va, vb = va or 1, vb or 1
        if va == vb:
            out.rows.append({"knob": what, "a": va, "b": vb, "run": vb, "how": "equal"})
            continue
        if knob in ("model", "tp_size") or va is None:
            refusals.append(
                f"{what}: {a.name} {va!r} vs {b.name} {vb!r}"
                + ("" if va is not None else f" (set it in {a.name}: the reference names every limit)")
            )
            continue
        args_b[key] = eb.kv_dtype_spelling.get(va, va) if knob == "kv_cache_dtype" else a.args[key]
        out.rows.append({"knob": what, "a": va, "b": vb, "run": va, "how": f"{b.name} set to {a.name}'s"})
    eager_a, eager_b = bool(a.cuda_graph.get("disable")), bool(b.cuda_graph.get("disable"))
    cuda_graph_b["disable"] = eager_a
    out.rows.append(
        {
            "knob": "eager (no graphs / no compile)",
            "a": eager_a,
            "b": eager_b,
            "run": eager_a,
            "how": "equal" if eager_a == eager_b else f"{b.name} set to {a.name}'s",
        }
    )
    dtype_a = KV_DTYPES.get(a.args.get("kv_cache_dtype"), "auto")
    per = out.bytes_per_token = kv_bytes_per_token(model_config, DTYPE_BYTES.get(dtype_a, 2))
    tokens_a, tokens_b = kv_pool_tokens(a, per), kv_pool_tokens(b, per)
    if tokens_a is None:
        refusals.append(
            f"KV pool: {a.name} does not size its KV pool, so the pools cannot be made the same size"
        )
    else:
        want = math.ceil(int(tokens_a) / BLOCK) * BLOCK
        if eb.kv_pool_flag:
            if eb.kv_pool_flag in extra_b:
                i = extra_b.index(eb.kv_pool_flag)
                del extra_b[i : i + 2]
            extra_b += [eb.kv_pool_flag, str(want * per)]
            how = f"{eb.kv_pool_flag} {want * per} ({per} bytes per token)"
        else:
            args_b["max_total_tokens"] = want
            how = f"max_total_tokens {want}"
        out.rows.append(
            {
                "knob": "KV pool (tokens)",
                "a": tokens_a,
                "b": tokens_b,
                "run": want,
                "how": "equal" if tokens_b == want else how,
            }
        )
    if refusals:
        raise ConfigError(
            f"duel {a.name} vs {b.name} refused: more than the engine differs: " + "; ".join(refusals)
        )
    for key in ENGINE_OWNED:
        if key in a.args or key in b.args:
            out.rows.append(
                {
                    "knob": key,
                    "a": a.args.get(key),
                    "b": b.args.get(key),
                    "run": b.args.get(key),
                    "how": "the engine's own",
                }
            )
    out.b = _with(b, args=args_b, cuda_graph=cuda_graph_b, extra_args=extra_b)
    return out


def effective_rows(plan_: DuelPlan, info_a: dict, info_b: dict) -> list[dict]:
    """The shared knobs as each running server reported them (its engine's names for them), and whether they
    agree (None: a side did not report it)."""
    rows = []
    for knob in ("context_length", "max_running_requests", "kv_pool", "kv_cache_dtype"):
        vals = []
        for p, info in ((plan_.a, info_a), (plan_.b, info_b)):
            eng = get_engine(p.engine)
            key = eng.reports.get(knob, "")
            v = (info or {}).get(key, eng.reported_defaults.get(key)) if info else None
            if knob == "kv_pool" and v is not None and eng.kv_pool_flag and plan_.bytes_per_token:
                v = int(v) // plan_.bytes_per_token
            if knob == "kv_cache_dtype":
                v = KV_DTYPES.get(v, v)
            vals.append(v)
        same = None if None in vals else str(vals[0]) == str(vals[1])
        rows.append({"knob": knob, "a": vals[0], "b": vals[1], "same": same})
    return rows
