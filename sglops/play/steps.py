"""What each play step does: the same library functions the tasks call, nothing of their own.

A step kind is `run(ctx, **with)`; it returns a result with `to_json()` (printed through sglops.views.show).
Its `params` (sglops.core.values specs, the same the tasks use for their flags) say which `with:` keys it
takes and check their values when the play is loaded, before any host is touched.
In a dry run a step either asks the host for its own dry run (apply-patch, revert-patch, restart,
build-kernel: they show exactly what would change) or says what it would measure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import values as v
from sglops.core.errors import ConfigError
from sglops.core.remote import Remote
from sglops.play.result import Planned


@dataclass
class StepContext:
    """What a step sees: the host, the play's run, earlier steps' records, dry-run or not."""

    remote: Remote
    run_id: str
    step_id: str
    dry_run: bool
    records: dict[str, dict] = field(default_factory=dict)  # step id -> {"do", "result", "run_dir"?}
    say: Any = None  # callable(str): live progress text for the step (the play's status line)

    def progress(self, text: str) -> None:
        if self.say:
            self.say(text)


@dataclass
class StepKind:
    run: Any
    params: v.Spec = field(default_factory=dict)  # what `with:` takes, checked at load
    summary: Any = None  # result json -> one line for the play's progress/recap
    mutates: bool = False


# -- kinds ------------------------------------------------------------------------------------
def _facts(ctx: StepContext):
    from sglops.probe.facts import gather

    return gather(ctx.remote)


def _probe(ctx: StepContext, probes: str | None = None, engine: str = "auto"):
    from sglops.probe.scan import scan
    from sglops.probe.spec import load_probe_set

    return scan(ctx.remote, load_probe_set(probes), engine=engine)


def _apply_patch(ctx: StepContext, name: str, variant: str | None = None, force: bool = False):
    from sglops.patch import apply as patches
    from sglops.patch import spec as patch_spec

    patch_spec.load(name)
    return patches.apply_patch(ctx.remote, name, dry_run=ctx.dry_run, variant=variant, force=force)


def _revert_patch(ctx: StepContext, name: str, force: bool = False):
    from sglops.patch import apply as patches
    from sglops.patch import spec as patch_spec

    patch_spec.load(name)
    return patches.revert_patch(ctx.remote, name, dry_run=ctx.dry_run, force=force)


def _build_kernel(ctx: StepContext, name: str, force: bool = False, target: str | None = None,
                  arch: str | None = None):
    from sglops.kernel import build as kernels

    return kernels.build(ctx.remote, kernels.load_kernel(name), dry_run=ctx.dry_run, force=force, target=target,
                         arch=arch)


def _restart(ctx: StepContext, profile: str | None = None, rollback: bool = False, timeout: float | None = None,
             port: int | None = None):
    from sglops.launch import server as launch

    def on_progress(ev: dict) -> None:
        ctx.progress(f"{ev.get('phase', '')} {ev['elapsed']:.0f}s" if "elapsed" in ev else ev.get("phase", ""))

    result = launch.restart(ctx.remote, profile, rollback=rollback, dry_run=ctx.dry_run, timeout=timeout, port=port,
                            on_progress=on_progress)
    if not ctx.dry_run and not result.ok:
        raise launch.LaunchFailed(result.failure_line())
    return result


def _bench(ctx: StepContext, runs: int = 5, input_len: int = 128, output_len: int = 256, concurrency: Any = 1,
           api: str = "sglang", port: int | None = None, requests: int | None = None, warmup: int = 1,
           vocab_size: int | None = None, no_logprobs: bool = False):
    from sglops.bench import run as bench

    if ctx.dry_run:
        return Planned(f"bench {runs} repeats, input {input_len} / output {output_len} tokens, concurrency "
                       f"{','.join(map(str, concurrency)) if isinstance(concurrency, list) else concurrency}, "
                       f"{api} API on 127.0.0.1:{port or 'the running server'}; recorded as a run")
    def on_progress(ev: dict) -> None:
        if ev.get("phase") == "measuring":
            ctx.progress(f"request {ev.get('done', 0)}/{ev.get('total', '?')}")

    result = bench.run_bench(ctx.remote, runs=runs, input_len=input_len, output_len=output_len,
                             concurrency=concurrency, api=api, port=port, requests=requests, warmup=warmup,
                             vocab_size=vocab_size, no_logprobs=no_logprobs, on_progress=on_progress)
    bench.record(result, run_id=f"{ctx.run_id}-{ctx.step_id}")
    bench.check([result])
    return result


def _profile(ctx: StepContext, steps: int = 5, output_len: int = 64, port: int | None = None, wait: float = 120):
    from sglops.trace import profile

    if ctx.dry_run:
        return Planned(f"profile {steps} decode steps of a {output_len}-token single-stream request, pull the "
                       "traces back and analyse them")
    return profile.run_profile(ctx.remote, steps=steps, output_len=output_len, port=port, wait_s=wait,
                               show_progress=False, run_id=f"{ctx.run_id}-{ctx.step_id}", chart=True)


def _compare(ctx: StepContext, runs: list[str] | None = None, require_identical: bool = False,
             require_same_config: bool = False, tolerance_logprob: float | None = None,
             min_identical_share: float | None = None, variable: list[str] | None = None):
    from sglops.bench import compare
    from sglops.core import artifacts

    names = runs or [sid for sid, rec in ctx.records.items() if rec["do"] == "bench"]
    if len(names) < 2:
        raise ConfigError(f"step {ctx.step_id}: compare needs at least two bench runs (got {names})")
    if ctx.dry_run:
        return Planned(f"compare decode tok/s of {', '.join(names)} (ratios, intervals, verdict, chart)")
    dirs: list[Path] = []
    for name in names:
        rec = ctx.records.get(name)
        if rec is not None and rec.get("run_dir"):
            dirs.append(Path(rec["run_dir"]))
        elif rec is not None and (rec.get("result") or {}).get("run_id"):
            dirs.append(artifacts.find_run(rec["result"]["run_id"]))
        elif rec is not None:
            raise ConfigError(f"step {ctx.step_id}: step {name} recorded no run to compare")
        else:
            dirs.append(artifacts.find_run(name))
    options = {"tolerance_logprob": tolerance_logprob, "min_identical_share": min_identical_share,
               "variable": variable}
    result = compare.compare_with(dirs, options, out_dir=artifacts.run_dir(ctx.remote.name, ctx.run_id))
    result.check(require_identical, require_same_config)  # kept (comparison.json) before it fails the step
    return result


def _ab(ctx: StepContext, a: str | None = None, b: str | None = None, patch: str | None = None, rounds: int = 3,
        runs: int = 1, input_len: int = 128, output_len: int = 256, concurrency: Any = 1, api: str = "sglang",
        requests: int | None = None, warmup: int = 1, vocab_size: int | None = None, no_logprobs: bool = False,
        profile: bool = False, require_identical: bool = False, require_same_config: bool = False,
        tolerance_logprob: float | None = None, min_identical_share: float | None = None,
        variable: list[str] | None = None):
    """Interleaved A/B rounds (sglops.bench.ab): its dry run reads the host and plans; the real one restores the host."""
    o = {k: v for k, v in locals().items() if k != "ctx"}  # the keys as given: sglops.bench.ab.spec()
    from sglops.bench import ab

    result = ab.run_checked(ctx.remote, o, dry_run=ctx.dry_run, say=ctx.progress)
    result.check(o["require_identical"], o["require_same_config"])  # ab.json is kept before it fails the step
    return result


def _ab_summary(doc: dict) -> str:
    return doc.get("verdict", "")


def _profile_summary(doc: dict) -> str:
    analysis = doc.get("analysis") or {}
    findings = analysis.get("findings") or []
    cpu = (analysis.get("cpu") or {}).get("verdict") or []
    if findings:
        return findings[0]["message"]
    return f"CPU only: {cpu[0]}" if cpu and not analysis.get("gpu") else "no bottleneck rule fired"


def _probe_summary(doc: dict) -> str:
    flags = doc.get("flags") or []
    return ("FLAG: " + flags[0]) if flags else "no flags raised"


def _compare_summary(doc: dict) -> str:
    rows = [r for r in doc.get("rows") or [] if r.get("metric") == "decode tok/s"]
    parts = []
    for r in rows:
        ci = r.get("ratio_ci95")
        ci_s = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        parts.append(f"decode tok/s {r['base']:.2f} -> {r['other']:.2f} (x{r['ratio']:.3f}{ci_s}): {r['verdict']}")
        ident = ((doc.get("identity") or {}).get(r["run"]) or {}).get("line")
        if ident:
            parts[-1] += f", {ident}"
    return "; ".join(parts)


def _bench_summary(doc: dict) -> str:
    lv = (doc.get("levels") or [{}])[0]
    d = lv.get("decode_tok_s") or {}
    if not d:
        return doc.get("status", "")
    lo, hi = (d.get("ci95") or [None, None])[:2]
    ci = f" (95% CI {lo:.2f}-{hi:.2f})" if lo is not None else ""
    return f"decode {d['median']:.2f} tok/s{ci}"


def _ab_spec() -> v.Spec:
    from sglops.bench.ab import spec

    return spec()


_PATCH = {"name": v.Required(v.Name("patch")), "force": v.Flag()}
STEPS: dict[str, StepKind] = {
    "facts": StepKind(_facts),
    "probe": StepKind(_probe, {"probes": v.Str(), "engine": v.Choice(("auto", "python", "rg"), "auto")},
                      summary=_probe_summary),
    "apply-patch": StepKind(_apply_patch, _PATCH | {"variant": v.Name("variant")}, mutates=True),
    "revert-patch": StepKind(_revert_patch, _PATCH, mutates=True),
    "build-kernel": StepKind(_build_kernel, {"name": v.Required(v.Name("kernel")), "force": v.Flag(),
                                             "target": v.Str(), "arch": v.Str()}, mutates=True),
    "restart": StepKind(_restart, v.PROFILE_NAME | {"rollback": v.Flag()} | v.RESTART, mutates=True),
    "bench": StepKind(_bench, v.BENCH, summary=_bench_summary),
    "profile": StepKind(_profile, v.PROFILE, summary=_profile_summary),
    "ab": StepKind(_ab, _ab_spec(), summary=_ab_summary, mutates=True),
    "compare": StepKind(_compare, {"runs": v.StrList()} | v.COMPARE, summary=_compare_summary),
}
