# Profile SGLang on this host in one round trip (an engine whose trace folder is fixed at launch, vLLM: see
# _profile_configured.py): POST /start_profile with the fields SGLang reads (num_steps,
# activities, profile_prefix, profile_id, output_dir, with_stack, record_shapes, profile_by_stage), one
# single-stream /generate whose prompt ids lie inside the model's vocabulary, stop the profiler if it did not
# stop itself, wait until every rank's (and stage's) trace file is complete, gzip any plain ones. Talks to
# 127.0.0.1 only. A failed request asks /health: a dead server is named as dead, with its log's last error.
import json
import os
import re
import tempfile
import time

from ._common import UserError, find_sglang, progress, server_port, sglops_dir
from ._fetch import INFO_MAX
from ._profile_request import (
    AUTH,
    PREFIX,
    PROMPT_LEN,
    compress,
    explain_failure,
    post,
    prompt_ids,
    wait_for_traces,
)
from ._server_info import kept_fields
from ._server_proc import listening_pid, server_api_key, stdio_log
from .server_common import (
    flag_value,
    http_get,
    local_url,
    our_server,
    process_cmdline,
    read_json_file,
    state_paths,
)
from .telemetry import Sampler

# GPU samples during the profiled request (a few seconds: every 100 ms)
TELEMETRY_MS = 100


def own_ranks(root):
    """The TP ranks the server sglops started here runs (its launch command): all of them on one host, this
    node's share of a server over several (node_rank k of n holds ranks k*tp/n .. (k+1)*tp/n - 1)."""
    info = our_server(state_paths(root, create=False)) if root else None
    argv = process_cmdline(info["pid"]) if info else []
    if not argv:
        raise UserError("no server sglops started runs on this host: nothing to collect traces of")

    def num(flags, default):
        for flag in flags:
            val = flag_value(argv, flag)
            if val is not None:
                return int(val)
        return default

    tp = num(("--tp-size", "--tp", "--tensor-parallel-size"), 1)
    nodes, rank = num(("--nnodes",), 1), num(("--node-rank",), 0)
    per = max(1, tp // max(1, nodes))
    return list(range(rank * per, (rank + 1) * per))


def collect(args, root):
    """A node of a server over several hosts that does not serve HTTP: wait for its own ranks' trace files of
    the profile node 0 started (same profile id and folder), then hand them over like a full capture."""
    ranks = own_ranks(root)
    out_dir = args["output_dir"]
    profile_id = args["profile_id"]
    pattern = _pattern(profile_id, PREFIX)
    expected = len(ranks) * (2 if args.get("by_stage") else 1)
    started = time.monotonic()
    # the rank makes it when it writes its first trace
    while not os.path.isdir(out_dir):
        if time.monotonic() - started > float(args.get("wait_s", 120)):
            raise UserError(
                f"no trace folder {out_dir} on this node after {float(args.get('wait_s', 120)):g} s: its "
                f"ranks {ranks} wrote nothing (is node 0 profiling this server?)"
            )
        time.sleep(0.25)
    names = wait_for_traces(out_dir, pattern, expected, float(args.get("wait_s", 120)), started, ranks)
    return {
        "profile_id": profile_id,
        "output_dir": out_dir,
        "ranks": ranks,
        "files": _finish(out_dir, names, pattern),
        "waited_s": round(time.monotonic() - started, 3),
    }


def _finish(out_dir, names, pattern):
    files = []
    for n in names:
        path = os.path.join(out_dir, n)
        if not n.endswith(".gz"):
            progress(phase="compress", file=n)
            path = compress(path)
        m = pattern.match(os.path.basename(path))
        files.append(
            {
                "path": path,
                "size": os.path.getsize(path),
                "rank": int(m.group(1)) if m else None,
                "stage": m.group(3) if m else None,
            }
        )
    return files


def _where(args):
    """(root or None, host, port, where the port came from): --port, the launch state, or the default."""
    root = None
    try:
        root = find_sglang(args.get("sglang_root"))["root"]
    except UserError:
        pass
    state = (
        read_json_file(os.path.join(sglops_dir(root, create=False), "server.json")) if root else None
    ) or {}
    port, port_from = server_port(root, args.get("port"))
    return root, state.get("host") or "127.0.0.1", port, port_from


def _server_info(base):
    """/server_info (SGLang >= 0.5.x), else the deprecated /get_server_info; (status, dict)."""
    status, body = None, ""
    for path in ("/server_info", "/get_server_info"):
        status, body = http_get(base + path, timeout=5, limit=INFO_MAX, headers=AUTH)
        if status == 200:
            try:
                return status, kept_fields(json.loads(body)) or {}
            except (ValueError, RecursionError):
                return status, {}
        if status is None:
            break
    return status, body


def _out_dir(root, profile_id):
    """Where the server writes: sglops' state folder on this host (the SGLang tree's), else the temp dir."""
    bases = []
    if root:
        try:
            bases.append(os.path.join(sglops_dir(root), "profiles"))
        except OSError:
            pass
    bases.append(os.path.join(tempfile.gettempdir(), "sglops-profiles"))
    for base in bases:
        try:
            path = os.path.join(base, profile_id)
            os.makedirs(path, exist_ok=True)
            return path
        except OSError:
            continue
    raise UserError("no writable folder for trace files on this host")


def _pattern(profile_id, prefix=None):
    """SGLang's names:
    [{prefix}-]{profile_id}-TP-{rank}[-DP-n][-PP-n][-EP-n][-EXTEND|-DECODE].trace.json.gz."""
    head = re.escape(prefix) + "-" if prefix else r"(?:.+-)?"
    return re.compile(
        "^" + head + re.escape(profile_id) + r"-TP-(\d+)((?:-(?:DP|PP|EP)-\d+)*)(?:-(EXTEND|DECODE))?"
        r"\.trace\.json(\.gz)?$"
    )


def _expected(info, by_stage):
    """How many files the server will write: one per TP x
    PP x DP rank, times two stages with profile_by_stage."""
    if not isinstance(info, dict):
        return None
    try:
        ranks = 1
        for key in ("tp_size", "pp_size", "dp_size"):
            ranks *= max(1, int(info.get(key) or 1))
    except (TypeError, ValueError):
        return None
    return ranks * (2 if by_stage else 1)


# -- prompt ids inside the model's vocabulary ---------------------------------------------------------------
# SGLang does not check input_ids: an id past the vocabulary makes the embedding lookup raise and the server
# dies. The token space is read as the bench client reads it (_vocab: config.json, tokenizer, --vocab-size).


# -- a request that failed: is the server still there? ------------------------------------------------------
def _log_of(root):
    """The server log sglops keeps for a server it started on this host."""
    if not root:
        return None
    # <checkout>/.sglops, or the per-user folder of an installed tree
    state_dir = sglops_dir(root, create=False)
    state = read_json_file(os.path.join(state_dir, "server.json")) or {}
    for cand in (state.get("log"), os.path.join(state_dir, "server.log")):
        if cand and os.path.isfile(cand):
            return cand
    return None


def start_request(args, info, out_dir, profile_id):
    """The /start_profile body: only what was asked, so the server's own defaults never add Python stacks."""
    activities = args.get("activities") or (
        ["CPU"] if str(info.get("device") or "") == "cpu" else ["CPU", "GPU"]
    )
    req = {
        "output_dir": out_dir,
        "num_steps": int(args["steps"]),
        "activities": list(activities),
        "profile_prefix": PREFIX,
        "profile_id": profile_id,
        "with_stack": bool(args.get("with_stack")),
        "record_shapes": bool(args.get("record_shapes")),
    }
    if args.get("by_stage"):
        req["profile_by_stage"] = True
    return req


def main(args):
    if not args.get("collect_only") and args.get("engines"):
        from ._engine_here import serving_engine

        # another engine than the default serves here
        found = serving_engine(args)
        # its trace folder is fixed at launch
        if found and found["spec"].get("profiler"):
            from ._profile_configured import capture

            return capture(args, found)
    root, host, port, port_from = _where(args)
    if args.get("collect_only"):
        return collect(args, root)
    base = local_url(host, port, "")
    pid = listening_pid(port)
    key = server_api_key(pid) if pid else None
    AUTH.clear()
    if key:
        AUTH["Authorization"] = "Bearer " + key
    status, info = _server_info(base)
    if status != 200:
        raise UserError(
            f"no SGLang server answering on {host}:{port} (port from {port_from}): "
            f"{status or info}; start one (inv restart) or pass --port"
        )
    steps = int(args["steps"])
    # the profile stops itself after `steps` steps
    output_len = max(int(args["output_len"]), steps + 4)
    ids = prompt_ids(info, PROMPT_LEN, args.get("vocab_size"), base)
    profile_id = args.get("profile_id") or (time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    out_dir = args.get("output_dir") or _out_dir(root, profile_id)
    if args.get("output_dir"):
        os.makedirs(out_dir, exist_ok=True)
    ranks = own_ranks(root) if args.get("own_ranks_only") else None
    log_path = _log_of(root) or stdio_log(pid)
    req = start_request(args, info, out_dir, profile_id)
    status, text = post(base + "/start_profile", req, timeout=60)
    if status != 200:
        if status is None:
            raise UserError(explain_failure(base, "/start_profile", status, text, log_path))
        raise UserError(f"/start_profile on {host}:{port} refused: {status} {text.strip()[:200]}")
    progress(phase="decode", output_len=output_len)
    # GPU telemetry over the profiled request, stopped with it
    sampler = Sampler(TELEMETRY_MS).start()
    t0 = time.monotonic()
    gen = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True},
    }
    status, text = post(base + "/generate", gen, timeout=float(args.get("generate_timeout_s", 300)))
    decode_s = time.monotonic() - t0
    gpu = sampler.stop()
    if status != 200:
        line = explain_failure(base, f"/generate on {host}:{port} during profiling", status, text, log_path)
        post(base + "/stop_profile", {}, timeout=30)
        raise UserError(line)
    try:
        meta = json.loads(text).get("meta_info") or {}
    except ValueError:
        meta = {}
    pattern = _pattern(profile_id, PREFIX)
    expected = _expected(info, bool(args.get("by_stage")))
    if ranks is not None:
        expected = len(ranks) * (2 if args.get("by_stage") else 1)
    # num_steps normally stops the profiler; if the request ran fewer steps, stop it ourselves
    started = time.monotonic()
    stopped_by = "num_steps"
    deadline = started + 2.0

    def present():
        return [
            n
            for n in os.listdir(out_dir)
            if pattern.match(n) and (ranks is None or int(pattern.match(n).group(1)) in ranks)
        ]

    while time.monotonic() < deadline and len(present()) < (expected or 1):
        time.sleep(0.1)
    if len(present()) < (expected or 1):
        s, _ = post(base + "/stop_profile", {}, timeout=120)
        stopped_by = "stop_profile" if s == 200 else "num_steps"
    names = wait_for_traces(out_dir, pattern, expected, float(args.get("wait_s", 120)), started, ranks)
    files = _finish(out_dir, names, pattern)
    return {
        "host": host,
        "port": port,
        "port_from": port_from,
        "profile_id": profile_id,
        "output_dir": out_dir,
        "steps": steps,
        "output_len": output_len,
        "stopped_by": stopped_by,
        "decode_s": round(decode_s, 3),
        "waited_s": round(time.monotonic() - started, 3),
        "completion_tokens": meta.get("completion_tokens"),
        "request": req,
        "prompt_ids": {"count": len(ids), "max": max(ids)},
        "tp_size": info.get("tp_size"),
        "sglang_version": info.get("version"),
        "device": info.get("device"),
        "model_path": info.get("model_path"),
        "standin": bool(info.get("standin")),
        "files": files,
        "telemetry": gpu,
    }
