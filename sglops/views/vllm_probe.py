"""`inv probe-backends` on a host whose server is vLLM: one row per MLA backend (FP8 read mode, arch gate),
the MLA priority list per compute capability, and where the tree was found."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from sglops.probe.vllm_backends import VllmProbeReport


def vllm_probe_view(rep: VllmProbeReport, show_hits: bool = False, wide: bool = False) -> Group:
    found = rep.found or {}
    title = (
        f"probe-backends: {rep.host} (vLLM {rep.version or '?'}, {found.get('kind', '?')}, "
        f"{found.get('source', '?')}; {rep.seconds or 0:.2f} s)"
    )
    backends = Table("MLA backend", "FP8 KV read mode and arch gate", box=None, pad_edge=False)
    for name in rep.names():
        backends.add_row(name, rep.summary(name).split(": ", 1)[1])
    prio = Table("CC major", "MLA priority (first wins)", box=None, pad_edge=False)
    for cc, lists in rep.priorities.items():
        prio.add_row(cc, "; ".join(", ".join(names) for names in lists))
    parts: list = [Text(title, style="bold"), Text(f"tree: {rep.tree}"), backends]
    parts += [prio] if rep.priorities else [Text("no MLA priority list in this release (if-chains)")]
    if show_hits or wide:
        for name, b in sorted(rep.backends.items()):
            for fact, got in b["facts"].items():
                for line in got.get("lines") or []:
                    parts.append(Text(f"{name} {fact}: {line}"))
    return Group(*parts)
