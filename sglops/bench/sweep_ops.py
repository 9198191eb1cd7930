"""The `sweep` operation (task `inv sweep`, play step `sweep`), declared once; the work is sglops.bench.sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglops.bench.ops import AB_BENCH
from sglops.bench.params import BENCH, MIN_IDENTICAL_SHARE, TOLERANCE_LOGPROB
from sglops.core.op import DRY_RUN, JSON, TARGETS, Context, Op, Param
from sglops.core.values import Flag, Int, Name, Required, StrList, Value

SWEEP_BENCH = {**AB_BENCH, "runs": {"kind": Int(1, 1000, 3), "help": "bench repeats per candidate (default {default}: "
                                    "the 95% interval is over them)"}}


@dataclass(frozen=True)
class Items(Value):
    """Strings from a flag (split on `sep`; a repeatable flag hands a list) or a YAML list; none given is None."""

    sep: str | None = None
    what: str = "a list"
    default: Any = None

    def parse(self, raw: Any, label: str) -> list[str] | None:
        if raw == []:
            return None
        items = (([raw] if self.sep is None else raw.split(self.sep)) if isinstance(raw, str)
                 else raw if isinstance(raw, list) else None)
        if items is None or not all(isinstance(x, str) for x in items) or not any(x.strip() for x in items):
            raise self.refuse(label, self.what, raw)
        return [x.strip() for x in items if x.strip()]


VARY = Items(None, "KEY=VALUE[,VALUE...] (repeatable; a list in a play)")
CANDIDATES = Items(";", "CANDIDATE;CANDIDATE... (a list in a play), e.g. attention_backend=flashinfer+gather-cast")


def sweep(ctx: Context, **o: Any):
    """Candidates screened by the probe facts, then restarted, benched (and profiled) one by one; the host restored."""
    from sglops.bench import sweep as sweep_mod
    from sglops.bench.server_nodes import ServerNodes
    from sglops.core.meet import lead
    from sglops.patch.kernel_facts import planned_kernels, planning

    with planning(planned_kernels(ctx.dry_run, ctx.records)):  # a play's dry run: kernels its earlier steps build
        return lead(ctx, "sweep", lambda remotes: sweep_mod.run_checked(ctx, o, ServerNodes(remotes)))


def _prepare(o: dict) -> None:
    """Every candidate parsed and the profile loaded before any host is touched (one line per mistake)."""
    from sglops.bench.sweep_plan import candidates
    from sglops.launch.profiles import load_profile

    load_profile(o["profile"])
    candidates(o.get("vary"), o.get("patches"), o.get("candidates"))


def _check(result: Any, _o: dict) -> None:
    result.check()


OPS = [
    Op("sweep", sweep, "Which configuration should this host (or the nodes of one server) run: candidates (--vary / "
       "--patches /\n--candidates) ruled out by probe facts or restarted, benched and compared one by one (crash "
       "class, tok/s,\noutput identity, top cost); the host is restored.",
       (TARGETS,
        Param("profile", Required(Name("profile")), "the base server profile every candidate changes"),
        Param("vary", VARY, "KEY=a,b: a profile key and its values (repeatable; the candidates are the cross "
              "product), e.g. attention_backend=flashinfer,triton"),
        Param("patches", StrList(), "patch sets as one more axis: none,gather-cast (P+Q for two)"),
        Param("candidates", CANDIDATES, "an explicit list instead: 'attention_backend=flashinfer;attention_backend="
              "flashinfer+gather-cast'"),
        Param("force", Flag(), "run candidates the probe facts rule out (the reasons stay in the table)", flag=False),
        Param("profile_trace", Flag(), "also profile each candidate that started (the trace's top cost)", flag=False),
        *[p.again(**SWEEP_BENCH.get(p.name, {})) for p in BENCH if p.name != "port"],
        TOLERANCE_LOGPROB, MIN_IDENTICAL_SHARE,
        DRY_RUN.again(help="print the candidates, what rules each out and the plan; change and record nothing"),
        JSON),
       step="sweep", prepare=_prepare, check=_check, live="notes", result="sglops.bench.sweep_result:SweepResult",
       record="sweep.json", own_run=True, together=True,
       step_summary=lambda doc: doc.get("recommendation", ""), task={"auto_shortflags": False, "iterable": ["vary"]}),
]

