"""A Pareto frontier across configurations: per run (a configuration) and load level, tokens/s per user (the
median request's decode rate: what one user sees) against tokens/s per GPU (the level's total output tok/s
over the GPUs the server ran on). A point is on the frontier when no other point is at least as good on both
and better on one; the configurations on it are the ones worth choosing between (more per GPU costs per-user
speed along it).

GPUs per configuration: the server's own parallelism as it reported it (/server_info: tp_size x pp_size, x
dp_size unless DP attention splits TP), else the GPUs the host's facts list, else 1 (and said so). A CPU
server has no GPU: its "per GPU" figure is per server, and the record says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sglops.bench.record import standin


def gpus(doc: Mapping[str, Any]) -> dict[str, Any]:
    """How many GPUs a recorded run's server used, and where that number came from."""
    args = doc.get("launch_args") or doc.get("server_info") or {}
    if str(args.get("device") or "").lower() == "cpu":
        return {"n": 1, "from": "a CPU server (no GPU): per server"}
    if args.get("tp_size"):
        tp, pp, dp = (int(args.get(k) or 1) for k in ("tp_size", "pp_size", "dp_size"))
        n = tp * pp * (1 if args.get("enable_dp_attention") else dp)
        return {
            "n": n,
            "from": f"server parallelism tp {tp} x pp {pp}"
            + (
                ""
                if dp == 1
                else f" x dp {dp}"
                if not args.get("enable_dp_attention")
                else f" (dp {dp} inside tp)"
            ),
        }
    listed = ((doc.get("facts") or {}).get("gpus")) or []
    if listed:
        return {"n": len(listed), "from": "the host's GPUs (facts)"}
    return {"n": 1, "from": "unknown (counted as 1)"}


def level_name(lv: Mapping[str, Any]) -> str:
    if lv.get("trace_speed"):
        return f"trace x{lv['trace_speed']:g}"
    return f"{lv['request_rate']:g} req/s" if lv.get("request_rate") else f"C={lv.get('concurrency')}"


def points(config: str, run_id: str, doc: Mapping[str, Any]) -> list[dict]:
    """A run's points: one per level with both figures."""
    n = gpus(doc)
    out = []
    for lv in doc.get("levels") or []:
        user = (lv.get("decode_tok_s") or {}).get("median")
        total = (lv.get("output_tok_s") or {}).get("median")
        if user is None or total is None:
            continue
        out.append(
            {
                "config": config,
                "run_id": run_id,
                "load": level_name(lv),
                "per_user_tok_s": user,
                "per_gpu_tok_s": total / n["n"],
                "gpus": n["n"],
                "gpus_from": n["from"],
                "standin": standin(doc),
            }
        )
    return out


def dominated(p: Mapping[str, float], by: Mapping[str, float]) -> bool:
    """`by` is at least as good as `p` on both axes and better on one."""
    a, b = (p["per_user_tok_s"], p["per_gpu_tok_s"]), (by["per_user_tok_s"], by["per_gpu_tok_s"])
    return b[0] >= a[0] and b[1] >= a[1] and b != a


def frontier(pts: Iterable[dict]) -> dict:
    """Every point marked on or off the frontier; the frontier by tokens/s per user; its configurations in
    that order (a configuration once, at its first frontier point)."""
    pts = [dict(p) for p in pts]
    for p in pts:
        p["on_frontier"] = not any(dominated(p, q) for q in pts)
    front = sorted((p for p in pts if p["on_frontier"]), key=lambda p: p["per_user_tok_s"])
    configs = list(dict.fromkeys(p["config"] for p in front))
    line = (
        f"Pareto frontier: {len(front)} of {len(pts)} points, configurations " + ", ".join(configs)
        if front
        else "Pareto frontier: no point with both figures"
    )
    return {"points": pts, "frontier": front, "configs": configs, "line": line}


def labels(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """A configuration's name for each run: the server settings that differ between the runs (and the
    patches), else the run id alone."""
    args = {rid: d.get("launch_args") or {} for rid, d in docs.items()}
    keys = sorted(
        {
            k
            for a in args.values()
            for k in a
            if k not in ("port", "host", "pid", "standin")
            and len({repr(b.get(k)) for b in args.values()}) > 1
            and not isinstance(a.get(k), dict | list)
        }
    )
    out = {}
    for rid, d in docs.items():
        parts = [f"{k}={args[rid].get(k)}" for k in keys]
        names = [p.get("patch") for p in d.get("patches") or []]
        parts += [f"+{n}" for n in names]
        out[rid] = f"{rid} ({', '.join(parts)})" if parts else rid
    return out
