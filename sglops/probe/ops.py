"""The probe family's operations: facts and probe-backends (play step `probe`)."""

from __future__ import annotations

from sglops.core.op import JSON, TARGETS, Context, Op, Param
from sglops.core.values import Choice, Flag, Str

ENGINE = Param("engine", Choice(("auto", "python", "rg"), "auto"), "auto (rg if the host has it), rg, or python "
               "(stdlib scanner)", flag="auto")


def facts(ctx: Context):
    from sglops.probe.facts import gather

    return gather(ctx.remote)


def probe(ctx: Context, probes: str | None = None, engine: str = "auto", show_hits: bool = False):
    from sglops.probe.scan import scan
    from sglops.probe.spec import load_probe_set

    return scan(ctx.remote, load_probe_set(probes), engine=engine)


def _load_probes(o: dict) -> None:
    from sglops.probe.spec import load_probe_set

    load_probe_set(o["probes"])


def _probe_summary(doc: dict) -> str:
    flags = doc.get("flags") or []
    return ("FLAG: " + flags[0]) if flags else "no flags raised"


OPS = [
    Op("facts", facts, "What is on the host: GPUs, compute capability, driver/CUDA, Python, torch, FlashInfer, SGLang.",
       (TARGETS, JSON), step="facts", record="facts.json", result="sglops.probe.facts:Facts"),
    Op("probe-backends", probe, "Which attention backends take FP8 KV, cast the whole pool, guard on arch, do NSA/DSA; "
       "FlashInfer MLA FP8.",
       (TARGETS, JSON, Param("probes", Str(), "probe file (default playbooks/probes.yaml)"),
        Param("show_hits", Flag(), "list every hit as file:line:text", flag=False, play=False), ENGINE),
       step="probe", prepare=_load_probes, record="probe.json", result="sglops.probe.report:ProbeReport",
       view_options=("show_hits",), step_summary=_probe_summary),
]
