"""`inv profile`: torch-profile SGLang's decode on a host,
fetch every rank's trace, analyse it, record the run.

Why one command: the investigation this replaces took a manual /start_profile, a manual wait
for files that were still being written, a manual scp and manual reading of the trace. The
host-side part is one round trip (host/profile_capture.py); the download shows a
progress bar; the analysis is sglops.trace's (GPU kernels and the CPU side; a CPU-only trace is
analysed too); the run is kept under artifacts/<host>/<run-id>/ with profile.json and a manifest,
so `inv runs` lists it and `inv report` writes its page.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sglops.core import artifacts
from sglops.core.errors import ConfigError
from sglops.core.op import Draw
from sglops.core.remote import Remote
from sglops.core.result import Observation
from sglops.trace.analysis import TraceAnalysis, analyze, save_report
from sglops.trace.parse import TraceError

ACTIVITIES = ("CPU", "GPU", "MEM")


@dataclass
class ProfileResult(Observation):
    """What one profile produced: where the traces came from and went, and their analysis."""

    host: str
    run_id: str
    folder: str
    port: int
    port_from: str
    profile_id: str
    steps: int
    output_len: int
    stopped_by: str
    remote_dir: str
    traces: list[str]
    decode_s: float
    waited_s: float
    download_s: float
    standin: bool
    # None: the traces were kept but could not be analysed (`error` says why)
    analysis: TraceAnalysis | None
    report: dict
    request: dict | None = None
    sglang_version: str | None = None
    device: str | None = None
    # the host's GPU sampler over the profiled request (host/telemetry.py)
    gpu_telemetry: dict | None = None
    error: str | None = None

    def payload(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("analysis", "error")} | {
            "analysis": self.analysis.to_json() if self.analysis else None,
            **({"error": self.error} if self.error else {}),
        }

    def run_manifest(self) -> dict:
        """Beside profile.json (recorded by the runner): the
        traces, the release, the request, ok or failed."""
        return {
            "traces": [str(Path(p).relative_to(self.folder)) for p in self.traces],
            "sglang": {"version": self.sglang_version},
            "profile": {"request": self.request},
            "status": "failed" if self.error else "ok",
        }


def _activities(spec: str | list[str] | None) -> list[str] | None:
    if spec is None or spec == "":
        return None
    items = [a.strip().upper() for a in (spec.split(",") if isinstance(spec, str) else spec) if a.strip()]
    bad = [a for a in items if a not in ACTIVITIES]
    if bad or not items:
        raise ConfigError(f"--activities takes {', '.join(ACTIVITIES)} (comma-separated), got {spec!r}")
    return items


def run_profile(
    remote: Remote,
    *,
    steps: int = 5,
    output_len: int = 64,
    port: int | None = None,
    wait_s: float = 120,
    on_progress: Callable[[dict], None] | None = None,
    run_id: str,
    activities: str | list[str] | None = None,
    with_stack: bool = False,
    record_shapes: bool = False,
    by_stage: bool = False,
    vocab_size: int | None = None,
    chart: bool = False,
    draw: Draw | None = None,
    probe: str | None = None,
    node: dict | None = None,
    together: Callable[[list[str]], list[str]] | None = None,
) -> ProfileResult:
    """Profile `steps` forward steps of a single-stream request on the host's server, then analyse.

    activities: default CPU+GPU, CPU alone when the server runs on the CPU; with_stack (Python stacks: most
    of the trace's events) and record_shapes are off unless asked; by_stage: SGLang's profile_by_stage, one
    file per rank for EXTEND and one for DECODE; probe: the probe record (probe.json, folder or run id) whose
    findings the stack's source lines are joined with, by default this host's newest of the server's version.
    node: this host is a node of a server over several hosts (profile_id, output_dir, and collect_only for a
    node that serves no HTTP: it only collects its own ranks' files); together(mine) -> every node's trace
    files, so the analysis covers every rank."""
    from sglops.trace import sources

    if steps < 1 or output_len < 1:
        raise ConfigError(f"--steps and --output-len must be positive (got {steps}, {output_len})")
    if vocab_size is not None and int(vocab_size) < 2:
        raise ConfigError(f"--vocab-size must be at least 2 (got {vocab_size})")
    # a bad --probe is refused before the host is touched
    probe_path = sources.probe_file(probe) if probe else None
    say = on_progress or (lambda _ev: None)
    say({"phase": "profiling", "steps": steps})
    from sglops.engine import host_specs

    args = {
        "sglang_root": remote.host.sglang_root,
        "engines": host_specs(),
        "port": port,
        "steps": steps,
        "output_len": output_len,
        "wait_s": wait_s,
        "activities": _activities(activities),
        "with_stack": with_stack,
        "record_shapes": record_shapes,
        "by_stage": by_stage,
        "vocab_size": vocab_size,
        **(node or {}),
    }
    doc = remote.run_py("profile_capture", args, timeout=wait_s + 600, on_progress=say)
    # a node that only collected its ranks' files
    if doc.get("ranks") is not None and "port" not in doc:
        doc = {
            "port": 0,
            "port_from": "node 0 of the server",
            "steps": steps,
            "output_len": output_len,
            "stopped_by": "node 0",
            "decode_s": 0.0,
            **doc,
        }

    # the traces are downloaded into the run the runner records
    folder = artifacts.run_dir(remote.name, run_id)
    local, download_s = _download(remote, doc["files"], folder / "traces", say)
    record = {
        "host": remote.name,
        "run_id": run_id,
        "folder": str(folder),
        "port": doc["port"],
        "port_from": doc["port_from"],
        "profile_id": doc["profile_id"],
        "steps": doc["steps"],
        "output_len": doc["output_len"],
        "stopped_by": doc["stopped_by"],
        "remote_dir": doc["output_dir"],
        "traces": local,
        "decode_s": doc["decode_s"],
        "waited_s": doc["waited_s"],
        "download_s": round(download_s, 3),
        "standin": doc.get("standin", False),
        "request": doc.get("request"),
        "sglang_version": doc.get("sglang_version"),
        "device": doc.get("device"),
        "gpu_telemetry": doc.get("telemetry"),
    }
    if probe_path is None:
        probe_path = sources.latest_for(remote.name, doc.get("sglang_version"))
    try:
        every = together(local) if together else local
        analysis = analyze(every, probe=sources.load(probe_path) if probe_path else None)
    # the traces are kept and the run recorded (by the runner); the line says what broke
    except TraceError as exc:
        exc.kept = ProfileResult(**record, analysis=None, report={}, error=str(exc))
        raise
    report = save_report(analysis, folder, chart=chart, draw=draw)
    # profile.json: the runner records it
    return ProfileResult(**record, analysis=analysis, report=report)


def _download(
    remote: Remote, files: list[dict], traces_dir: Path, say: Callable[[dict], None]
) -> tuple[list[str], float]:
    """Every trace file into traces_dir; progress events over their total bytes."""
    traces_dir.mkdir(parents=True, exist_ok=True)
    local: list[str] = []
    t0 = time.monotonic()
    total, done = sum(f["size"] for f in files), 0
    for f in files:
        target = traces_dir / os.path.basename(f["path"])

        def cb(sent: int, _total: int, _base=done) -> None:
            say(
                {
                    "phase": "downloading",
                    "files": len(files),
                    "bytes_done": _base + sent,
                    "bytes_total": total,
                }
            )

        remote.get(f["path"], target, progress=cb)
        done += f["size"]
        say({"phase": "downloading", "files": len(files), "bytes_done": done, "bytes_total": total})
        local.append(str(target))
    return local, time.monotonic() - t0
