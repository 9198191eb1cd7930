"""`inv probe-backends`: a declarative probe set (playbooks/probes.yaml) run in one round trip.

The YAML says what to look for; the host script (host/probe_scan.py) finds it with
ripgrep or a stdlib scanner; this module turns the raw hits into facts other steps can
test (`report.facts["flashinfer_mla_fp8"]`) and into the table an engineer reads.
"""

from __future__ import annotations

from sglops.core.errors import ConfigError
from sglops.core.remote import Remote
from sglops.probe.report import ProbeReport
from sglops.probe.spec import (
    ENGINES,
    Probe,
    ProbeSet,
    load_probe_set,
)
from sglops.probe.vllm_backends import VllmProbeReport

__all__ = ["Probe", "ProbeReport", "ProbeSet", "load_probe_set", "scan"]

SCAN_TIMEOUT_S = 300


def scan(
    remote: Remote,
    probe_set: ProbeSet | None = None,
    *,
    engine: str = "auto",
    model_path: str | None = None,
    gpus: bool = False,
    cache: bool = True,
    other_engines: bool = False,
) -> ProbeReport | VllmProbeReport:
    """Run the whole probe set on the host in ONE round trip and derive the facts; `model_path`: also read its
    config.json there, `gpus`: also the GPUs' compute capability (the launch question's inputs, same trip).
    `cache`: the host may answer from its tree cache (host/_tree_cache.py: kept until a file or folder the
    probes read, or the patch ledger's folder, stats differently); False scans afresh and keeps nothing.
    other_engines: where the host's server is another engine with a probe set of its own (sglops.engine:
    probe_set), that engine's tree is probed instead, in the same round trip (host/engine_probe.py)."""
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(sorted(ENGINES))}, got {engine!r}")
    probe_set = probe_set or load_probe_set()
    script, args = request(
        remote.host.sglang_root,
        probe_set,
        engine=engine,
        model_path=model_path,
        gpus=gpus,
        cache=cache,
        other_engines=other_engines,
    )
    raw = remote.run_py(script, args, timeout=SCAN_TIMEOUT_S)
    if "engine_tree" in raw:
        from sglops.probe.vllm_backends import scan_files

        found = raw["engine_tree"]
        report = scan_files(raw["files"], remote.name, found, _engine_probe_sets()[found["engine"]])
        report.seconds = raw.get("seconds")
        return report
    report = ProbeReport.build(remote.name, probe_set, raw)
    report.extra = {k: raw[k] for k in ("model", "gpus") if k in raw}
    return report


def request(
    sglang_root: str | None,
    probe_set: ProbeSet,
    *,
    engine: str = "auto",
    model_path: str | None = None,
    gpus: bool = False,
    cache: bool = True,
    other_engines: bool = False,
) -> tuple[str, dict]:
    """(host script, its arguments): what one probe sends the host (the benchmarks send the peers it too)."""
    args = {
        "sglang_root": sglang_root,
        "engine": engine,
        "backends": {"files": probe_set.backend_files},
        "probes": [p.to_wire() for p in probe_set.probes],
        "model_path": model_path,
        "gpus": gpus,
        "cache": cache,
    }
    sets = _engine_probe_sets() if other_engines else {}
    if not sets:
        return "probe_scan", args
    from sglops.engine import host_specs
    from sglops.probe.vllm_backends import files_read

    return "engine_probe", {
        **args,
        "engines": host_specs(),
        "engine_probes": {name: files_read(path) for name, path in sets.items()},
    }


def _engine_probe_sets() -> dict:
    """{engine name: its probe set's path} of the engines that have one of their own."""
    from sglops.core.paths import shipped
    from sglops.engine import ENGINES as SERVING

    return {e.name: shipped(f"playbooks/{e.probe_set}") for e in SERVING.values() if e.probe_set}
