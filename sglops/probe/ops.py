"""The probe family's operations: facts and probe-backends (play step `probe`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglops.core.op import JSON, TARGETS, Context, Op, Param
from sglops.core.values import Choice, Flag, Str

if TYPE_CHECKING:
    from sglops.probe.facts import Facts
    from sglops.probe.report import ProbeReport
    from sglops.probe.vllm_backends import VllmProbeReport


ENGINE = Param(
    "engine",
    Choice(("auto", "python", "rg"), "auto"),
    "auto (rg if the host has it), rg, or python (stdlib scanner)",
    flag="auto",
)


def facts(ctx: Context) -> Facts:
    from sglops.probe.facts import gather

    return gather(ctx.remote)


def probe(
    ctx: Context,
    probes: str | None = None,
    engine: str = "auto",
    show_hits: bool = False,
    arch: str | None = None,
    model: str | None = None,
    kv_dtype: str | None = None,
    sm: str | None = None,
    profile: str | None = None,
    attention_backend: str | None = None,
) -> ProbeReport | VllmProbeReport:
    from sglops.probe.report import ProbeReport
    from sglops.probe.scan import scan
    from sglops.probe.spec import load_probe_set

    asked = bool(arch or model or profile)
    profile_args: dict = {}
    if profile:
        from sglops.launch.profiles import load_profile

        p = load_profile(profile).for_host(ctx.remote.name)
        if p.var_refs():
            p = p.with_vars(dict(getattr(ctx.remote.host, "vars", None) or {}), ctx.remote.name)
        profile_args = dict(p.args)
    model_path = model or (profile_args.get("model_path") if asked and not arch else None)
    probe_set = load_probe_set(probes)
    if asked:
        from sglops.probe.spec import with_launch_probes

        probe_set = with_launch_probes(probe_set)
    # the host's server's own engine, when it has probes
    report = scan(
        ctx.remote,
        probe_set,
        engine=engine,
        model_path=model_path,
        gpus=asked and not sm,
        other_engines=not probes and not asked,
    )
    if not isinstance(report, ProbeReport):
        return report
    if asked:
        from sglops.probe.launch_path import ask

        report.launch = ask(
            report,
            arch=arch,
            kv_dtype=kv_dtype,
            sm=sm,
            profile_args=profile_args,
            flags={"attention_backend": attention_backend},
        )
    return report


def _load_probes(o: dict) -> None:
    from sglops.probe.spec import load_probe_set

    load_probe_set(o["probes"])


def _probe_summary(doc: dict) -> str:
    flags = doc.get("flags") or []
    return ("FLAG: " + flags[0]) if flags else "no flags raised"


OPS = [
    Op(
        "facts",
        facts,
        "What is on the host: GPUs, compute capability, driver/CUDA, Python, torch, FlashInfer, SGLang, "
        "and the engine serving there when it is another (vLLM: release, platform).",
        (TARGETS, JSON),
        step="facts",
        record="facts.json",
        manifest=lambda _step, doc: {"facts": doc, "sglang": doc.get("sglang"), "engine": doc.get("engine")},
    ),
    Op(
        "probe-backends",
        probe,
        "Which attention backends take FP8 KV, cast the whole pool, guard on arch, do NSA/DSA; "
        "FlashInfer MLA FP8 (a host serving vLLM: its tree's MLA backends, playbooks/probes-vllm.yaml).",
        (
            TARGETS,
            JSON,
            Param("probes", Str(), "probe file (default playbooks/probes.yaml)"),
            Param("show_hits", Flag(), "list every hit as file:line:text", flag=False, play=False),
            ENGINE,
            Param(
                "arch",
                Str(),
                "the launch question: model architecture (a seed config, e.g. GlmMoeDsaForCausalLM)",
            ),
            Param("model", Str(), "the launch question: model folder on the host (its config.json)"),
            Param(
                "kv_dtype", Str(), "the launch question: --kv-cache-dtype (default: the profile's, else auto)"
            ),
            Param(
                "sm",
                Str(),
                "the launch question: GPU as sm90/sm100/sm120 (default: the host's, same round trip)",
            ),
            Param(
                "profile", Str(), "the launch question: a profile's flags (model_path, kv dtype, backends)"
            ),
            Param("attention_backend", Str(), "the launch question: an explicit --attention-backend"),
            Param(
                "wide",
                Flag(),
                "every backend's file:line evidence instead of the compact table",
                flag=False,
                play=False,
            ),
        ),
        step="probe",
        prepare=_load_probes,
        record="probe.json",
        view_options=("show_hits", "wide"),
        step_summary=_probe_summary,
    ),
]
