"""What both ways of profiling on this host share: the request and its prompt (ids inside the model's
vocabulary), a failed request explained (a dead server named dead, with its log's cause), and the trace files
waited for until complete and compressed."""

import gzip
import os
import re
import shutil
import time

from ._common import UserError, http, progress
from ._server_proc import death_cause
from ._vocab import draw_prompt_ids, model_token_space
from .server_common import http_get

_CLOSED = re.compile(rb'^(?:,\s*"[^"]*"\s*:\s*(?:"[^"]*"|[-+\d.eE]+|true|false|null)\s*)*\}$')


PREFIX = "sglops"


PROMPT_LEN = 32


# Authorization for a server started with --api-key (its own key, read from its command line here)
AUTH = {}


def post(url, body, timeout):
    """(status, text), or (None, what broke) also when the connection dies mid-answer (IncompleteRead is
    not an OSError): a server that dies during the request is then asked about, not a traceback."""
    from http.client import HTTPException

    try:
        return http(url, body, timeout, headers=AUTH)
    except HTTPException as exc:
        return None, f"{type(exc).__name__}: {exc}"


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
    after = tail[tail.rfind(b"]") + 1 :].strip() if b"]" in tail else b""
    return bool(_CLOSED.match(after))


def compress(path):
    final = path + ".gz"
    tmp = final + ".sglops-tmp"
    with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(tmp, final)
    os.unlink(path)
    return final


PROMPT_SEED = 20261202


def prompt_ids(info, n, vocab_size=None, base=""):
    """n ordinary token ids of the served model (below its vocabulary, no special id), the same every run."""
    space = model_token_space(base, info=info, vocab_size=vocab_size)
    return draw_prompt_ids(space, PROMPT_SEED, n)


def explain_failure(base, what, status, text, log_path):
    """One line for a failed request: the server died (and
    why, from its log), stopped answering, or refused."""
    # a dying server closes its socket a moment after the connection drops
    time.sleep(0.5)
    health, _ = http_get(base + "/health", timeout=5)
    got = f"{status or ''} {str(text).strip()[:160]}".strip()
    if health == 200:
        return f"{what} failed while the server stays healthy: {got}"
    # the last exception line, or the fatal signal of a native crash
    cause = death_cause(log_path)
    state = "died" if health is None else f"is unhealthy (/health answered {health})"
    return (
        f"{what} failed ({got}) and the server {state}"
        + (f": {cause} (from {log_path})" if cause else "; its log says why")
        + ("" if health is not None else "; restart it (inv restart) before profiling again")
    )


def wait_for_traces(out_dir, pattern, expected, wait_s, started, ranks=None):
    """Poll until the expected files (or, not knowing how many, a set stable for 3 s) are complete; with
    ranks, only the files of those ranks count (a node's own share of a server over several hosts)."""
    sizes = {}
    done = {}
    stable_since = None
    last_report = 0.0
    while True:
        names = sorted(
            n
            for n in os.listdir(out_dir)
            if pattern.match(n) and (ranks is None or int(pattern.match(n).group(1)) in ranks)
        )
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
            progress(
                phase="waiting",
                files=len(names),
                complete=len(complete),
                expected=expected,
                bytes=sum(sizes.get(n, 0) for n in names),
            )
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
                    f"no trace files in {out_dir} after {wait_s:g} s: the server accepted /start_profile but"
                    " wrote nothing (torch profiler disabled on the server, or it writes elsewhere?)"
                )
            raise UserError(
                f"only {len(complete)} of {expected or len(names)} trace files in {out_dir} were complete "
                f"after {wait_s:g} s ({', '.join(names)})"
            )
        time.sleep(0.25)
