"""Issue 39 on the GPU tier: does sglops' launch-path prediction match the path the real server takes?

Run on the device machine after `scripts/gpu-tier.sh up` (its env.sh sourced: the `local` host, stock sglang
0.5.17, the tiny DeepSeek-V2 model): for each profile, `inv probe-backends --profile P --json` (the prediction
for the host's tree, GPU and the profile's flags), then `inv restart P --check-path --json` (the restart's own
comparison with /server_info: `confirmed` / `mismatches`), and the server log's `server_args=ServerArgs(...)`
line (the arguments after SGLang resolved its defaults), which still names the backend when the start dies
before /server_info answers. Ends with `inv stop`. Writes one small JSON (--out) and prints a table.

    python3 benchmarks/gpu_path_check.py --out $OUT/path_check.json [PROFILE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROFILES = [str(HERE / "gpu_path_check" / f"gpu-{n}.yaml") for n in ("default", "triton", "flashmla")]
ARG = re.compile(r"\b((?:prefill_|decode_)?attention_backend|page_size|kv_cache_dtype)=('[^']*'|None|\d+)")


def inv(*args: str, timeout: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "invoke", *args], capture_output=True, text=True, timeout=timeout
    )
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def first_json(text: str):
    """The JSON document a task printed (--json), or None."""
    try:
        return json.loads(text)
    except ValueError:
        start = text.find("{")
        try:
            return json.loads(text[start:]) if start >= 0 else None
        except ValueError:
            return None


def resolved_args(log_path: str | None, since: int) -> dict:
    """SGLang's resolved server arguments from the last
    `server_args=ServerArgs(` line after offset `since`."""
    if not log_path or not os.path.exists(log_path):
        return {}
    with open(log_path, errors="replace") as fh:
        fh.seek(since)
        lines = [ln for ln in fh if "server_args=ServerArgs(" in ln]
    if not lines:
        return {}
    return {k: None if v == "None" else v.strip("'") for k, v in ARG.findall(lines[-1])}


def newest_restart_record(after: float) -> dict | None:
    """The restart.json the runner kept for a start that failed (it raises after recording it)."""
    root = Path(os.environ.get("SGLOPS_ARTIFACTS", "artifacts"))
    found = [p for p in root.rglob("restart.json") if p.stat().st_mtime >= after]
    if not found:
        return None
    return json.loads(max(found, key=lambda p: p.stat().st_mtime).read_text())


def check(profile: str, timeout: float, log_before: str | None) -> dict:
    """One launch; log_before: the server log an earlier launch named (its size now is where this start's
    lines begin: a start that dies before printing its arguments must not be credited with an earlier
    start's)."""
    row: dict = {"profile": Path(profile).stem}
    rc, out, err, s = inv("probe-backends", "--host", "local", "--profile", profile, "--json", timeout=300)
    launch = (first_json(out) or {}).get("launch") or {}
    row["probe_s"] = round(s, 2)
    row["predicted"] = {
        c["stage"]: {"backend": c["value"], "rule": c.get("rule"), "file": c.get("backend_file")}
        for c in launch.get("choices", [])
    }
    row["prediction"] = {
        k: launch.get(k) for k in ("version", "arch", "sm", "kv_dtype", "flags", "sparse", "assumed")
    }
    if not row["predicted"]:
        row["probe_error"] = (err or out).strip().splitlines()[-3:]
    t0 = time.time()
    since = os.path.getsize(log_before) if log_before and os.path.exists(log_before) else 0
    rc, out, err, s = inv("restart", profile, "--host", "local", "--check-path", "--json", timeout=timeout)
    res = first_json(out)
    if isinstance(res, dict) and "results" in res:
        res = (res["results"] or [{}])[0]
    if not (isinstance(res, dict) and "state" in res):
        res = newest_restart_record(t0) or {}
    row["restart_rc"], row["restart_s"] = rc, round(s, 1)
    for k in (
        "ok",
        "state",
        "waited_s",
        "failure",
        "failure_label",
        "failure_detail",
        "confirmed",
        "mismatches",
        "warnings",
        "log_path",
    ):
        row[k] = res.get(k)
    info = res.get("server_info") or {}
    row["server_info"] = {
        k: info.get(k)
        for k in (
            "attention_backend",
            "prefill_attention_backend",
            "decode_attention_backend",
            "page_size",
            "kv_cache_dtype",
        )
        if k in info
    }
    if res.get("log_path") != log_before:
        # a log this run has not seen before: all of it is this start's
        since = 0
    row["log_offset"] = since
    row["log_args"] = resolved_args(res.get("log_path"), since)
    row["log_lines"] = [
        ln for ln in res.get("log_tail") or [] if re.search(r"attention|FA3|flash_ops|Error", ln)
    ][-6:]
    # the verdict per stage: /server_info when the server answered, else the log's resolved arguments
    verdict = {}
    for stage, p in row["predicted"].items():
        got = (
            row["server_info"].get(f"{stage}_attention_backend")
            or row["server_info"].get("attention_backend")
            or row["log_args"].get(f"{stage}_attention_backend")
            or row["log_args"].get("attention_backend")
        )
        src = (
            "/server_info"
            if row["server_info"]
            else ("server log server_args" if row["log_args"] else "none")
        )
        verdict[stage] = {"predicted": p["backend"], "server": got, "from": src, "match": got == p["backend"]}
    row["verdict"] = verdict
    if not row["predicted"]:
        row["verdict"] = {"error": "no prediction"}
    if err.strip() and not res:
        row["stderr_tail"] = err.strip().splitlines()[-5:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profiles", nargs="*", default=PROFILES)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=420, help="seconds per restart")
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    log = None
    for p in args.profiles:
        row = check(p, args.timeout, log)
        log = row.get("log_path") or log
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("profile", "state", "restart_s", "verdict")}), flush=True)
        args.out.write_text(json.dumps({"rows": rows}, indent=1))
    rc, out, err, s = inv("stop", "--host", "local", timeout=120)
    stages = [v for r in rows for v in r["verdict"].values() if isinstance(v, dict)]
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "seconds": round(time.time() - t0, 1),
        "launches": len(rows),
        "stages": len(stages),
        "stages_matched": sum(v["match"] for v in stages),
        "stop_rc": rc,
        "rows": rows,
    }
    try:
        import torch

        doc["gpu"] = torch.cuda.get_device_name(0)
    # the record says why the GPU is not named
    except Exception as exc:
        doc["gpu"] = f"unknown ({exc})"
    args.out.write_text(json.dumps(doc, indent=1))
    print(
        f"{doc['launches']} launches, {doc['stages_matched']} of {doc['stages']} stages as predicted "
        f"({doc['seconds']} s)"
    )
    for r in rows:
        for stage, v in r["verdict"].items():
            if isinstance(v, dict):
                print(
                    f"  {r['profile']:<14} {stage:<8} predicted {v['predicted']:<10} server"
                    f" {v['server']!s:<10} ({v['from']}) {'match' if v['match'] else 'DIFFERS'} "
                    f" [{r['state']}, {r['restart_s']} s]"
                )


if __name__ == "__main__":
    main()
