"""`inv duel` (sglops.experiment.duel): one host, two engines, the same model, workload and limits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglops.core.op import DRY_RUN, JSON, TARGET, Context, Op, Param
from sglops.core.values import Flag, Int, Name, Required

if TYPE_CHECKING:
    from sglops.experiment.duel import DuelResult


def duel(ctx: Context, **o: Any) -> DuelResult:
    from sglops.experiment import duel as duel_mod

    # one decode profiled on the side's server: a run of its own
    def profile(port: int, engine: str) -> Any:
        from sglops.trace.profile import run_profile

        run_id = f"{ctx.own_run_id}-{engine}-profile"
        return ctx.keep_run(
            lambda: run_profile(ctx.remote, port=port, run_id=run_id, vocab_size=o.get("vocab_size")),
            "profile.json",
            task="profile",
            run_id=run_id,
        )

    return duel_mod.duel(
        ctx.remote,
        o["a"],
        o["b"],
        runs=o["runs"],
        input_len=o["input_len"],
        output_len=o["output_len"],
        concurrency=o["concurrency"],
        vocab_size=o.get("vocab_size"),
        dry_run=ctx.dry_run,
        keep=(
            None
            if ctx.dry_run
            else lambda r, engine: ctx.keep(
                # a run per side
                r,
                "bench.json",
                task="bench",
                run_id=f"{ctx.own_run_id}-{engine}",
            )
        ),
        profile=None if o.get("no_profile") else profile,
    )


def _prepare(o: dict) -> None:
    """Both profiles load and name two engines, before any host is touched."""
    from sglops.launch.profiles import load_profile

    a, b = load_profile(o["a"]), load_profile(o["b"])
    if a.engine == b.engine:
        from sglops.core.errors import ConfigError

        raise ConfigError(f"a duel is between two engines: {a.name} and {b.name} are both {a.engine}")


OPS = [
    Op(
        "duel",
        duel,
        "Two engines on one host, one after the other: the same model, prompts and limits (the second"
        " profile\nnormalised to the first, refused unless only the engine differs), outputs compared, the"
        " host left as found; one verdict.",
        (
            TARGET,
            Param("a", Required(Name("profile")), "the reference profile (its limits are the duel's)"),
            Param("b", Required(Name("profile")), "the other engine's profile (normalised to a's limits)"),
            Param("runs", Int(1, 100, 3), "bench repeats per side (default {default})"),
            Param("input_len", Int(1, 1 << 20, 64), "prompt tokens (default {default})"),
            Param("output_len", Int(2, 1 << 20, 64), "tokens to generate (default {default})"),
            Param("concurrency", Int(1, 4096, 1), "streams in flight (default {default})"),
            Param(
                "vocab_size",
                Int(2, 1 << 24),
                "the model's vocabulary when the host cannot read its config.json",
            ),
            Param("no_profile", Flag(), "do not profile each side (its top cost)", flag=False),
            DRY_RUN.again(help="print the plan and the normalisation table; change nothing"),
            JSON,
        ),
        prepare=_prepare,
        record="duel.json",
        own_run=True,
        step="duel",
        step_summary=lambda doc: doc.get("verdict", ""),
    ),
]
