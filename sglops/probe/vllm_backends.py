"""Probe a vLLM release tree: how each MLA backend reads an FP8 KV cache, which GPUs it admits, and the MLA
priority list the CUDA platform walks per compute capability.

Why a probe and not a table: these facts move between releases (0.10.2's TRITON_MLA refused FP8 KV, 0.32.0's
dequantises it inside its decode kernel; 0.32.0 gates FlashInfer and CUTLASS MLA on `major == 10` in the
backend, 0.10.2 in the platform), so they are read from the tree the host has. The probes are data
(playbooks/probes-vllm.yaml); the tree is read, never imported (it needs CUDA).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import paths
from sglops.core.errors import ConfigError
from sglops.core.result import Observation
from sglops.core.yamlio import check_fields, load_yaml

PROBES = paths.shipped("playbooks/probes-vllm.yaml")
PROBE_FIELDS = {"id", "regex", "capture", "fact", "hit", "miss", "follow"}


@dataclass
class VllmProbeReport(Observation):
    """Per MLA backend its facts (hit, the lines, a captured value), and the priority lists per CC major;
    `inv probe-backends` on a host whose server is vLLM
    answers with it (host and where the tree was found)."""

    tree: str
    version: str | None
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    platform: dict[str, Any] = field(default_factory=dict)
    priorities: dict[str, list[list[str]]] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    host: str | None = None
    # the host's answer: engine, version source, why this tree
    found: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None

    def payload(self) -> dict:
        from dataclasses import asdict

        return {"engine": "vllm", **asdict(self)}

    def names(self) -> list[str]:
        return sorted(set(self.backends) | set(self.absent))

    def summary(self, name: str) -> str:
        """One line per backend: the FP8 read mode and the arch gate, as the probes found them."""
        if name in self.absent:
            return f"{name}: not in vLLM {self.version}"
        f = self.backends[name]["facts"]
        if f["fp8_refused"]["hit"]:
            fp8 = "refuses FP8 KV"
        elif f["fp8_dequant_in_kernel"]["hit"]:
            fp8 = "FP8 KV dequantised to the query dtype in the kernel"
        elif f["fp8_scale_folded"]["hit"]:
            fp8 = "FP8 KV read in the kernel (scales folded into bmm1_scale)"
        elif f["fp8_query"]["hit"]:
            fp8 = "FP8 KV (and an FP8 query) read by its kernel"
        elif f["fp8_native_kernel"]["hit"]:
            fp8 = "FP8 KV read by an FP8 kernel of its own"
        elif f["fp8_kv_listed"]["hit"]:
            fp8 = "FP8 KV listed (read mode not found)"
        else:
            fp8 = "no FP8 KV path in the backend file"
        gate = f["arch_gate"].get("capture")
        arch = f"CC major {gate}" if gate else "no arch gate in the backend"
        return f"{name}: {fp8}; {arch}" + ("; FP8 needs SM89+" if f["fp8_needs_sm89"]["hit"] else "")


def load_spec(path: Path = PROBES) -> dict:
    spec = load_yaml(path) or {}
    check_fields(spec, {"backends", "probes", "platform", "priorities"}, f"vLLM probe set {path.name}")
    for probe in spec.get("probes") or []:
        check_fields(
            probe, PROBE_FIELDS, f"{path.name}: probe {probe.get('id', '?')}", {"id", "regex", "fact"}
        )
        try:
            re.compile(probe["regex"])
        except re.error as exc:
            raise ConfigError(f"{path.name}: probe {probe['id']}: bad regex: {exc}") from None
    return spec


def files_read(spec_path: Path = PROBES) -> list[str]:
    """The globs (under the package) of every file the
    probe set reads: what a host sends back to be probed."""
    spec = load_spec(spec_path)
    globs = [spec["backends"]["files"], "_version.py"]
    for probe in spec.get("probes") or []:
        globs += list(probe.get("follow") or [])
    for part in ("platform", "priorities"):
        if (spec.get(part) or {}).get("file"):
            globs.append(spec[part]["file"])
    return list(dict.fromkeys(globs))


def scan_files(
    files: dict[str, str], host: str, found: dict[str, Any], spec_path: Path = PROBES
) -> VllmProbeReport:
    """The probe set over a host's files ({path under the package: text}), laid out as the package here."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sglops-vllm-probe-") as tmp:
        pkg = Path(tmp) / "vllm"
        for rel, text in files.items():
            target = (pkg / rel).resolve()
            if not target.is_relative_to(pkg.resolve()):
                raise ConfigError(f"{host}: the host sent a file outside its vLLM tree: {rel!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        report = scan_tree(pkg, spec_path)
    report.tree, report.host, report.found = found.get("package_dir") or report.tree, host, found
    report.version = report.version or found.get("version")
    return report


def _grep(probe: dict, files: list[Path], pkg: Path) -> dict:
    rx = re.compile(probe["regex"])
    lines, capture = [], None
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = rx.search(line)
            if m:
                lines.append(f"{path.relative_to(pkg)}:{n}: {line.strip()[:160]}")
                if probe.get("capture") and capture is None:
                    capture = m.group(int(probe["capture"]))
    out = {"hit": bool(lines), "said": probe.get("hit") if lines else probe.get("miss"), "lines": lines[:20]}
    if capture is not None:
        out["capture"] = capture.strip()
    return out


def _version(pkg: Path) -> str | None:
    m = (
        re.search(
            r"^__version__ = version = '([^']+)'", (pkg / "_version.py").read_text(errors="replace"), re.M
        )
        if (pkg / "_version.py").exists()
        else None
    )
    return m.group(1) if m else None


def scan_tree(pkg: str | Path, spec_path: Path = PROBES) -> VllmProbeReport:
    """Run the probe set on a vLLM package folder (`.../site-packages/vllm`)."""
    pkg = Path(pkg)
    if not (pkg / "platforms" / "cuda.py").is_file():
        raise ConfigError(f"{pkg} is not a vLLM package folder with a CUDA platform (no platforms/cuda.py)")
    spec = load_spec(spec_path)
    b = spec["backends"]
    name_rx = re.compile(b["name"])
    report = VllmProbeReport(tree=str(pkg), version=_version(pkg))
    for path in sorted(pkg.glob(b["files"])):
        m = name_rx.search(path.read_text(errors="replace"))
        if not m:
            continue
        name = m.group(1).removesuffix(b.get("strip_suffix") or "")
        facts = {}
        for probe in spec.get("probes") or []:
            follow = [
                pkg / rel
                for rel in probe.get("follow") or []
                if (pkg / rel).is_file() and _imports(path, rel)
            ]
            facts[probe["fact"]] = _grep(probe, [path, *follow], pkg)
        report.backends[name] = {"file": str(path.relative_to(pkg)), "facts": facts}
    report.absent = [n for n in b.get("expect") or [] if n not in report.backends]
    plat = spec.get("platform") or {}
    for probe in plat.get("probes") or []:
        report.platform[probe["fact"]] = _grep(probe, [pkg / plat["file"]], pkg)
    if spec.get("priorities"):
        report.priorities = priorities(pkg / spec["priorities"]["file"], spec["priorities"])
    return report


def _imports(path: Path, rel: str) -> bool:
    """Whether the backend file imports the module at `rel` (vllm/<rel> as a dotted name)."""
    dotted = "vllm." + rel.removesuffix(".py").replace("/", ".")
    return dotted in path.read_text(errors="replace")


def priorities(path: Path, rule: dict) -> dict[str, list[list[str]]]:
    """{"10": [[...], ...], "12": [...], "other": [...]}: the enum members of the lists each branch of the
    `branch_on` if-chain returns, inside the `within` branch
    of `function`; empty when the release has none."""
    tree = ast.parse(path.read_text(errors="replace"))
    fn = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == rule["function"]), None
    )
    if fn is None:
        return {}
    scope = next(
        (
            n
            for n in ast.walk(fn)
            if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == rule["within"]
        ),
        None,
    )
    if scope is None:
        return {}
    chain = next(
        (n for n in scope.body if isinstance(n, ast.If) and _branch_value(n.test, rule["branch_on"])), None
    )
    out: dict[str, list[list[str]]] = {}
    while chain is not None:
        out[_branch_value(chain.test, rule["branch_on"])] = _returned(chain.body, rule)
        if (
            len(chain.orelse) == 1
            and isinstance(chain.orelse[0], ast.If)
            and _branch_value(chain.orelse[0].test, rule["branch_on"])
        ):
            chain = chain.orelse[0]
        else:
            if chain.orelse:
                out["other"] = _returned(chain.orelse, rule)
            chain = None
    return out


def _branch_value(test: ast.expr, attr: str) -> str | None:
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == attr
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
    ):
        return str(test.comparators[0].value)
    return None


def _returned(body: list[ast.stmt], rule: dict) -> list[list[str]]:
    lists = []
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.List):
            names = [
                e.attr
                for e in node.value.elts
                if isinstance(e, ast.Attribute)
                and isinstance(e.value, ast.Name)
                and e.value.id == rule["enum"]
                and not re.search(rule.get("drop") or "$^", e.attr)
            ]
            if names and names not in lists:
                lists.append(names)
    return lists
