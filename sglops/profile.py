"""`inv profile`: torch-profile SGLang's decode on a host, fetch every rank's trace, analyse it.

Why one command: the investigation this replaces took a manual /start_profile, a manual wait
for files that were still being written, a manual scp and manual reading of the trace. The
host-side part is one round trip (remote_scripts/profile_capture.py); the download shows a
progress bar; the analysis is sglops.trace's.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.text import Text

from sglops import artifacts
from sglops.console import err_console
from sglops.errors import ConfigError
from sglops.remote import Remote
from sglops.trace import TraceAnalysis, analyze, save_report


@dataclass
class ProfileResult:
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
    analysis: TraceAnalysis
    report: dict

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "analysis"} | {"analysis": self.analysis.to_json()}

    def table(self) -> Group:
        head = Text.assemble(
            ("profile ", "bold"), f"{self.host}:{self.port} ({self.port_from}), {self.steps} decode steps, "
            f"{len(self.traces)} trace file(s) -> {self.folder}/traces "
            f"(decode {self.decode_s:.1f} s, files ready after {self.waited_s:.1f} s, download {self.download_s:.1f} s)")
        if self.standin:
            head.append("\n(stand-in server: synthetic traces, not GPU data)", style="yellow")
        return Group(head, self.analysis.table(), Text(f"report: {self.report.get('markdown')}", style="dim"))


def _bar(remote_files: list[dict]):
    """A rich progress bar over the total bytes of all files (stderr, so --json stays clean)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    total = sum(f["size"] for f in remote_files)
    progress = Progress(TextColumn("download {task.description}", markup=False), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=err_console, transient=True)
    task = progress.add_task(f"{len(remote_files)} trace file(s)", total=total)
    return progress, task


def run_profile(remote: Remote, *, steps: int = 5, output_len: int = 64, port: int | None = None,
                wait_s: float = 120, show_progress: bool = True, run_id: str | None = None) -> ProfileResult:
    """Profile `steps` decode steps of a single-stream request on the host's server, then analyse."""
    if steps < 1 or output_len < 1:
        raise ConfigError(f"--steps and --output-len must be positive (got {steps}, {output_len})")
    status = err_console.status(Text(f"{remote.name}: profiling {steps} decode steps")) if show_progress else None

    def on_progress(ev: dict) -> None:
        if status is not None and ev.get("phase") == "waiting":
            status.update(Text(f"{remote.name}: waiting for trace files ({ev.get('complete')}/"
                               f"{ev.get('expected') or '?'} complete, {ev.get('bytes', 0) / 1e6:.1f} MB)"))

    args = {"sglang_root": remote.host.sglang_root, "port": port, "steps": steps, "output_len": output_len,
            "wait_s": wait_s}
    if status is not None:
        with status:
            doc = remote.run_py("profile_capture", args, timeout=wait_s + 600, on_progress=on_progress)
    else:
        doc = remote.run_py("profile_capture", args, timeout=wait_s + 600)

    run_id = run_id or artifacts.new_run_id()
    folder = artifacts.run_dir(remote.name, run_id)
    traces_dir = folder / "traces"
    traces_dir.mkdir(parents=True, exist_ok=True)
    local: list[str] = []
    t0 = time.monotonic()
    bar = _bar(doc["files"]) if show_progress else None
    done = 0
    with bar[0] if bar else nullcontext():
        for f in doc["files"]:
            target = traces_dir / os.path.basename(f["path"])

            def cb(sent: int, _total: int, _base=done) -> None:
                if bar:
                    bar[0].update(bar[1], completed=_base + sent)

            remote.get(f["path"], target, progress=cb)
            done += f["size"]
            if bar:
                bar[0].update(bar[1], completed=done)
            local.append(str(target))
    download_s = time.monotonic() - t0
    analysis = analyze(local)
    report = save_report(analysis, folder)
    result = ProfileResult(host=remote.name, run_id=run_id, folder=str(folder), port=doc["port"],
                           port_from=doc["port_from"], profile_id=doc["profile_id"], steps=doc["steps"],
                           output_len=doc["output_len"], stopped_by=doc["stopped_by"], remote_dir=doc["output_dir"],
                           traces=local, decode_s=doc["decode_s"], waited_s=doc["waited_s"],
                           download_s=round(download_s, 3), standin=doc.get("standin", False), analysis=analysis,
                           report=report)
    artifacts.save(remote.name, run_id, "profile.json", result.to_json(), task="profile",
                   extra={"traces": [str(Path(p).relative_to(folder)) for p in local]})
    return result
