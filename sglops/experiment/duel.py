"""`inv duel`: the same model, workload and limits served by two engines on one host, one after the other.

Why one command: a fair engine comparison needs the same prompts, the same limits spelled each engine's way,
the outputs compared and the host left as found; by hand each of those goes wrong. The plan
(experiment/duel_plan.py) normalises the second profile to the first and refuses when more than the engine
differs; each side is restarted through its profile, benched on the OpenAI API (the one both engines serve)
with the same seeded prompt ids and chosen-token logprobs, profiled (one single-stream decode: each side's top
cost), and stopped; what each server reported is checked against the other's; the server found running before
is started again afterwards. One verdict line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sglops.bench import identity
from sglops.bench import run as bench
from sglops.bench.compare import verdict as speed_verdict
from sglops.bench.stats import bootstrap_ratio_ci
from sglops.core.errors import Failed, SglopsError
from sglops.core.remote import Remote
from sglops.core.result import Result
from sglops.engine import get as get_engine
from sglops.experiment.duel_plan import DuelPlan, effective_rows, plan
from sglops.launch import server as launch


class DuelFailed(Failed):
    """A side did not come up or its bench failed: the duel
    has no verdict (the host is restored all the same)."""


@dataclass
class DuelResult(Result):
    """Both sides' figures, the normalisation table, what
    the servers reported, the outputs compared, a verdict."""

    host: str
    profiles: list[str]
    engines: list[str]
    normalised: list[dict]
    dry_run: bool = False
    plan: list[str] = field(default_factory=list)
    # engine, version, restart (s), bench headline
    sides: list[dict] = field(default_factory=list)
    # knob, a, b, same (as the servers reported them)
    effective: list[dict] = field(default_factory=list)
    # identity of b's outputs against a's
    outputs: dict | None = None
    verdict: str = ""
    # what the host was left as
    restored: str = ""
    started: bool = False

    @property
    def changed(self) -> bool:  # type: ignore[override]
        return self.started

    def payload(self) -> dict:
        return asdict(self)

    def run_manifest(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.verdict and not self.dry_run else "no-verdict",
            "verdict": self.verdict,
        }


def _model_config(remote: Remote, model: str) -> dict:
    text = remote.run(["cat", f"{model}/config.json"], timeout=30).stdout
    try:
        return json.loads(text)
    except ValueError:
        raise SglopsError(f"{remote.name}: {model}/config.json is not JSON") from None


def prepare(remote: Remote, profile_a: str, profile_b: str) -> DuelPlan:
    """Both profiles for this host (per-host overrides and
    {vars.X} filled in), normalised: ConfigError if not."""
    a = launch.load_profile(profile_a).for_host(remote.name).with_vars(remote.host.vars, remote.name)
    b = launch.load_profile(profile_b).for_host(remote.name).with_vars(remote.host.vars, remote.name)
    if "model_path" not in a.args:
        raise SglopsError(f"profile {a.name}: model_path is required for a duel")
    return plan(a, b, _model_config(remote, str(a.args["model_path"])))


def _side(
    remote: Remote, prof: Any, bench_args: dict, keep: Any, profile: Any = None
) -> tuple[dict, bench.BenchResult, dict]:
    eng = get_engine(prof.engine)
    res = launch.restart(remote, prof)
    if not res.ok:
        raise DuelFailed(res.failure_line(f"duel side {prof.name} ({eng.title})"))
    cost: dict = {}
    try:
        result = bench.run_bench(remote, port=res.port, api="openai", with_facts=False, **bench_args)
        # on the server just benched, before it stops
        if profile is not None and result.status == "ok":
            cost = _profiled(profile, res.port, eng.name)
    finally:
        launch.stop(remote, grace_s=prof.stop_grace)
    # each side's bench is a run of its own (<run-id>-<engine>)
    if keep is not None:
        keep(result, eng.name)
    if result.status != "ok":
        raise DuelFailed(
            f"duel side {prof.name} ({eng.title}): bench {result.status}: {'; '.join(result.problems())}"
        )
    lv = result.levels[0]
    side = {
        "profile": prof.name,
        "engine": eng.name,
        "version": res.sglang_version,
        "healthy_after_s": res.waited_s,
        "decode_tok_s": lv.decode_tok_s,
        "ttft_ms": lv.ttft_ms,
        "tpot_ms": lv.tpot_ms,
        "output_tok_s": lv.output_tok_s,
        "confirmed": len(res.confirmed),
        "mismatches": res.mismatches,
        **cost,
    }
    return side, result, res.server_info or {}


def _profiled(profile: Any, port: int, engine: str) -> dict:
    """One profiled single-stream decode on the side's server: its top cost (sglops.experiment.sweep.top_cost)
    and the profile's run; a profile that fails is named in the side, not the duel's failure."""
    from sglops.experiment.sweep import top_cost

    try:
        got = profile(port, engine)
    except SglopsError as exc:
        return {"top_cost": f"profile failed: {str(exc)[:200]}", "profile_run": None}
    return {"top_cost": top_cost(got.analysis) if got.analysis else None, "profile_run": got.run_id}


def duel(
    remote: Remote,
    profile_a: str,
    profile_b: str,
    *,
    runs: int = 3,
    input_len: int = 64,
    output_len: int = 64,
    concurrency: int = 1,
    vocab_size: int | None = None,
    dry_run: bool = False,
    keep: Any = None,
    profile: Any = None,
) -> DuelResult:
    """Serve, bench and compare profile_a's engine then profile_b's on this host (see the module doc).
    profile(port, engine) -> a ProfileResult of the side's
    server after its bench (None: sides not profiled)."""
    p = prepare(remote, profile_a, profile_b)
    result = DuelResult(
        host=remote.name,
        profiles=[p.a.name, p.b.name],
        engines=[get_engine(p.a.engine).name, get_engine(p.b.engine).name],
        normalised=p.rows,
    )
    found = launch.status(remote)
    back = found.profile if found.running else None
    result.plan = [
        f"stop {'the running ' + str(back) if back else 'nothing (no sglops server running)'}",
        *(
            f"restart {x.name} ({get_engine(x.engine).title}), bench {runs} x {input_len}/{output_len} "
            f"tokens at C={concurrency} on /v1/completions{', profile one decode' if profile else ''}, stop"
            for x in (p.a, p.b)
        ),
        f"compare outputs and reported limits; then {'restart ' + back if back else 'leave no server'}",
    ]
    if dry_run:
        result.dry_run = True
        return result
    # one vocabulary for both sides (the model's config.json): the same seeded prompt ids reach both engines
    bench_args = {
        "runs": runs,
        "input_len": input_len,
        "output_len": output_len,
        "concurrency": str(concurrency),
        "vocab_size": vocab_size or p.vocab_size,
    }
    result.started = True
    try:
        side_a, bench_a, info_a = _side(remote, p.a, bench_args, keep, profile)
        side_b, bench_b, info_b = _side(remote, p.b, bench_args, keep, profile)
    finally:
        result.restored = _restore(remote, back)
    result.sides = [side_a, side_b]
    result.effective = effective_rows(p, info_a, info_b)
    same = identity.compare_entries(bench_a.outputs, bench_b.outputs)
    result.outputs = {
        "compared": same.compared,
        "identical": same.identical_prompts,
        "max_logprob_diff": same.max_logprob_diff,
        "median_logprob_diff": same.median_logprob_diff,
        "first_divergence": asdict(same.first_divergence) if same.first_divergence else None,
    }
    result.verdict = verdict_line(result)
    return result


def _restore(remote: Remote, back: str | None) -> str:
    """The host as found: the profile that ran before started again, or no server."""
    if back is None:
        launch.stop(remote)
        return "no server (as found)"
    res = launch.restart(remote, back)
    return f"{back} restarted ({res.state})"


def verdict_line(r: DuelResult) -> str:
    """One line: the speed ratio b/a of single-stream decode with its interval, outputs, and limits agreed."""
    a, b = r.sides
    ma, mb = a["decode_tok_s"]["median"], b["decode_tok_s"]["median"]
    ratio = mb / ma if ma else None
    ci = bootstrap_ratio_ci(a["decode_tok_s"].get("values") or [], b["decode_tok_s"].get("values") or [])
    lo, hi = ci if ci else (None, None)
    agreed = [row["knob"] for row in r.effective if row["same"]]
    disagreed = [row["knob"] for row in r.effective if row["same"] is False]
    call = speed_verdict(ratio, ci, True, not disagreed)
    out = r.outputs or {}
    return (
        f"duel on {r.host}: {a['engine']} {ma:.1f} vs {b['engine']} {mb:.1f} decode tok/s: {b['engine']} "
        f"x{ratio:.3f} [{lo or 0:.2f}, {hi or 0:.2f}] ({call}); outputs {out.get('identical')}/"
        f"{out.get('compared')} prompts identical (max |dlogprob| {out.get('max_logprob_diff') or 0:.3g}); "
        f"limits as the servers report them: {len(agreed)} equal"
        + (f", DIFFERENT: {', '.join(disagreed)}" if disagreed else "")
        + (
            "; top cost: " + "; ".join(f"{s['engine']} {s.get('top_cost') or 'none found'}" for s in (a, b))
            if "top_cost" in a or "top_cost" in b
            else ""
        )
    )
