"""The experiment family's operations, declared once: `ab` (sglops.experiment.ab) and `sweep`
(sglops.experiment.sweep), each on one host or on the nodes of one server (sglops.core.meet.lead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglops.bench.params import (
    BENCH,
    MIN_IDENTICAL_SHARE,
    REQUIRE_IDENTICAL,
    REQUIRE_SAME_CONFIG,
    TOLERANCE_LOGPROB,
    VARIABLE,
)
from sglops.core.console import Live
from sglops.core.op import DRY_RUN, JSON, TARGETS, Context, Op, Param
from sglops.core.values import Flag, Int, Name, Required, Str, StrList, Value

if TYPE_CHECKING:
    from sglops.experiment.ab_result import AbResult
    from sglops.experiment.sweep_result import SweepResult


# -- ab -------------------------------------------------------------------------------------------------
# a round's bench: the bench's parameters, one repeat per round by default, help in ab's words
AB_BENCH = {
    "runs": {
        "kind": Int(1, 1000, 1),
        "help": "bench repeats per round (default {default}: the rounds are the repeats)",
    },
    "input_len": {"help": "prompt tokens (default {default})"},
    "output_len": {"help": "tokens to generate (default {default})"},
    "concurrency": {"help": "streams in flight, e.g. 1,4 (default 1)"},
    "api": {"help": "sglang or openai (default: the serving engine's: openai for vLLM)"},
    "requests": {"help": "requests per repeat and level"},
    "warmup": {"help": "warm-up rounds per level (default {default})"},
    "vocab_size": {"help": "the model's vocabulary when the host cannot read its config.json"},
    "no_logprobs": {"help": "do not ask the server for logprobs (token ids are still compared)"},
}


def ab(ctx: Context, **o: Any) -> AbResult:
    """Interleaved A/B rounds (sglops.experiment.ab): its dry run reads the host and plans; the real one
    restores it. On the nodes of one server (--hosts n0,n1) every round restarts every node
    (sglops.core.meet.lead)."""
    from sglops.core.meet import lead
    from sglops.experiment import ab as ab_mod
    from sglops.experiment.server_nodes import ServerNodes

    return lead(ctx, "ab", lambda remotes: ab_mod.run_checked(ctx, o, ServerNodes(remotes)))


def _ab_prepare(o: dict) -> dict:
    """The sides parsed and their patches' specs loaded, once, here (a bad one is one line before any host is
    touched); run_ab takes them."""
    from sglops.experiment.ab_plan import parse_sides
    from sglops.experiment.as_found import patch_files

    sides = parse_sides(o.get("a"), o.get("b"), o.get("patch"))
    named = list(dict.fromkeys(p for s in sides for p in s.patches))
    return {**o, "sides": sides, "patch_files": patch_files(named)}


# -- sweep ---------------------------------------------------------------------------------------------

SWEEP_BENCH = {
    **AB_BENCH,
    "runs": {
        "kind": Int(1, 1000, 3),
        "help": "bench repeats per candidate (default {default}: the 95% interval is over them)",
    },
}


@dataclass(frozen=True)
class Items(Value):
    """Strings from a flag (split on `sep`; a repeatable
    flag hands a list) or a YAML list; none given is None."""

    sep: str | None = None
    what: str = "a list"
    default: Any = None

    def parse(self, raw: Any, label: str) -> list[str] | None:
        if raw == []:
            return None
        items = (
            ([raw] if self.sep is None else raw.split(self.sep))
            if isinstance(raw, str)
            else raw
            if isinstance(raw, list)
            else None
        )
        if items is None or not all(isinstance(x, str) for x in items) or not any(x.strip() for x in items):
            raise self.refuse(label, self.what, raw)
        return [x.strip() for x in items if x.strip()]


VARY = Items(None, "KEY=VALUE[,VALUE...] (repeatable; a list in a play)")
CANDIDATES = Items(
    ";", "CANDIDATE;CANDIDATE... (a list in a play), e.g. attention_backend=flashinfer+gather-cast"
)


def sweep(ctx: Context, **o: Any) -> SweepResult:
    """Candidates screened by the probe facts, then restarted,
    benched (and profiled) one by one; the host restored."""
    from sglops.core.meet import lead
    from sglops.experiment import sweep as sweep_mod
    from sglops.experiment.server_nodes import ServerNodes
    from sglops.patch.kernel_facts import planned_kernels, planning

    # a play's dry run: kernels its earlier steps build
    with planning(planned_kernels(ctx.dry_run, ctx.records)):
        return lead(ctx, "sweep", lambda remotes: sweep_mod.run_checked(ctx, o, ServerNodes(remotes)))


def _prepare(o: dict) -> dict:
    """Every candidate parsed, once, and the profile loaded before any host is touched (one line per mistake);
    run_sweep takes the candidates."""
    from sglops.experiment.sweep_plan import candidates
    from sglops.launch.profiles import load_profile

    load_profile(o["profile"])
    return {**o, "cands": candidates(o.get("vary"), o.get("patches"), o.get("candidates"))}


def _check(result: Any, _o: dict) -> None:
    result.check()


def _ab_check(result: Any, o: dict) -> None:
    result.check(o["require_identical"], o["require_same_config"])


OPS = [
    Op(
        "ab",
        ab,
        "Interleaved A/B on one host or the nodes of one server (ABAB rounds, restart + patches"
        " ledger-checked each\nround): paired speed verdict, output identity, config differences; the host is"
        " left as it was found.",
        (
            TARGETS,
            Param(
                "a",
                Str(),
                "side A: PROFILE, PROFILE+PATCH[+PATCH...], or +PATCH (the profile the host runs now)",
            ),
            Param(
                "b",
                Str(),
                "side B, spelt the same way (patches named on either side are applied/reverted per round)",
            ),
            Param(
                "patch",
                Name("patch"),
                "this profile without vs with PATCH: A = -a (default: the current profile), B = A+PATCH",
            ),
            Param(
                "rounds",
                Int(1, 100, 3),
                "ABAB rounds, a restart before every bench (default {default}, the fewest "
                "for a speed verdict)",
            ),
            # each round benches its own server
            *[p.again(**AB_BENCH.get(p.name, {})) for p in BENCH if p.name != "port"],
            Param(
                "profile",
                Flag(),
                "also profile one round of each side and rank the trace diff (A -> B)",
                flag=False,
            ),
            REQUIRE_IDENTICAL.again(
                help="exit 8 unless B's outputs are identical to A's (or within the tolerance)"
            ),
            REQUIRE_SAME_CONFIG,
            TOLERANCE_LOGPROB,
            MIN_IDENTICAL_SHARE,
            VARIABLE.again(
                help="config keys meant to differ between A and B, comma-separated (e.g. kv_cache_dtype)"
            ),
            DRY_RUN.again(help="print the whole round plan; change and record nothing"),
            JSON,
        ),
        step="ab",
        prepare=_ab_prepare,
        check=_ab_check,
        live=Live.NOTES,
        record="ab.json",
        own_run=True,
        together=True,
        step_summary=lambda doc: doc.get("verdict", ""),
        task={"auto_shortflags": False},
    ),
    Op(
        "sweep",
        sweep,
        "Which configuration should this host (or the nodes of one server) run: candidates (--vary /"
        " --patches /\n--candidates) ruled out by probe facts or restarted, benched and compared one by one"
        " (crash class, tok/s,\noutput identity, top cost); the host is restored.",
        (
            TARGETS,
            Param("profile", Required(Name("profile")), "the base server profile every candidate changes"),
            Param(
                "vary",
                VARY,
                "KEY=a,b: a profile key and its values (repeatable; the candidates are the cross "
                "product), e.g. attention_backend=flashinfer,triton",
            ),
            Param("patches", StrList(), "patch sets as one more axis: none,gather-cast (P+Q for two)"),
            Param(
                "candidates",
                CANDIDATES,
                "an explicit list instead: 'attention_backend=flashinfer;attention_backend="
                "flashinfer+gather-cast'",
            ),
            Param(
                "force",
                Flag(),
                "run candidates the probe facts rule out (the reasons stay in the table)",
                flag=False,
            ),
            Param(
                "profile_trace",
                Flag(),
                "also profile each candidate that started (the trace's top cost)",
                flag=False,
            ),
            *[p.again(**SWEEP_BENCH.get(p.name, {})) for p in BENCH if p.name != "port"],
            TOLERANCE_LOGPROB,
            MIN_IDENTICAL_SHARE,
            DRY_RUN.again(
                help="print the candidates, what rules each out and the plan; change and record nothing"
            ),
            JSON,
        ),
        step="sweep",
        prepare=_prepare,
        check=_check,
        live=Live.NOTES,
        record="sweep.json",
        own_run=True,
        together=True,
        step_summary=lambda doc: doc.get("recommendation", ""),
        task={"auto_shortflags": False, "iterable": ["vary"]},
    ),
]
