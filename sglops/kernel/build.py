"""`inv build-kernel`: build kernels/<name>/ on a host for its GPU, self-test it there, install it.

kernel.yaml says what to build and how (docs/kernels.md). The laptop reads it, hashes the
sources, picks the target architecture from the host's facts and sends everything to the
`kernel_build` remote script in one round trip; the host builds in a scratch folder, runs the
self-test, and only then swaps the installed version in (one rename). Logs and the result land
in artifacts/<host>/<run-id>/; a failure installs nothing and raises with the log's error lines.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import artifacts, paths
from sglops.core.errors import ConfigError, Refused
from sglops.core.remote import Remote
from sglops.core.result import Result
from sglops.core.yamlio import check_fields, load_yaml
from sglops.probe import facts

LANGUAGES = {"triton", "cuda"}
# Compute capabilities whose family-specific instructions (wgmma, setmaxnreg, tcgen05) need the "a" target.
ARCH_SPECIFIC = {"9.0", "10.0", "10.1", "10.3"}
PLACEHOLDERS = {"python", "arch", "sm", "cc", "gencode", "torch_arch"}


class KernelBuildError(Refused):
    """A build, self-test or install step failed on the host; nothing was installed."""


@dataclass(frozen=True)
class Arch:
    """What to build for: `sm_90a`, with nvcc's -gencode and torch's TORCH_CUDA_ARCH_LIST spelling."""

    cc: str
    sm: str

    @classmethod
    def from_cc(cls, cc: str) -> Arch:
        try:
            major, minor = (int(x) for x in cc.split("."))
        except ValueError:
            raise ConfigError(f"compute capability {cc!r} is not MAJOR.MINOR") from None
        norm = f"{major}.{minor}"
        return cls(norm, f"{major}{minor}" + ("a" if norm in ARCH_SPECIFIC else ""))

    @classmethod
    def parse(cls, text: str) -> Arch:
        """`--arch`: a compute capability (9.0: the default target for it) or a target as written (sm_90)."""
        if "." in text:
            return cls.from_cc(text)
        digits = text.removeprefix("sm_").removesuffix("a")
        if not digits.isdigit() or len(digits) < 2:
            raise ConfigError(
                f"--arch {text!r}: expected a compute capability (9.0) or a target (sm_90a, sm_120)"
            )
        return cls(f"{int(digits[:-1])}.{digits[-1]}", text.removeprefix("sm_"))

    @property
    def name(self) -> str:
        return f"sm_{self.sm}"

    @property
    def gencode(self) -> str:
        return f"-gencode=arch=compute_{self.sm},code=sm_{self.sm}"

    @property
    def torch_arch(self) -> str:
        return self.cc + ("a" if self.sm.endswith("a") else "")


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]
    timeout: float

    def render(self, values: dict[str, str]) -> dict[str, Any]:
        return {
            "argv": [a.format_map(values) for a in self.argv],
            "env": {k: v.format_map(values) for k, v in self.env.items()},
            "timeout": self.timeout,
        }


@dataclass
class KernelSpec:
    """kernels/<name>/kernel.yaml, checked."""

    name: str
    folder: Path
    language: str
    sources: list[str]
    package: str
    build: Command
    selftest: Command
    target: str
    description: str = ""

    def files(self) -> dict[str, bytes]:
        out = {"kernel.yaml": (self.folder / "kernel.yaml").read_bytes()}
        for rel in self.sources:
            out[rel] = (self.folder / rel).read_bytes()
        return out

    def content_hash(self) -> str:
        """sha256 over kernel.yaml and every source (path and bytes): what `unchanged` compares."""
        h = hashlib.sha256()
        for rel, data in sorted(self.files().items()):
            h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        return h.hexdigest()


def available() -> list[str]:
    return [p.parent.name for p in paths.listing("kernels", "*/kernel.yaml", env="SGLOPS_KERNELS")]


def _command(d: Any, what: str, where: str) -> Command:
    if isinstance(d, list):
        d = {"command": d}
    check_fields(d, {"command", "env", "timeout"}, what, {"command"})
    argv = d["command"]
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError(f"{where}: {what}.command must be a list of strings (argv, no shell)")
    env = d.get("env") or {}
    if not isinstance(env, dict):
        raise ConfigError(f"{where}: {what}.env must be a mapping")
    cmd = Command(argv, {str(k): str(v) for k, v in env.items()}, float(d.get("timeout", 600)))
    dummy = dict.fromkeys(PLACEHOLDERS, "x")
    try:
        cmd.render(dummy)
    except (KeyError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"{where}: {what}: unknown placeholder {exc} (known: {', '.join(sorted(PLACEHOLDERS))})"
        ) from None
    return cmd


def load_kernel(name: str) -> KernelSpec:
    """Read and check kernels/<name>/kernel.yaml; a missing kernel lists the ones there are."""
    folder = paths.find("kernels", name, env="SGLOPS_KERNELS")
    path = folder / "kernel.yaml"
    if not path.is_file():
        have = ", ".join(available()) or "none"
        raise ConfigError(f"no kernel {name!r} (no {path}); kernels: {have}")
    d = load_yaml(path)
    check_fields(
        d,
        {"name", "description", "language", "sources", "package", "build", "selftest", "install"},
        "kernel.yaml",
        {"language", "sources", "package", "build", "selftest"},
    )
    where = getattr(d, "where", str(path))
    if d.get("name", name) != name:
        raise ConfigError(f"{where}: name {d['name']!r} does not match its folder {name!r}")
    if d["language"] not in LANGUAGES:
        raise ConfigError(
            f"{where}: language must be one of {', '.join(sorted(LANGUAGES))}, not {d['language']!r}"
        )
    sources = d["sources"]
    if not isinstance(sources, list) or not sources:
        raise ConfigError(f"{where}: sources must be a non-empty list of paths")
    files: list[str] = []
    for pattern in sources:
        matches = sorted(str(p.relative_to(folder)) for p in folder.glob(str(pattern)) if p.is_file())
        if not matches:
            raise ConfigError(f"{where}: source {pattern!r} matches no file in {folder}")
        files += [m for m in matches if m not in files]
    package = str(d["package"]).strip("/")
    if package.startswith("..") or not any(f.startswith(package + "/") for f in files):
        raise ConfigError(f"{where}: package {package!r} must be a folder that holds some of the sources")
    install = d.get("install") or {}
    check_fields(install, {"target"}, "install")
    return KernelSpec(
        name=name,
        folder=folder,
        language=d["language"],
        sources=files,
        package=package,
        build=_command(d["build"], "build", where),
        selftest=_command(d["selftest"], "selftest", where),
        target=str(install.get("target", "site-packages")),
        description=str(d.get("description", "")),
    )


@dataclass
class KernelBuild(Result):
    """What build-kernel did (or would do) on one host."""

    host: str
    kernel: str
    # built | unchanged | would-build | failed
    status: str
    arch: str
    hash: str
    answer: dict[str, Any]
    artifact_dir: str | None = None
    commands: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """A new build was installed (`unchanged`: the same content was already there)."""
        return self.status == "built"

    @property
    def dry_run(self) -> bool:
        return self.status == "would-build"

    @property
    def plan(self) -> list[str]:
        if not self.dry_run:
            return []
        return [
            f"{stage}: " + " ".join([*(f"{k}={v}" for k, v in cmd["env"].items()), *cmd["argv"]])
            for stage, cmd in self.commands.items()
        ] + [f"install {self.kernel} ({self.arch})"]

    def payload(self) -> dict[str, Any]:
        stages = {
            k: {kk: vv for kk, vv in v.items() if kk != "log"}
            for k, v in self.answer.get("stages", {}).items()
        }
        keep = (
            "target_dir",
            "install_path",
            "version_dir",
            "module",
            "python",
            "build_dir",
            "installed_at",
            "state_dir",
            "failed_stage",
            "error_lines",
            "previous",
        )
        return {
            "host": self.host,
            "kernel": self.kernel,
            "status": self.status,
            "arch": self.arch,
            "hash": self.hash,
            "stages": stages,
            "commands": self.commands,
            "artifact_dir": self.artifact_dir,
            **{k: self.answer[k] for k in keep if k in self.answer},
        }

    def run_files(self) -> dict[str, str]:
        """Each stage's whole log beside kernel-build.json (only a build that ran has any)."""
        if self.status not in ("built", "failed"):
            return {}
        return {f"{stage}.log": info.get("log", "") for stage, info in self.answer.get("stages", {}).items()}

    def selftest_summary(self) -> str:
        log = self.answer.get("stages", {}).get("selftest", {}).get("log", "")
        lines = [ln for ln in log.splitlines() if ln.strip()]
        return lines[-1] if len(lines) > 1 else "-"


def _arch_for(remote: Remote, spec: KernelSpec, arch: str | None) -> Arch | None:
    if arch:
        return Arch.parse(arch)
    f = facts.gather(remote)
    if f.compute_capability:
        return Arch.from_cc(f.compute_capability)
    if spec.language == "cuda":
        raise ConfigError(
            f"{remote.name}: no GPU found ({f.data.get('gpu_error') or 'nvidia-smi lists none'}); "
            f"a CUDA kernel needs one to pick its architecture (or pass --arch)"
        )
    return None


def build(
    remote: Remote,
    spec: KernelSpec,
    *,
    dry_run: bool = False,
    force: bool = False,
    target: str | None = None,
    arch: str | None = None,
    run_id: str | None = None,
) -> KernelBuild:
    """Build, self-test and install spec on the host (or say what would happen); see module doc. run_id: the
    run the runner records it as (its logs are named there; a failure carries the result as `kept`); None for
    a library call that records nothing (no run id is minted here)."""
    a = _arch_for(remote, spec, arch)
    values = {
        "python": remote.python,
        "arch": a.name if a else "none",
        "sm": a.sm if a else "none",
        "cc": a.cc if a else "none",
        "gencode": a.gencode if a else "",
        "torch_arch": a.torch_arch if a else "",
    }
    commands = {}
    for stage in ("build", "selftest"):
        cmd = getattr(spec, stage).render(values)
        if a:
            cmd["env"] = {"TORCH_CUDA_ARCH_LIST": a.torch_arch, "SGLOPS_ARCH": a.name, **cmd["env"]}
        commands[stage] = cmd
    digest = spec.content_hash()
    args = {
        "action": "build",
        "name": spec.name,
        "hash": digest,
        "arch": values["arch"],
        "language": spec.language,
        "package": spec.package,
        "target": target or spec.target,
        "sglang_root": remote.host.sglang_root,
        "dry_run": dry_run,
        "force": force,
        **commands,
        "files": {} if dry_run else {k: base64.b64encode(v).decode() for k, v in spec.files().items()},
    }
    budget = commands["build"]["timeout"] + commands["selftest"]["timeout"] + 180
    answer = remote.run_py("kernel_build", args, timeout=budget)
    result = KernelBuild(
        remote.name, spec.name, answer["status"], values["arch"], digest, answer, commands=commands
    )
    if answer["status"] in ("built", "failed") and run_id:
        result.artifact_dir = str(artifacts.run_path(remote.name, run_id))
    if answer["status"] == "failed":
        stage = answer.get("failed_stage", "build")
        info = answer.get("stages", {}).get(stage, {})
        what = {"build": "build", "selftest": "self-test", "install": "install"}.get(stage, stage)
        code = f" (exit {info['exit']})" if "exit" in info else ""
        lines = "\n".join("    " + ln for ln in answer.get("error_lines", []))
        err = KernelBuildError(
            f"{remote.name}: kernel {spec.name}: {what} failed{code} for {values['arch']}; "
            f"nothing installed; logs in {result.artifact_dir or 'its answer (no run recorded)'}\n{lines}"
        )
        # the runner records it (logs and kernel-build.json), then reports this line
        err.kept = result
        raise err
    return result


@dataclass
class KernelAction(Result):
    """An uninstall (or its dry run), or the list of installed kernels."""

    host: str
    answer: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.answer.get("status") == "uninstalled"

    @property
    def dry_run(self) -> bool:
        return self.answer.get("status") == "would-uninstall"

    @property
    def plan(self) -> list[str]:
        a = self.answer
        return (
            [f"remove {a.get(k)}" for k in ("install_path", "version_dir", "build_dir") if a.get(k)]
            if self.dry_run
            else []
        )

    def payload(self) -> dict[str, Any]:
        return {"host": self.host, **self.answer}


def uninstall(remote: Remote, name: str, *, dry_run: bool = False) -> KernelAction:
    """Remove what build-kernel installed (the link, its versioned copy, the build tree, the record)."""
    return KernelAction(
        remote.name,
        remote.run_py(
            "kernel_build",
            {"action": "uninstall", "name": name, "dry_run": dry_run, "sglang_root": remote.host.sglang_root},
        ),
    )


def installed(remote: Remote) -> KernelAction:
    """What sglops installed on the host, from its record."""
    return KernelAction(
        remote.name, remote.run_py("kernel_build", {"action": "list", "sglang_root": remote.host.sglang_root})
    )
