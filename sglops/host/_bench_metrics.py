# The server's own figures during a bench level: its Prometheus /metrics, scraped at an interval (SGLang with
# --enable-metrics; vLLM always). Only the few series a reader sets beside the client's figures are kept:
# running and queued requests, KV token usage, prefix-cache hit rate, the scheduler's gen throughput, and the
# token counters (their deltas over a level are the server's own token rates). Standard library only.
import threading
import time

from . import _fetch

# the Authorization header the server's --api-key asks for (bench_client sets it)
AUTH = {}

# series -> (field, how several label sets of one series combine: summed counts, or the largest ratio)
SERIES = {
    "sglang:num_running_reqs": ("running", "sum"),
    "sglang:num_queue_reqs": ("queued", "sum"),
    "sglang:token_usage": ("token_usage", "max"),
    "sglang:cache_hit_rate": ("cache_hit_rate", "max"),
    "sglang:gen_throughput": ("gen_throughput", "sum"),
    "sglang:generation_tokens_total": ("generation_tokens", "sum"),
    "sglang:prompt_tokens_total": ("prompt_tokens", "sum"),
    "sglang:num_requests_total": ("requests_total", "sum"),
    "vllm:num_requests_running": ("running", "sum"),
    "vllm:num_requests_waiting": ("queued", "sum"),
    "vllm:kv_cache_usage_perc": ("token_usage", "max"),
    "vllm:gpu_cache_usage_perc": ("token_usage", "max"),
    "vllm:generation_tokens_total": ("generation_tokens", "sum"),
    "vllm:prompt_tokens_total": ("prompt_tokens", "sum"),
}


def parse(text):
    """{field: value} from Prometheus text exposition: the series in SERIES, label sets combined."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.split(" ", 1)[0]
        want = SERIES.get(name)
        if want is None:
            continue
        raw = line[line.rfind("}") + 1 :] if brace >= 0 else line[len(name) :]
        parts = raw.split()
        try:
            value = float(parts[0])
        except (IndexError, ValueError):
            continue
        # NaN: the server has no figure yet
        if value != value:
            continue
        field, how = want
        if field in out:
            out[field] = out[field] + value if how == "sum" else max(out[field], value)
        else:
            out[field] = value
    return out


def scrape(host, port, timeout=5.0):
    """(fields, None) or (None, why not) for one GET /metrics, the whole answer within `timeout` seconds and
    _fetch.ANSWER_MAX bytes (a scrape never holds a level's end)."""
    try:
        status, body = _fetch.get(port, "/metrics", timeout=timeout, host=host, headers=AUTH)
    # no answer in time, too large, cut, refused: "unreachable", and why
    except Exception as exc:  # noqa: BLE001
        return None, f"/metrics unreachable: {type(exc).__name__}"
    if status != 200:
        return None, f"/metrics answered HTTP {status} (SGLang serves it with --enable-metrics)"
    fields = parse(body.decode(errors="replace"))
    if not fields:
        return None, "/metrics has none of the series sglops reads (sglang:num_running_reqs, ...)"
    return fields, None


class Scraper:
    """Scrapes /metrics every `interval` seconds on a thread while a level runs; `stop()` takes a last sample
    and returns the samples, each {"t": seconds since start, field: value, ...}."""

    def __init__(self, host, port, interval):
        self.host, self.port, self.interval = host, port, float(interval)
        self.samples = []
        self.error = None
        self._stop = threading.Event()
        self._t0 = None
        self._thread = None

    def _one(self):
        fields, why = scrape(self.host, self.port)
        if fields is None:
            self.error = self.error or why
            return
        fields["t"] = round(time.perf_counter() - self._t0, 4)
        self.samples.append(fields)

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._one()

    def start(self):
        self._t0 = time.perf_counter()
        self._one()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._one()
        return self.samples


def available(host, port):
    """None when the server serves /metrics with series sglops reads, else why not (one line)."""
    return scrape(host, port)[1]
