# Profile a server whose engine fixes its trace folder at launch (vLLM's --profiler-config): the folder is
# read from the server's own command line, /start_profile gets a prefix naming this profile, one single-stream
# completion whose prompt ids lie inside the model's vocabulary runs, /stop_profile writes the files, and
# every file of that prefix is waited for. The engine's names (flag, config key, request fields, file names)
# come from its spec (sglops.engine: Engine.profiler); a server started without the flag has no profiler: one
# line says how to start it with one.
import json
import os
import re
import time

from ._common import UserError, progress
from ._engine_here import platform
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
from ._server_engine import logged_info
from ._server_proc import death_cause, process_environ, server_api_key
from .server_common import http_get, local_url, process_cmdline, read_since
from .telemetry import Sampler


def _config_value(argv, flag, key):
    """(found the flag, the config's `key`, the config) from `FLAG JSON`, `FLAG=JSON` or `FLAG.key VALUE`."""
    config, found = {}, False
    for i, word in enumerate(argv):
        value = None
        if word == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
        elif word.startswith(flag + "."):
            dotted, _, rest = word[len(flag) + 1 :].partition("=")
            config[dotted] = rest if rest else (argv[i + 1] if i + 1 < len(argv) else "")
            found = True
            continue
        if value is not None:
            found = True
            try:
                doc = json.loads(value)
            except ValueError:
                continue
            if isinstance(doc, dict):
                config.update(doc)
    return found, config.get(key), config


def trace_dir(pid, argv, prof):
    """Where the server at pid writes its traces (its config's folder, `~` and a relative path resolved as the
    server resolves them), or raises the one line saying why it has no profiler."""
    found, folder, config = _config_value(argv, prof["config_flag"], prof["dir_key"])
    if not found or not folder:
        raise UserError(
            f"the server (pid {pid}) was started without {prof['config_flag']}"
            f"{' naming ' + prof['dir_key'] if found else ''}: its profiler does not exist (the engine "
            f"fixes the trace folder at launch); restart it with {prof['example']} in the profile's "
            "extra_args"
        )
    if config.get("profiler") not in (None, "torch"):
        raise UserError(
            f"the server (pid {pid}) runs the {config['profiler']!r} profiler, not torch's: no trace "
            "files sglops reads"
        )
    if folder.startswith("~"):
        home = process_environ(pid).get("HOME") or os.path.expanduser("~")
        folder = home + folder[1:]
    if not os.path.isabs(folder):
        try:
            folder = os.path.join(os.readlink(f"/proc/{pid}/cwd"), folder)
        except OSError:
            raise UserError(
                f"the server's trace folder {folder!r} is relative and its working folder is not "
                "readable here"
            ) from None
    return os.path.normpath(folder)


class _Workers:
    """The worker ranks' files of a trace pattern (group
    1, the rank, present): what wait_for_traces counts."""

    def __init__(self, pattern):
        self.pattern = pattern

    def match(self, name):
        m = self.pattern.match(name)
        return m if m and m.group(1) is not None else None


def _models(base):
    """(served model id, the path it loaded) from /v1/models."""
    status, text = http_get(base + "/v1/models", timeout=10, headers=AUTH)
    try:
        data = json.loads(text).get("data") if status == 200 else None
    except (ValueError, AttributeError):
        data = None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    return first.get("id"), first.get("root") or first.get("id")


def capture(args, found):
    """The profile of the server `found` (host/_engine_here.serving_engine) describes."""
    spec, prof = found["spec"], found["spec"]["profiler"]
    host, port, title = found.get("host") or "127.0.0.1", found["port"], spec["title"]
    fixed = [
        f"--{k.replace('_', '-')}"
        for k in ("activities", "with_stack", "record_shapes", "by_stage")
        if args.get(k)
    ]
    if fixed:
        raise UserError(
            f"{' '.join(fixed)}: the {title} server's profiler is configured at its launch "
            f"({prof['config_flag']}: torch_profiler_activities, torch_profiler_with_stack, "
            "torch_profiler_record_shapes); set them in the profile's extra_args and restart it"
        )
    pid = (found.get("proc") or {}).get("pid")
    if not pid:
        raise UserError(
            f"no {title} server answering on {host}:{port} (port from {found['port_from']}): start one "
            "(inv restart) or pass --port"
        )
    base = local_url(host, port, "")
    AUTH.clear()
    key = server_api_key(pid)
    if key:
        AUTH["Authorization"] = "Bearer " + key
    health, _ = http_get(base + "/health", timeout=5)
    if health != 200:
        raise UserError(
            f"the {title} server on {host}:{port} (pid {pid}) is not healthy (/health: "
            f"{health or 'no answer'}); see `inv server-status`"
        )
    out_dir = trace_dir(pid, process_cmdline(pid), prof)
    log_path = found.get("log")
    lines = read_since(log_path, int(found.get("log_offset") or 0)) if log_path else []

    def fetch_json(path):
        status, text = http_get(base + path, timeout=5, headers=AUTH)
        try:
            return json.loads(text) if status == 200 else None
        except ValueError:
            return None

    info = logged_info(spec, fetch_json, lines) or {}
    model, model_path = _models(base)
    steps = int(args["steps"])
    output_len = max(int(args["output_len"]), steps + 4)
    ids = prompt_ids(
        {"model_path": model_path} if model_path else {}, PROMPT_LEN, args.get("vocab_size"), base
    )
    profile_id = args.get("profile_id") or (time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    prefix = f"{PREFIX}-{profile_id}"
    req = {k: v for k, v in {"profile_prefix": prefix}.items() if k in prof["fields"]}
    status, text = post(base + spec["profile_start"], req, timeout=60)
    if status != 200:
        if status is None:
            raise UserError(explain_failure(base, spec["profile_start"], status, text, log_path))
        raise UserError(
            f"{spec['profile_start']} on {host}:{port} refused: {status} {str(text).strip()[:200]}"
        )
    progress(phase="decode", output_len=output_len)
    sampler = Sampler(100).start()
    t0 = time.monotonic()
    body = {
        "prompt": ids,
        "max_tokens": output_len,
        "temperature": 0,
        "ignore_eos": True,
        **({"model": model} if model else {}),
    }
    status, text = post(base + "/v1/completions", body, timeout=float(args.get("generate_timeout_s", 300)))
    decode_s = time.monotonic() - t0
    gpu = sampler.stop()
    stop_status, stop_text = post(base + spec["profile_stop"], {}, timeout=300)
    if status != 200:
        raise UserError(
            explain_failure(
                base, f"/v1/completions on {host}:{port} during profiling", status, text, log_path
            )
        )
    if stop_status != 200:
        cause = death_cause(log_path) if log_path else None
        raise UserError(
            f"{spec['profile_stop']} on {host}:{port} failed: {stop_status} {str(stop_text)[:200]}"
            + (f" ({cause})" if cause else "")
        )
    try:
        tokens = (json.loads(text).get("usage") or {}).get("completion_tokens")
    except (ValueError, AttributeError):
        tokens = None
    pattern = re.compile(prof["traces"].replace("{prefix}", re.escape(prefix)))
    started = time.monotonic()
    # one file per worker rank (tensor x pipeline parallel, as the start-up line says); the front end's (the
    # API server's own, a handful of events unless stacks are on) stays on the host, named, not analysed with
    # the ranks
    ranks = int(info.get("tensor_parallel_size") or 1) * int(info.get("pipeline_parallel_size") or 1)
    names = wait_for_traces(out_dir, _Workers(pattern), ranks, float(args.get("wait_s", 120)), started)
    front = sorted(
        os.path.join(out_dir, n)
        for n in os.listdir(out_dir)
        if pattern.match(n) and pattern.match(n).group(1) is None
    )
    files = []
    for n in names:
        path = os.path.join(out_dir, n)
        if not n.endswith(".gz"):
            path = compress(path)
        files.append(
            {
                "path": path,
                "size": os.path.getsize(path),
                "rank": int(pattern.match(n).group(1)),
                "stage": None,
            }
        )
    return {
        "host": host,
        "port": port,
        "port_from": found["port_from"],
        "profile_id": profile_id,
        "output_dir": out_dir,
        "steps": steps,
        "output_len": output_len,
        "stopped_by": spec["profile_stop"],
        "decode_s": round(decode_s, 3),
        "waited_s": round(time.monotonic() - started, 3),
        "completion_tokens": tokens,
        "request": req,
        "prompt_ids": {"count": len(ids), "max": max(ids)},
        "tp_size": info.get("tensor_parallel_size", 1),
        "sglang_version": info.get("version"),
        "engine": spec["name"],
        "device": platform(spec, found["tree"], lines)[0],
        "model_path": model_path,
        "standin": False,
        "files": files,
        "front_end_files": front,
        "telemetry": gpu,
    }
