# sglops: include _common, server_common
# Profile SGLang's decode on this host in one round trip: /start_profile (num_steps, CPU+GPU,
# shapes), one single-stream /generate, stop if the profiler did not stop itself, wait until
# every TP rank's trace file is complete, gzip any plain ones. Talks to 127.0.0.1 only.
import gzip
import json
import os
import re
import shutil
import tempfile
import time

_CLOSED = re.compile(rb'^(?:,\s*"[^"]*"\s*:\s*(?:"[^"]*"|[-+\d.eE]+|true|false|null)\s*)*\}$')


def _post(url, body, timeout):
    return http(url, body, timeout)


def _where(args):
    """(root or None, host, port, where the port came from): --port, the launch state, or the default."""
    root = None
    try:
        root = find_sglang(args.get("sglang_root"))["root"]
    except UserError:
        pass
    state = (read_json_file(os.path.join(sglops_dir(root, create=False), "server.json")) if root else None) or {}
    port, port_from = server_port(root, args.get("port"))
    return root, state.get("host") or "127.0.0.1", port, port_from


def _out_dir(root, profile_id):
    for base in ([os.path.join(sglops_dir(root, create=False), "profiles")] if root else []) + [
            os.path.join(tempfile.gettempdir(), "sglops-profiles")]:
        try:
            path = os.path.join(base, profile_id)
            os.makedirs(path, exist_ok=True)
            return path
        except OSError:
            continue
    raise UserError("no writable folder for trace files on this host")


def _pattern(profile_id):
    return re.compile(r"^(?:.+-)?" + re.escape(profile_id) + r"-TP-(\d+)(?:-(?:DP|PP|EP)-\d+)*(?:-(?:EXTEND|DECODE))?"
                      r"\.trace\.json(\.gz)?$")


def _complete(path):
    """A gzip file is complete when its stream decodes to the end; plain JSON when its event array
    is closed and only simple top-level keys (torch's traceName) follow before the final '}'."""
    if path.endswith(".gz"):
        try:
            with gzip.open(path, "rb") as fh:
                while fh.read(1 << 20):
                    pass
            return True
        except (OSError, EOFError, ValueError):
            return False
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 65536))
            tail = fh.read()
    except OSError:
        return False
    after = tail[tail.rfind(b"]") + 1:].strip() if b"]" in tail else b""
    return bool(_CLOSED.match(after))


def _compress(path):
    final = path + ".gz"
    tmp = final + ".sglops-tmp"
    with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, final)
    os.unlink(path)
    return final


def _expected(info):
    """How many files the server will write: one per TP rank (times pipeline stages)."""
    if not isinstance(info, dict):
        return None
    try:
        return max(1, int(info.get("tp_size") or 1)) * max(1, int(info.get("pp_size") or 1))
    except (TypeError, ValueError):
        return None


def _wait(out_dir, pattern, expected, wait_s, started):
    """Poll until the expected files (or, not knowing how many, a set stable for 3 s) are complete."""
    sizes = {}
    done = {}
    stable_since = None
    last_report = 0.0
    while True:
        names = sorted(n for n in os.listdir(out_dir) if pattern.match(n))
        now = time.monotonic()
        for n in names:
            p = os.path.join(out_dir, n)
            try:
                size = os.path.getsize(p)
            except OSError:
                continue
            if n in done and done[n] == size:
                continue
            if sizes.get(n) == size and size > 0 and _complete(p):
                done[n] = size
            sizes[n] = size
        complete = [n for n in names if n in done and done[n] == sizes.get(n)]
        if now - last_report > 0.5:
            progress(phase="waiting", files=len(names), complete=len(complete), expected=expected,
                     bytes=sum(sizes.get(n, 0) for n in names))
            last_report = now
        if expected and len(complete) >= expected:
            return complete
        if not expected and complete and len(complete) == len(names):
            stable_since = stable_since or now
            if now - stable_since >= 3.0:
                return complete
        else:
            stable_since = None
        if now - started > wait_s:
            if not names:
                raise UserError(
                    f"no trace files in {out_dir} after {wait_s:g} s: the server accepted /start_profile but wrote "
                    "nothing (torch profiler disabled on the server, or it writes elsewhere?)")
            raise UserError(f"only {len(complete)} of {expected or len(names)} trace files in {out_dir} were complete "
                            f"after {wait_s:g} s ({', '.join(names)})")
        time.sleep(0.25)


def main(args):
    root, host, port, port_from = _where(args)
    base = local_url(host, port, "")
    status, body = http_get(base + "/get_server_info", timeout=5)
    if status != 200:
        raise UserError(f"no SGLang server answering on {host}:{port} (port from {port_from}): "
                        f"{status or body}; start one (inv restart) or pass --port")
    try:
        info = json.loads(body)
    except ValueError:
        info = {}
    steps = int(args["steps"])
    output_len = max(int(args["output_len"]), steps + 4)  # the profile stops itself after `steps` decode steps
    profile_id = args.get("profile_id") or ("sglops-" + time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    out_dir = _out_dir(root, profile_id)
    req = {"output_dir": out_dir, "num_steps": steps, "activities": ["CPU", "GPU"], "record_shapes": True,
           "profile_id": profile_id}
    status, text = _post(base + "/start_profile", req, timeout=60)
    if status != 200:
        raise UserError(f"/start_profile on {host}:{port} refused: {status or ''} {text.strip()[:200]}")
    progress(phase="decode", output_len=output_len)
    t0 = time.monotonic()
    gen = {"input_ids": list(range(1000, 1032)),
           "sampling_params": {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}}
    status, text = _post(base + "/generate", gen, timeout=float(args.get("generate_timeout_s", 300)))
    decode_s = time.monotonic() - t0
    if status != 200:
        _post(base + "/stop_profile", {}, timeout=30)
        raise UserError(f"/generate on {host}:{port} failed during profiling: {status or ''} {text.strip()[:200]}")
    try:
        meta = json.loads(text).get("meta_info") or {}
    except ValueError:
        meta = {}
    pattern = _pattern(profile_id)
    # num_steps normally stops the profiler; if decode ran fewer steps, stop it ourselves
    started = time.monotonic()
    stopped_by = "num_steps"
    deadline = started + 2.0
    while time.monotonic() < deadline and not any(pattern.match(n) for n in os.listdir(out_dir)):
        time.sleep(0.1)
    if not any(pattern.match(n) for n in os.listdir(out_dir)):
        s, _ = _post(base + "/stop_profile", {}, timeout=60)
        stopped_by = "stop_profile" if s == 200 else "num_steps"
    names = _wait(out_dir, pattern, _expected(info), float(args.get("wait_s", 120)), started)
    files = []
    for n in names:
        path = os.path.join(out_dir, n)
        if not n.endswith(".gz"):
            progress(phase="compress", file=n)
            path = _compress(path)
        m = pattern.match(os.path.basename(path))
        files.append({"path": path, "size": os.path.getsize(path), "rank": int(m.group(1)) if m else None})
    return {"host": host, "port": port, "port_from": port_from, "profile_id": profile_id, "output_dir": out_dir,
            "steps": steps, "output_len": output_len, "stopped_by": stopped_by, "decode_s": round(decode_s, 3),
            "waited_s": round(time.monotonic() - started, 3), "completion_tokens": meta.get("completion_tokens"),
            "tp_size": info.get("tp_size"), "standin": bool(info.get("standin")), "files": files}
