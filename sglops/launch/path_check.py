"""After a restart: the attention path predicted from the host's tree against what the running server reports.

`inv restart` calls `check_restart` once the server is healthy: one probe round trip (the release's rules and
the model's config.json), the prediction of sglops/probe/launch_path.py for the profile's flags, then a
comparison with the server's own `/server_info` (or `/get_server_info`) fields and the backend lines of its
log. A difference lands in the restart's `mismatches` (printed, recorded in restart.json); a match in
`confirmed`. A start that died after resolving its arguments (a default backend whose library the host lacks)
is compared with the resolved arguments its log printed (`server_args=ServerArgs(...)`): what it chose is
known even though it never served.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sglops.core.errors import SglopsError

if TYPE_CHECKING:
    from sglops.core.remote import Remote
    from sglops.launch.results import RestartResult

SERVER_ARGS = re.compile(r"\b(\w*attention_backend|\w*_(?:prefill|decode)_backend)=(?:'([^']*)'|None)")
LOG_LINE = re.compile(
    r"attention backend|DSA backends|NSA backends|dsa_(prefill|decode)|nsa_(prefill|decode)", re.I
)


def reported(info: dict[str, Any], stage: str, sparse: bool) -> tuple[str | None, str]:
    """The backend the server says it runs for a stage, and the /server_info field that says it."""
    if sparse:
        for key in (f"dsa_{stage}_backend", f"nsa_{stage}_backend"):
            if info.get(key):
                return str(info[key]), key
    for key in (f"{stage}_attention_backend", "attention_backend"):
        if info.get(key):
            return str(info[key]), key
    return None, ""


def logged_args(log_lines: list[str]) -> dict[str, str]:
    """The backend fields of the last `server_args=ServerArgs(...)` line a server logged (empty if none)."""
    for line in reversed(log_lines):
        if "server_args=ServerArgs(" in line:
            return {k: v for k, v in SERVER_ARGS.findall(line) if v}
    return {}


def compare(predicted: dict[str, Any], info: dict[str, Any], log_lines: list[str]) -> dict[str, Any]:
    """{stage: {predicted, reported, field, match}} plus the log lines that name backends."""
    out: dict[str, Any] = {"stages": {}, "log": [ln.strip() for ln in log_lines if LOG_LINE.search(ln)][-6:]}
    for ch in predicted.get("choices", []):
        got, key = reported(info, ch["stage"], bool(predicted.get("sparse")))
        out["stages"][ch["stage"]] = {
            "predicted": ch["value"],
            "reported": got,
            "field": key,
            "backend_file": ch["backend_file"],
            "rule": ch["rule"],
            "match": got is not None and got == ch["value"],
        }
    if predicted.get("sparse"):
        got = info.get("attention_backend")
        out["stages"]["sparse switch"] = {
            "predicted": "dsa/nsa",
            "reported": got,
            "field": "attention_backend",
            "match": got in ("dsa", "nsa"),
        }
    return out


def check_restart(
    remote: Remote, result: RestartResult, profile_args: dict[str, Any]
) -> dict[str, Any] | None:
    """Predict this launch on the host's tree and set the restart's confirmed/mismatches from /server_info.
    Returns the comparison (None when there is nothing to compare); never raises for a failed check."""
    from sglops.probe.launch_path import ask
    from sglops.probe.scan import scan
    from sglops.probe.spec import load_probe_set, with_launch_probes

    info, source = result.server_info, "/server_info"
    if not result.ok:
        info, source = logged_args(result.log_tail), "the server's logged server_args (it then died)"
    if result.dry_run or not info:
        return None
    if not profile_args.get("model_path"):
        result.warnings.append("attention path not predicted: the profile names no model_path")
        return None
    explicit = any(
        profile_args.get(k)
        for k in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    )
    try:
        report = scan(
            remote, with_launch_probes(load_probe_set()), model_path=profile_args.get("model_path"), gpus=True
        )
        gpus = (report.extra.get("gpus") or {}).get("gpus") or []
        if not gpus and not explicit:
            result.warnings.append(
                "attention path not predicted: the host has no GPU and the profile names no "
                "attention backend (the default rule is the GPU's)"
            )
            return None
        predicted = ask(
            report,
            arch=None,
            kv_dtype=str(profile_args.get("kv_cache_dtype") or "auto"),
            sm=None if gpus else "sm00",
            profile_args=profile_args,
        )
    except (SglopsError, OSError, KeyError, ValueError) as exc:
        result.warnings.append(f"attention path not predicted: {exc}")
        return None
    cmp = compare(predicted, info, result.log_tail)
    for stage, row in cmp["stages"].items():
        key = f"attention {stage}"
        if row["match"]:
            where = f" ({row['rule']})" if row.get("rule") else ""
            result.confirmed[key] = f"{row['reported']} as predicted{where}, {source} {row['field']}"
        else:
            result.mismatches[key] = {"asked": f"predicted {row['predicted']}", "effective": row["reported"]}
    cmp["predicted"], cmp["source"] = predicted, source
    return cmp


def check_after_restart(remote: Remote, result: RestartResult, profile: str) -> dict[str, Any] | None:
    """`inv restart PROFILE --check-path`: the profile's
    flags as this host renders them, then check_restart."""
    from sglops.engine import get as get_engine
    from sglops.launch.profiles import load_profile

    p = load_profile(profile).for_host(remote.name)
    if not get_engine(p.engine).launch_path_rules:
        return None
    if p.var_refs():
        p = p.with_vars(dict(getattr(remote.host, "vars", None) or {}), remote.name)
    return check_restart(remote, result, dict(p.args))
