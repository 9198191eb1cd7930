"""`inv facts`: what is on a GPU host (GPUs, CUDA, Python, torch, FlashInfer, SGLang), one round trip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglops.core.remote import Remote
from sglops.core.result import Observation


@dataclass
class Facts(Observation):
    """The host's facts as its remote script reported them (read-only: an observation)."""

    host: str
    data: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        return {"host": self.host, **self.data}

    @property
    def sm(self) -> str | None:
        """The GPUs' architecture as `sm120`, `sm90` (first GPU; mixed hosts are flagged in the table)."""
        gpus = self.data.get("gpus") or []
        return gpus[0]["sm"] if gpus else None

    @property
    def compute_capability(self) -> str | None:
        gpus = self.data.get("gpus") or []
        return gpus[0]["compute_capability"] if gpus else None

    @property
    def sglang(self) -> dict | None:
        return self.data.get("sglang")

    @property
    def engine(self) -> dict | None:
        """The engine serving on the host when it is not the default one (its release, tree, platform)."""
        return self.data.get("engine")

    def rows(self) -> list[tuple[str, str]]:
        d = self.data
        gpus = d.get("gpus") or []
        if gpus:
            names = sorted({g["name"] for g in gpus})
            ccs = sorted({g["compute_capability"] for g in gpus})
            gpu = (
                f"{len(gpus)}x {' / '.join(names)} (cc {', '.join(ccs)}, {gpus[0]['memory_mib'] // 1024} GiB"
                " each)"
            )
            driver = gpus[0]["driver"]
        else:
            gpu, driver = f"none found ({d.get('gpu_error') or 'no GPUs'})", "-"
        cuda = d.get("cuda") or {}
        smi = d.get("nvidia_smi") or {}
        # the host's nvidia-smi says so itself (see sglops/host/facts.py: nvidia_smi)
        if smi.get("standin"):
            mark = f" [STAND-IN nvidia-smi {smi.get('path')}: no real GPU]"
            gpu += mark
        sgl = d.get("sglang")
        if sgl:
            where = f"{sgl['package_dir']} ({sgl['kind']})"
            ver = sgl.get("version") or "unknown version"
            if sgl.get("commit"):
                ver += f" @ {sgl['commit'][:12]}" + (
                    " (dirty: " + ", ".join(sgl["dirty_files"][:3]) + ")" if sgl["dirty"] else ""
                )
            if sgl.get("version_source"):
                ver += f" (from {sgl['version_source']})"
        else:
            where, ver = d.get("sglang_error") or "not found", "-"

        def dist(key: str, source: bool = False) -> str:
            info = d.get(key)
            if not info:
                return "not installed"
            if not info.get("version"):
                return f"at {info.get('location')}"
            return info["version"] + (
                f" (from {info['version_source']})" if source and info.get("version_source") else ""
            )

        rows = []
        if d.get("container"):
            c = d["container"]
            rows.append(("container", f"{c['id'][:12]} (image {c['image'].removeprefix('sha256:')[:12]})"))
        return (
            rows
            + [
                ("GPUs", gpu),
                (
                    "driver",
                    f"{driver} (CUDA {cuda.get('driver_cuda') or '?'})"
                    + (" [STAND-IN nvidia-smi]" if smi.get("standin") else ""),
                ),
                ("nvcc", cuda.get("nvcc") or "not found"),
                (
                    "python",
                    f"{d['python']['version']} ({d['python']['executable']})"
                    + (f", from {d['python']['source']}" if d["python"].get("source") else ""),
                ),
                ("torch", dist("torch")),
                ("flashinfer", dist("flashinfer", source=True)),
                ("sglang", ver),
                ("sglang at", where),
                ("ripgrep", d.get("ripgrep") or "not found (probes use grep)"),
            ]
            + self._engine_rows()
            + (
                [("host python", f"{host['version']} ({host['executable']}), runs sglops' scripts")]
                if (host := d.get("host_python")) and host.get("executable") != d["python"].get("executable")
                else []
            )
        )

    def _engine_rows(self) -> list[tuple[str, str]]:
        e = self.data.get("engine")
        if not e:
            return (
                [("serving engine", f"none other found ({self.data['engine_error']})")]
                if self.data.get("engine_error")
                else []
            )
        name = e["name"]
        ver = (e.get("version") or "unknown version") + (
            f" (from {e['version_source']})" if e.get("version_source") else ""
        )
        state = f"serving on port {e['port']}" if e.get("running") else "not running"
        return [
            (name, ver),
            (f"{name} at", f"{e['package_dir']} ({e['kind']}; {state}, {e['source']})"),
            (
                f"{name} platform",
                f"{e.get('platform') or 'unknown'}"
                + (f" (from {e['platform_source']})" if e.get("platform_source") else ""),
            ),
        ]


def gather(remote: Remote, port: int | None = None) -> Facts:
    """One round trip: the facts script runs on the host and answers JSON.

    `port`: the server whose Python to describe (default: the one sglops started there, else 30000).
    """
    from sglops.engine import host_specs

    args = {"sglang_root": remote.host.sglang_root, "port": port, "engines": host_specs()}
    return Facts(remote.name, remote.remembered(("facts", port), lambda: remote.run_py("facts", args)))
