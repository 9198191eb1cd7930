"""Views of bench runs: the figures table with its caption, and the live progress board of `inv bench`.

BenchResult (sglops.bench.run) keeps data and JSON; tasks and plays print it through sglops.views.show.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.bench.run import BenchResult


def bench_table(r: BenchResult) -> Table:
    """`inv bench`: per concurrency level the figures with their spread, failures and suspects; the caption says what ran."""
    cfg = r.config
    title = (f"bench: {r.host}  {cfg['api']} :{cfg['port']}  in {cfg['input_len']} / out {cfg['output_len']}"
             f"  x{cfg['runs']} repeats" + (f"  run {r.run_id}" if r.run_id else ""))
    table = Table(title=title, title_justify="left", caption=_caption(r), caption_justify="left")
    for col in ("C", "metric", "median", "p90", "p99", "95% CI (repeats)", "CV"):
        table.add_column(col, justify="left" if col in ("metric", "95% CI (repeats)") else "right")
    for lv in r.levels:
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
        if lv.suspects:
            table.add_row(str(lv.concurrency), Text("suspect", style="yellow"), f"{lv.suspects}/{lv.requests_total}",
                          "", "", Text("kept out of the figures", style="yellow"), "")
    return table

def _caption(r: BenchResult) -> Text:
    """What ran (status, sglang, patches, client CPU, server python) and what a reader should know."""
    sgl = r.sglang or {}
    parts: list[Any] = [Text.assemble("status: ", (r.status, "green" if r.status == "ok" else "bold red"))]
    if sgl:
        commit = (sgl.get("commit") or "")[:12]
        parts.append(f"sglang {sgl.get('version') or '?'}" + (f" @ {commit}" if commit else "")
                     + (" (dirty)" if sgl.get("dirty") else ""))
    names = [Text.assemble(f"{p.get('patch')}", "" if p.get("intact", True) else (" (modified since applied)", "red"))
             for p in r.patches]
    parts.append(Text("patches: ") + (Text(", ").join(names) if names else Text("none")))
    cpu = [lv.client_cpu_us_per_token for lv in r.levels if lv.client_cpu_us_per_token]
    if cpu:
        parts.append(f"client CPU {max(cpu):.0f} us/token")
    py = ((r.server or {}).get("python") or {})
    if py.get("executable"):
        torch = (py.get("torch") or {}).get("version") or "no torch"
        parts.append(f"server python {py.get('version')} ({py['executable']}), torch {torch}")
    lines: list[Any] = [Text("; ").join(Text(p) if isinstance(p, str) else p for p in parts)]
    if r.server_down:
        lines.append(Text(str(r.server_down.get("line")), style="bold red"))
    if r.server_changed:
        lines.append(Text("the server changed during the run: " + "; ".join(r.server_changed[:5]),
                          style="bold red"))
    lines += [Text(n, style="yellow") for n in r.notes()]
    if r.outputs:
        got = sum(1 for e in r.outputs if e.get("ids") is not None)
        lines.append(f"outputs: token ids of {got}/{len(r.outputs)} requests"
                     + (" with logprobs" if r.logprobs_kept else "") + " kept (outputs.json)")
    for lv in r.levels:
        if lv.status != "ok":
            lines.append(Text(f"C={lv.concurrency}: {lv.requests_total - lv.ok} of {lv.requests_total} requests "
                              "failed; figures cover only the successful ones and are not a clean result",
                              style="red"))
            lines += [Text(f"  {e}", style="red") for e in lv.errors[:3]]
        if lv.suspects:
            lines.append(Text(f"C={lv.concurrency}: {lv.suspects} suspect request(s) kept out of the figures: "
                              + "; ".join(lv.suspect_examples), style="yellow"))
        if any(b != "per_token" for b in lv.itl_basis):
            lines.append(f"C={lv.concurrency}: the server sent no per-chunk token counts; ITL spread evenly")
    if r.artifact:
        lines.append(f"saved {r.artifact}")
    return Text("\n").join(Text(x) if isinstance(x, str) else x for x in lines)


class BenchBoard:
    """One rich progress display shared by the hosts benched in parallel (rich allows one live display)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.progress = None
        self.users = 0

    def open(self, host: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from sglops.core.console import err_console

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


board = BenchBoard()  # the terminal's one board (tasks.py hands it to sglops.bench.run.step)
