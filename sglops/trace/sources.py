"""Source lines of the hot kernels, joined with the probe's findings and the patches that target them.

Why: the investigation's turning point needed three facts side by side: the kernel that costs the time (the
trace), the SGLang line that launches it (the trace's Python frames, sglops.trace.stacks), and what is known
about that line (the probe: "casts the whole KV pool",
and the patch that removes it). Nothing is guessed here:
- a probe finding is a hit of a recorded probe run (`probe.json`, written by `inv probe-backends`): file
  (inside the sglang package), line, enclosing function, the probe's own words for a hit;
- a frame "is flagged" when a hit lies in the same file and the same function, at or after the line torch gave
  the frame (torch names a frame by its function's first line, so the hit's line is the more precise one);
- a patch "targets" a hit when its `patch.yaml` checks require the hit's text to be absent from that file
  after applying (`checks: [{file: ..., absent: "..."}]`): what the patch declares it removes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sglops.core import paths
from sglops.core.errors import ConfigError, SglopsError
from sglops.trace.stacks import GRAPH_PREFIX, Frame, package_path, parse_frame


@dataclass(frozen=True)
class ProbeHit:
    """One line a probe found: `flashinfer_mla_backend.py:660
    (forward_decode)`, and what the probe says of it."""

    probe: str
    meaning: str
    # inside the sglang package: srt/layers/attention/x.py
    file: str
    line: int
    func: str | None
    text: str

    def to_json(self) -> dict:
        return {
            "probe": self.probe,
            "meaning": self.meaning,
            "file": self.file,
            "line": self.line,
            "func": self.func,
            "text": self.text,
        }


@dataclass
class ProbeIndex:
    """The hits of one recorded probe run, and the patches that declare what they remove."""

    # the probe.json it came from
    source: str
    sglang_version: str | None
    hits: list[ProbeHit]
    # (patch, file in package, absent text)
    targets: list[tuple[str, str, str]] = field(default_factory=list)

    def flags(self, frame: Frame, what: str | None = None) -> list[ProbeHit]:
        """The hits inside this frame's function (same file, same function, at or after its first line) that
        could have launched `what`. A frame carries its function's first line only, so every kernel that
        function launched shares it: a cast the probe found (`.to(...)`) explains a copy/cast kernel, not the
        attention kernel launched a few lines later (the H200's BatchMLAPageAttentionHopperKernel was tagged
        "casts the whole KV pool" before this check)."""
        rel = frame.rel
        return [
            h
            for h in self.hits
            if h.file == rel
            and h.func == frame.func
            and h.line >= frame.line
            and (what is None or _could_launch(h, what))
        ]

    def patches_for(self, hit: ProbeHit) -> list[str]:
        return sorted(
            {name for name, file, absent in self.targets if file == hit.file and absent in hit.text}
        )


_CAST_HIT = re.compile(r"\.to\(|\bcast", re.I)
_CAST_KERNEL = re.compile(r"copy|cast|convert|elementwise", re.I)


def _could_launch(hit: ProbeHit, what: str) -> bool:
    """A cast hit explains only copy/cast-like kernels and
    ops; any other hit, whatever its function launched."""
    if not _CAST_HIT.search(f"{hit.text} {hit.meaning}"):
        return True
    return bool(_CAST_KERNEL.search(what))


def _read_json(path: Path) -> dict:
    import orjson

    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a probe record ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("probes"), list):
        raise ConfigError(f"{path}: not a probe record (no 'probes' list; written by inv probe-backends)")
    return doc


def probe_file(spec: str) -> Path:
    """A probe.json from a path, a folder holding one, or a probe run's id."""
    p = Path(spec).expanduser()
    if p.is_file():
        return p
    if p.is_dir() and (p / "probe.json").is_file():
        return p / "probe.json"
    from sglops.core import artifacts

    try:
        run = artifacts.find_run(spec)
    except SglopsError:
        run = None
    if run is not None and (run / "probe.json").is_file():
        return run / "probe.json"
    raise ConfigError(
        f"--probe {spec}: no probe.json there (a file, a folder, or the run id of inv probe-backends)"
    )


def load(spec: str | os.PathLike) -> ProbeIndex:
    """The probe findings of one recorded run, with the targets the patches declare."""
    path = probe_file(str(spec))
    doc = _read_json(path)
    hits = []
    for probe in doc["probes"]:
        if not isinstance(probe, dict):
            continue
        for h in probe.get("hits") or []:
            if isinstance(h, dict) and isinstance(h.get("line"), int) and h.get("file"):
                hits.append(
                    ProbeHit(
                        str(probe.get("id")),
                        str(probe.get("hit") or probe.get("id")),
                        package_path(str(h["file"])),
                        h["line"],
                        h.get("func"),
                        str(h.get("text") or ""),
                    )
                )
    version = (doc.get("facts") or {}).get("sglang_version") or (doc.get("sglang") or {}).get("version")
    return ProbeIndex(str(path), version, hits, patch_targets())


def patches_root() -> Path:
    """Where the patches live: $SGLOPS_PATCHES, else the repo's patches/ (as `inv apply-patch` reads them)."""
    return paths.folders("patches", env="SGLOPS_PATCHES")[-1]


def patch_targets(root: Path | None = None) -> list[tuple[str, str, str]]:
    """(patch, file inside the sglang package, text) for every `absent:` check of every patch.yaml."""
    from sglops.core.yamlio import load_yaml

    out = []
    for spec in sorted((root or patches_root()).glob("*/patch.yaml")):
        try:
            doc = load_yaml(spec)
        except (SglopsError, OSError):
            # a broken patch is `inv patches`'s to report, not the trace analysis'
            continue
        for check in (doc.get("checks") if isinstance(doc, dict) else None) or []:
            if isinstance(check, dict) and check.get("file") and check.get("absent"):
                out.append((spec.parent.name, package_path(str(check["file"])), str(check["absent"])))
    return out


def latest_for(host: str, version: str | None = None) -> Path | None:
    """The newest probe.json recorded for this host (of the same SGLang version when both are known)."""
    from sglops.core import artifacts

    for run in reversed(artifacts.list_runs(host)):
        path = Path(run["path"]) / "probe.json"
        if "probe.json" not in (run.get("files") or []) or not path.is_file():
            continue
        try:
            doc = _read_json(path)
        except ConfigError:
            continue
        # another engine's probe record (no source-line probes)
        if not isinstance(doc.get("probes"), list):
            continue
        got = (doc.get("facts") or {}).get("sglang_version")
        if version and got and got != version:
            continue
        return path
    return None


def beside(files: list[str]) -> Path | None:
    """For traces kept by `inv profile` (artifacts/<host>/<run>/traces/): the host's newest probe.json of the
    SGLang version the run's manifest names. None for traces anywhere else."""
    from sglops.core import artifacts

    try:
        folder = Path(files[0]).resolve().parent
        root = artifacts.artifacts_root().resolve()
    except OSError:
        return None
    # <root>/<host>/<run>/traces
    if folder.name != "traces" or len(folder.parents) < 3 or folder.parents[2] != root:
        return None
    manifest = folder.parent / "manifest.json"
    version = None
    if manifest.is_file():
        try:
            version = (artifacts.read_json(manifest).get("sglang") or {}).get("version")
        # an unreadable manifest: match any version
        except Exception:
            version = None
    return latest_for(folder.parent.parent.name, version)


def rows(pairs: dict[tuple[str, str], float], total: float, top: int, probe: ProbeIndex | None) -> list[dict]:
    """The top (frame, kernel-or-op) pairs by time: share,
    the frame parsed, the probe hits in it, the patches."""
    out = []
    for (frame_name, what), us in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        graph = frame_name.startswith(GRAPH_PREFIX)
        frame = parse_frame(frame_name.removeprefix(GRAPH_PREFIX))
        hits = probe.flags(frame, what) if (probe and frame and not graph) else []
        patches = sorted({p for h in hits for p in probe.patches_for(h)}) if probe else []
        label = frame.label if frame else frame_name
        out.append(
            {
                "what": what,
                "us": us,
                "share": us / total if total > 0 else 0.0,
                "frame": frame_name,
                "source": frame.to_json() if frame else None,
                "graph": graph,
                "label": f"{label} [CUDA graph replay]" if graph else label,
                "probe": [h.to_json() for h in hits],
                "patches": patches,
            }
        )
    return out
