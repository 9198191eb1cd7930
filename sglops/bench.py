"""`inv bench`: single-stream (or concurrent) decode figures measured ON the host, repeated, and kept.

The client is a stdlib script (remote_scripts/bench_client.py) that streams from the host's own
server on 127.0.0.1, so the figures carry no network jitter; it returns raw timings in one
round trip and this module turns them into figures (definitions in docs/bench.md):

- TTFT: request sent -> first chunk that raises the server's completion_tokens.
- ITL: each chunk gap spread over the tokens it carried (per token, as SGLang's native bench).
- TPOT: (e2e - TTFT) / (n - 1) per request, first token excluded (SGLang, vLLM).
- decode tok/s: tokens after the first chunk / (e2e - TTFT) per request; = 1 / TPOT when the first
  chunk carries one token (the usual case); a repeat's figure is the median over its requests.
- output tok/s: all tokens of a repeat / its wall time (bench_serving's output_throughput).
- e2e: request sent -> end of stream.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from sglops import artifacts, stats
from sglops.errors import ConfigError, SglopsError
from sglops.remote import Remote

APIS = ("sglang", "openai")


class BenchIncomplete(SglopsError):
    """Some requests failed: the run is recorded as partial/failed, never as a clean figure."""

    exit_code = 1


# -- figures from raw timings ----------------------------------------------------------------------
def request_metrics(rec: dict) -> dict | None:
    """Derived figures of one successful request (None when it cannot give a decode rate)."""
    n, ttft, e2e = rec["tokens"], rec["ttft_s"], rec["e2e_s"]
    first = rec.get("first_tokens") or 1
    if rec["outcome"] != "ok" or n - first < 1 or ttft is None or e2e is None or e2e <= ttft:
        return None
    tpot = (e2e - ttft) / (n - 1)
    itl = rec.get("itl_s") or []
    return {"tokens": n, "ttft_ms": ttft * 1e3, "e2e_ms": e2e * 1e3, "tpot_ms": tpot * 1e3,
            "decode_tok_s": (n - first) / (e2e - ttft), "itl_ms": [x * 1e3 for x in itl],
            "itl_ms_median": stats.median(itl) * 1e3 if itl else None}


@dataclass
class Level:
    """Everything measured at one concurrency, pooled over the repeats."""

    concurrency: int
    requests_total: int
    outcomes: dict[str, int]
    errors: list[str]
    decode_tok_s: dict | None  # over repeats: median, ci95, cv, noisy, values
    output_tok_s: dict | None
    ttft_ms: dict | None  # pooled over requests: median, p90, p99, ...
    itl_ms: dict | None
    tpot_ms: dict | None
    e2e_ms: dict | None
    per_request: dict[str, list]
    client_cpu_us_per_token: float | None
    itl_basis: list[str]

    @property
    def ok(self) -> int:
        return self.outcomes.get("ok", 0)

    @property
    def status(self) -> str:
        if self.ok == self.requests_total and self.decode_tok_s:
            return "ok"
        return "failed" if not self.ok else "partial"

    def to_json(self) -> dict:
        return {"concurrency": self.concurrency, "status": self.status, "requests": self.requests_total,
                "outcomes": self.outcomes, "errors": self.errors, "decode_tok_s": self.decode_tok_s,
                "output_tok_s": self.output_tok_s, "ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms,
                "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms, "per_request": self.per_request,
                "client_cpu_us_per_token": self.client_cpu_us_per_token, "itl_basis": self.itl_basis}


def analyse(repeats: Sequence[dict], concurrency: int) -> Level:
    """One level's figures from the raw repeats the host script returned."""
    mine = [r for r in repeats if r["concurrency"] == concurrency]
    recs = [rec for r in mine for rec in r["requests"]]
    outcomes = Counter(rec["outcome"] for rec in recs)
    errors = sorted({f"{rec['outcome']}: {rec['error']}" for rec in recs if rec.get("error")})[:5]
    good = [m for m in (request_metrics(rec) for rec in recs) if m]
    per_repeat_decode, per_repeat_output = [], []
    for r in mine:
        ms = [m for m in (request_metrics(rec) for rec in r["requests"]) if m]
        if ms and all(rec["outcome"] == "ok" for rec in r["requests"]):
            per_repeat_decode.append(stats.median([m["decode_tok_s"] for m in ms]))
            per_repeat_output.append(sum(rec["tokens"] for rec in r["requests"]) / r["wall_s"])
    tokens = sum(rec["tokens"] for rec in recs)
    cpu = sum(rec.get("cpu_s") or 0.0 for rec in recs)
    return Level(
        concurrency=concurrency,
        requests_total=len(recs),
        outcomes=dict(outcomes),
        errors=errors,
        decode_tok_s=stats.figure(per_repeat_decode),
        output_tok_s=stats.figure(per_repeat_output),
        ttft_ms=stats.summary([m["ttft_ms"] for m in good]),
        itl_ms=stats.summary([x for m in good for x in m["itl_ms"]]),
        tpot_ms=stats.summary([m["tpot_ms"] for m in good]),
        e2e_ms=stats.summary([m["e2e_ms"] for m in good]),
        per_request={key: [m[key] for m in good] for key in ("decode_tok_s", "tpot_ms", "ttft_ms", "e2e_ms")},
        client_cpu_us_per_token=cpu / tokens * 1e6 if tokens else None,
        itl_basis=sorted({rec.get("itl_basis", "per_token") for rec in recs if rec["outcome"] == "ok"}),
    )


# -- the result -------------------------------------------------------------------------------------------
@dataclass
class BenchResult:
    """One bench run on one host: config, figures per concurrency, and what was running."""

    host: str
    config: dict[str, Any]
    levels: list[Level]
    server_info: dict | None
    sglang: dict | None
    patches: list[dict]
    warmup: list[dict]
    client: dict[str, Any]
    facts: dict | None = None
    raw: list[dict] = field(default_factory=list, repr=False)
    run_id: str | None = None
    artifact: str | None = None

    @property
    def status(self) -> str:
        states = {lv.status for lv in self.levels}
        if states == {"ok"}:
            return "ok"
        return "failed" if states == {"failed"} else "partial"

    def headline(self) -> dict | None:
        """The figure `inv runs` lists: decode tok/s at the lowest concurrency."""
        lv = min(self.levels, key=lambda x: x.concurrency) if self.levels else None
        if not lv or not lv.decode_tok_s:
            return None
        return {"concurrency": lv.concurrency, "median": lv.decode_tok_s["median"], "ci95": lv.decode_tok_s["ci95"],
                "cv": lv.decode_tok_s["cv"]}

    def manifest(self) -> dict:
        """What the run's manifest.json records beside bench.json: what was running."""
        sgl = self.sglang or {}
        return {
            "bench": {"status": self.status, "api": self.config["api"], "decode_tok_s": self.headline(),
                      "input_len": self.config["input_len"], "output_len": self.config["output_len"],
                      "concurrency": self.config["concurrency"], "runs": self.config["runs"]},
            "sglang": {k: sgl.get(k) for k in ("version", "commit", "branch", "dirty", "dirty_files", "root")},
            "patches": self.patches,
            "launch_args": self.server_info,
            "facts": self.facts,
        }

    def to_json(self) -> dict:
        return {"kind": "sglops.bench", "version": 1, "host": self.host, "status": self.status,
                "run_id": self.run_id, "config": self.config, "levels": [lv.to_json() for lv in self.levels],
                "warmup": self.warmup, "client": self.client, **self.manifest(), "raw": self.raw}

    def table(self) -> Table:
        cfg = self.config
        title = (f"bench: {self.host}  {cfg['api']} :{cfg['port']}  in {cfg['input_len']} / out {cfg['output_len']}"
                 f"  x{cfg['runs']} repeats" + (f"  run {self.run_id}" if self.run_id else ""))
        table = Table(title=title, title_justify="left", caption=self._caption(), caption_justify="left")
        for col in ("C", "metric", "median", "p90", "p99", "95% CI (repeats)", "CV"):
            table.add_column(col, justify="left" if col in ("metric", "95% CI (repeats)") else "right")
        for lv in self.levels:
            dim = "" if lv.status == "ok" else "dim "
            for name, fig in (("decode tok/s", lv.decode_tok_s), ("output tok/s", lv.output_tok_s)):
                if fig and (name.startswith("decode") or lv.concurrency > 1):
                    ci = f"[{fig['ci95'][0]:.2f}, {fig['ci95'][1]:.2f}]" if fig["ci95"] else "1 repeat"
                    cvs = Text("-") if fig["cv"] is None else Text.assemble(
                        f"{fig['cv']:.1%}", (" noisy", "red") if fig["noisy"] else "")
                    table.add_row(str(lv.concurrency), Text(name, style=f"{dim}bold"), f"{fig['median']:.2f}", "", "",
                                  ci, cvs)
            for name, summ in (("TPOT ms", lv.tpot_ms), ("ITL ms", lv.itl_ms), ("TTFT ms", lv.ttft_ms),
                               ("e2e ms", lv.e2e_ms)):
                if summ:
                    table.add_row(str(lv.concurrency), name, f"{summ['median']:.2f}", f"{summ['p90']:.2f}",
                                  f"{summ['p99']:.2f}", "", "")
            if lv.status != "ok":
                bad = ", ".join(f"{k} {v}" for k, v in sorted(lv.outcomes.items()) if k != "ok")
                table.add_row(str(lv.concurrency), Text(lv.status.upper(), style="bold red"),
                              f"{lv.ok}/{lv.requests_total} ok", "", "", Text(bad, style="red"), "")
        return table

    def _caption(self) -> Text:
        sgl = self.sglang or {}
        parts: list[Any] = [Text.assemble("status: ", (self.status, "green" if self.status == "ok" else "bold red"))]
        if sgl:
            commit = (sgl.get("commit") or "")[:12]
            parts.append(f"sglang {sgl.get('version') or '?'}" + (f" @ {commit}" if commit else "")
                         + (" (dirty)" if sgl.get("dirty") else ""))
        names = [Text.assemble(f"{p.get('patch')}", "" if p.get("intact", True) else (" (modified since applied)", "red"))
                 for p in self.patches]
        parts.append(Text("patches: ") + (Text(", ").join(names) if names else Text("none")))
        cpu = [lv.client_cpu_us_per_token for lv in self.levels if lv.client_cpu_us_per_token]
        if cpu:
            parts.append(f"client CPU {max(cpu):.0f} us/token")
        lines: list[Any] = [Text("; ").join(Text(p) if isinstance(p, str) else p for p in parts)]
        for lv in self.levels:
            if lv.status != "ok":
                lines.append(Text(f"C={lv.concurrency}: {lv.requests_total - lv.ok} of {lv.requests_total} requests "
                                  "failed; figures cover only the successful ones and are not a clean result",
                                  style="red"))
                lines += [Text(f"  {e}", style="red") for e in lv.errors[:3]]
            if any(b != "per_token" for b in lv.itl_basis):
                lines.append(f"C={lv.concurrency}: the server sent no per-chunk token counts; ITL spread evenly")
        if self.artifact:
            lines.append(f"saved {self.artifact}")
        return Text("\n").join(Text(x) if isinstance(x, str) else x for x in lines)


# -- running it ---------------------------------------------------------------------------------------------
def parse_levels(concurrency: str | int | Sequence[int]) -> list[int]:
    """`1,4,16` -> [1, 4, 16]; refuses anything that is not a positive integer."""
    items = str(concurrency).split(",") if isinstance(concurrency, str | int) else list(concurrency)
    try:
        levels = [int(str(c).strip()) for c in items if str(c).strip()]
    except ValueError:
        raise ConfigError(f"--concurrency must be integers like 1,4,16 (got {concurrency!r})") from None
    if not levels or any(c < 1 for c in levels):
        raise ConfigError(f"--concurrency must be positive integers like 1,4,16 (got {concurrency!r})")
    return list(dict.fromkeys(levels))


def _check(runs: int, input_len: int, output_len: int, api: str, port: int | None) -> None:
    if api not in APIS:
        raise ConfigError(f"--api must be one of {', '.join(APIS)} (got {api!r})")
    if runs < 1:
        raise ConfigError(f"--runs must be at least 1 (got {runs})")
    if input_len < 1 or output_len < 2:
        raise ConfigError(f"--input-len must be >= 1 and --output-len >= 2 (got {input_len}, {output_len})")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"--port must be a TCP port (got {port})")


def run_bench(
    remote: Remote,
    *,
    runs: int = 5,
    input_len: int = 128,
    output_len: int = 256,
    concurrency: str | int | Sequence[int] = 1,
    api: str = "sglang",
    port: int | None = None,
    requests: int | None = None,
    warmup: int = 1,
    request_timeout: float = 120,
    timeout: float = 3600,
    with_facts: bool = True,
    on_progress: Callable[[dict], None] | None = None,
) -> BenchResult:
    """Bench the server on remote's 127.0.0.1:port in one round trip (plus one for host facts).

    A server that is down or unhealthy raises (nothing is measured); failed requests are counted
    per request and make the result partial or failed.
    """
    runs, input_len, output_len = int(runs), int(input_len), int(output_len)
    port = int(port) if port else None  # None: the server sglops started on the host, else 30000
    _check(runs, input_len, output_len, api, port)
    levels = parse_levels(concurrency)
    args = {"port": port, "api": api, "runs": runs, "input_len": input_len, "output_len": output_len,
            "concurrency": levels, "requests": int(requests) if requests else None, "warmup": int(warmup),
            "request_timeout": request_timeout, "sglang_root": remote.host.sglang_root}
    raw = remote.run_py("bench_client", args, timeout=timeout, on_progress=on_progress)
    facts = None
    if with_facts:
        from sglops.facts import gather

        facts = gather(remote).to_json()
    tokens = raw["client_tokens"]
    return BenchResult(
        host=remote.name,
        config={"api": api, "port": raw["port"], "port_from": raw.get("port_from"), "model": raw["model"], "runs": runs, "input_len": input_len,
                "output_len": output_len, "concurrency": levels, "requests_per_run": raw["requests_per_run"],
                "warmup": int(warmup), "ignore_eos": True, "temperature": 0, "input": "random input_ids",
                "order": "repeats interleaved across concurrency levels"},
        levels=[analyse(raw["repeats"], c) for c in levels],
        server_info=raw["server_info"],
        sglang=raw["sglang"],
        patches=raw["patches"],
        warmup=raw["warmup"],
        client={"cpu_s": raw["client_cpu_s"], "tokens": tokens,
                "cpu_us_per_token": raw["client_cpu_s"] / tokens * 1e6 if tokens else None},
        facts=facts,
        raw=raw["repeats"],
    )


def record(result: BenchResult, run_id: str | None = None) -> BenchResult:
    """Keep the run: artifacts/<host>/<run-id>/bench.json plus a manifest of what was running."""
    result.run_id = run_id or artifacts.new_run_id()
    path = artifacts.save(result.host, result.run_id, "bench.json", result.to_json(), task="bench",
                          extra=result.manifest())
    result.artifact = str(path)
    return result


def check(results: Sequence[BenchResult]) -> None:
    """Raise (exit 1) when any host's run is partial or failed; it is already recorded as such."""
    bad = [r for r in results if r.status != "ok"]
    if bad:
        raise BenchIncomplete("; ".join(
            f"{r.host}: run {r.run_id or ''} is {r.status} ("
            + ", ".join(f"{k} {v}" for lv in r.levels for k, v in sorted(lv.outcomes.items()) if k != "ok")
            + ") - not a clean figure" for r in bad))


# -- progress bar ---------------------------------------------------------------------------------------------
class _Board:
    """One rich progress display shared by the hosts benched in parallel (rich allows one live display)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress = None
        self.users = 0

    def open(self, host: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from sglops.console import err_console

        with self.lock:
            if self.progress is None:
                self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                         MofNCompleteColumn(), TextColumn("{task.fields[note]}", markup=False),
                                         TimeElapsedColumn(),
                                         console=err_console, transient=True)
                self.progress.start()
            self.users += 1
            return self.progress.add_task(f"bench {host}", total=None, note="connecting")

    def update(self, task: int, event: dict) -> None:
        with self.lock:
            if self.progress is None:
                return
            phase = event.get("phase", "")
            failed = event.get("failed") or 0
            note = phase + (f", {failed} failed" if failed else "")
            if phase == "measuring":
                self.progress.update(task, total=event.get("total"), completed=event.get("done", 0), note=note)
            else:
                self.progress.update(task, note=note)

    def close(self, task: int) -> None:
        with self.lock:
            if self.progress is None:
                return
            self.progress.remove_task(task)
            self.users -= 1
            if self.users == 0:
                self.progress.stop()
                self.progress = None


_board = _Board()


def step(**options: Any) -> Callable[[Remote], BenchResult]:
    """The per-host step `inv bench` runs: bench with a progress bar, then record the run."""
    parse_levels(options.get("concurrency", 1))  # a bad flag fails before any host is touched

    def run(remote: Remote) -> BenchResult:
        task = _board.open(remote.name)
        try:
            result = run_bench(remote, on_progress=lambda ev: _board.update(task, ev), **options)
        finally:
            _board.close(task)
        return record(result)

    return run


def load(run_dir: str | Path) -> dict:
    """A recorded bench.json (for compare and re-analysis)."""
    path = Path(run_dir) / "bench.json"
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no bench.json (not a bench run?)")
    return artifacts.read_json(path)
