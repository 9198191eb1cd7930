"""The GPU tier: stock SGLang 0.5.17 served on a GPU machine with no network, under sglops' control.

Two halves, one module:
- on this (CPU) machine, `build`: the pinned wheels SGLang imports and the GPU image lacks, installed for
  CPython 3.12 / manylinux x86-64 into one folder, trimmed to what an sm90 server loads and packed as
  `site.tar.xz`; sglops' own dependencies the image lacks as `tools.tar.xz`; a tiny DeepSeek-V2-style MLA
  model (config + tokenizer; weights come from `--load-format dummy`). Wheels are cached per machine.
- on the GPU machine, `up`: unpack both archives, write an inventory whose `local` host runs the image's
  python with that site first on PYTHONPATH, and print the environment to export. sglops then drives the
  server exactly as on any host (`inv ... --host local`).

Why 0.5.17 and these pins: the GPU image has torch 2.11.0+cu130; sglang 0.5.11-0.5.17 pin torch 2.11.0 and
0.5.18+ pin 2.13+, too big to carry. The image's transformers 5.17.0 breaks sglang 0.5.17 at import, so
sglang's own pins (transformers 5.12.1, tokenizers 0.22.2) go first on the path. The set is what an import
probe found the server needs (../shared/notes/sglang-on-the-gpu.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from sglops.core.wheels import cache_dir

SGLANG_VERSION = "0.5.17"
# Everything sglang 0.5.17's server imports on an sm90 host that the GPU image does not have, pinned.
SERVER_PINS = (
    f"sglang=={SGLANG_VERSION}",
    "sglang-kernel==0.4.5",
    "flashinfer-python==0.6.15.post1",
    "apache-tvm-ffi==0.1.11",
    "orjson==3.13.0",
    "pybase64==1.5.1",
    "starlette==1.10.0",
    "ipython==9.18.1",
    "traitlets==5.16.1",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "typing-inspection==0.4.5",
    "msgspec==0.23.0",
    "pyzmq==27.3.0",
    "dill==0.4.1",
    "openai==2.6.1",
    "annotated-types==0.8.0",
    "sniffio==1.3.1",
    "distro==1.9.0",
    "partial-json-parser==0.2.1.1.post7",
    "xgrammar==0.2.1",
    "uvicorn==0.55.0",
    "fastapi==0.165.0",
    "opentelemetry-api==1.45.2",
    "compressed-tensors==0.20.1",
    "loguru==0.7.3",
    "gguf==0.19.0",
    "setproctitle==1.3.8",
    "jsonschema==4.26.0",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "jsonschema-specifications==2025.9.1",
    "soundfile==0.13.1",
    "cffi==2.1.1",
    "python-multipart==0.0.34",
    # sglang's own pins, ahead of the image's transformers 5.17.0 (which breaks sglang 0.5.17 at import)
    "transformers==5.12.1",
    "tokenizers==0.22.2",
)
# sglops' own dependencies the GPU image lacks (it has PyYAML, Jinja2, rich, matplotlib, cffi via the site).
TOOL_PINS = (
    "fabric==3.2.3",
    "invoke==2.2.1",
    "paramiko==5.1.0",
    "decorator==5.2.1",
    "deprecated==1.3.1",
    "bcrypt==5.0.0",
    "cryptography==48.0.0",
    "pynacl==1.6.2",
    "ijson==3.6.0",
)
# What `python -m sglang.benchmark.serving` imports that the image and the server's site lack (for
# benchmarks/bench_vs_bench_serving.py): aiohttp with its own dependencies, Pillow, and HF datasets (its mmmu
# dataset module imports it at the top; the image has pyarrow, pandas, fsspec, xxhash and huggingface-hub, not
# datasets, dill or multiprocess).
BENCH_PINS = (
    "aiohttp==3.14.5",
    "aiohappyeyeballs==2.7.1",
    "aiosignal==1.4.0",
    "attrs==26.1.0",
    "frozenlist==1.8.0",
    "multidict==7.2.1",
    "propcache==0.5.4",
    "yarl==1.25.1",
    "pillow==13.0.0",
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",
)
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
# What an sm90 server never loads: FA3 (1.07 GB unpacked; only the fa3 backend), sm100 ops, infllm, xgrammar's
# static library, console scripts. flashmla_ops (~3 MiB) stays: the flashmla backend needs it.
TRIM = ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100", "xgrammar/lib", "bin")
TRIM_GLOBS = ("sgl_kernel/infllm_ops*.so",)
# 50 MB of DWARF, no code
STRIP_DEBUG = ("xgrammar/libxgrammar_bindings.so",)
CARRY_LIMIT = 64 * 2**20


def tier_dir() -> Path:
    """Where the build lands: `.gpu/` in the repo (ignored by git), the folder a device call carries."""
    return Path(__file__).resolve().parents[2] / ".gpu"


def wheel_cache() -> Path:
    path = cache_dir() / "gpu-tier-wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pip(*args: str) -> None:
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        *args[:1],
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *plat,
        *args[1:],
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"gpu-tier: pip {args[0]} failed: {last}")


def _wheels_for(pins: tuple[str, ...]) -> list[Path]:
    """The pinned wheels, downloaded once per machine (pip skips what the cache already holds)."""
    cache = wheel_cache()
    _pip("download", "-d", str(cache), *pins)
    found = []
    for pin in pins:
        name, version = pin.split("==")
        stem = name.replace("-", "_").lower()
        hits = [w for w in cache.glob("*.whl") if w.name.lower().startswith(f"{stem}-{version}-")]
        if not hits:
            raise SystemExit(f"gpu-tier: {pin} is not in {cache} after download")
        found.append(hits[0])
    return found


def _trim(site: Path) -> None:
    for rel in TRIM:
        target = site / rel
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for pattern in TRIM_GLOBS:
        for target in site.glob(pattern):
            target.unlink()
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    for rel in STRIP_DEBUG:
        if (site / rel).exists():
            subprocess.run(["strip", "--strip-debug", str(site / rel)], check=True)


def _pack(folder: Path, archive: Path) -> None:
    """tar.xz with xz's own threads (python's lzma is one thread and ~4x slower here)."""
    tar = subprocess.Popen(["tar", "-C", str(folder), "-cf", "-", "."], stdout=subprocess.PIPE)
    with archive.open("wb") as out:
        subprocess.run(["xz", "-T0", "-6"], stdin=tar.stdout, stdout=out, check=True)
    if tar.wait() != 0:
        raise SystemExit(f"gpu-tier: tar of {folder} failed")


def build_site(pins: tuple[str, ...], archive: Path, *, trim: bool) -> int:
    stage = archive.parent / (archive.name.split(".")[0] + "-stage")
    shutil.rmtree(stage, ignore_errors=True)
    _pip("install", "--no-index", "--no-compile", "--target", str(stage), *map(str, _wheels_for(pins)))
    if trim:
        _trim(stage)
    _pack(stage, archive)
    shutil.rmtree(stage)
    return archive.stat().st_size


# The tiny MLA models the tier carries, name: (heads, layers). 16 heads: the fp8-mla-native kernel's side of
# its dispatch; 128 (DeepSeek-V3's count at TP 1): the patch dispatches to gather-cast's cast there; 32
# layers: enough attention per decode step that long contexts make the step GPU-bound (4 layers leave it
# host-bound). Each is a config and a tokenizer (dummy weights).
MODELS = {"tiny-mla": (16, 4), "tiny-mla-h128": (128, 4), "tiny-mla-l32": (16, 32)}


def build_model(dest: Path, heads: int = 16, layers: int = 4) -> None:
    """A tiny MLA model's config and tokenizer, made in the
    SGLang CPU venv (it has transformers/tokenizers)."""
    from sglops.sandbox import sglang_cpu

    python = sglang_cpu.venv_python()
    if not python.exists():
        raise SystemExit(
            "gpu-tier: the SGLang CPU venv is missing: run `python -m sglops.sandbox.sglang_cpu` first"
        )
    maker = Path(__file__).with_name("make_tiny_mla.py")
    subprocess.run(
        [str(python), str(maker), str(dest), "--heads", str(heads), "--layers", str(layers)], check=True
    )


def build(dest: Path | None = None) -> dict:
    dest = dest or tier_dir()
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    sizes = {
        "site.tar.xz": build_site(SERVER_PINS, dest / "site.tar.xz", trim=True),
        "tools.tar.xz": build_site(TOOL_PINS, dest / "tools.tar.xz", trim=False),
    }
    for name, (heads, layers) in MODELS.items():
        build_model(dest / name, heads, layers)
    total = sum(sizes.values()) + sum(p.stat().st_size for name in MODELS for p in (dest / name).iterdir())
    info = {
        "sglang": SGLANG_VERSION,
        "bytes": sizes,
        "total_bytes": total,
        "seconds": round(time.monotonic() - t0, 1),
    }
    (dest / "tier.json").write_text(json.dumps(info, indent=1) + "\n")
    info["carry"] = carry(dest)
    print(carry_table(info["carry"]), file=sys.stderr)
    return info


# What one device call carries: the working tree as git sees it (tracked files and untracked ones it does not
# ignore) and the carry paths, 64 MiB in all (the device README). The build measures both and, when they do
# not fit one call, moves the parts the first call cannot take to `.gpu-2/`, carried by a second call chained
# to the first (the machine is still warm: `up` on each call unpacks what that call brought; env.sh once every
# part is there).
SECOND = ".gpu-2"


def tree_bytes(repo: Path | None = None) -> int:
    """Bytes of the working tree a device call copies: `git ls-files --cached --others --exclude-standard`."""
    repo = repo or tier_dir().parent
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    return sum((repo / n).lstat().st_size for n in out.decode().split("\0") if n and (repo / n).exists())


def _bytes(path: Path) -> int:
    return (
        path.stat().st_size
        if path.is_file()
        else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    )


def carry(dest: Path | None = None, tree: int | None = None, limit: int = CARRY_LIMIT) -> dict:
    """Measure the carry set and plan the calls: one when the tree and `.gpu/` fit, else the parts the first
    call cannot take moved to `.gpu-2/` (largest part first in the first call; each call carries the tree
    too)."""
    dest = dest or tier_dir()
    second = dest.with_name(SECOND)
    # a split of an earlier build: plan again from all the parts
    if second.is_dir():
        for p in second.iterdir():
            shutil.move(str(p), dest / p.name)
        second.rmdir()
    tree = tree_bytes() if tree is None else tree
    parts = {p.name: _bytes(p) for p in sorted(dest.iterdir()) if not p.name.endswith("-stage")}
    if tree + sum(parts.values()) <= limit:
        return {"tree": tree, "limit": limit, "calls": [{"carry": dest.name, "parts": parts}]}
    first: dict[str, int] = {}
    rest: dict[str, int] = {}
    for name, size in sorted(parts.items(), key=lambda kv: -kv[1]):
        (first if tree + sum(first.values()) + size <= limit else rest)[name] = size
    if tree + sum(rest.values()) > limit or not first:
        raise SystemExit(
            f"gpu-tier: {sum(parts.values()) / 2**20:.1f} MiB of parts and a {tree / 2**20:.1f} MiB "
            f"tree do not fit two calls of {limit / 2**20:.0f} MiB: trim the tree or the site"
        )
    second.mkdir()
    for name in rest:
        shutil.move(str(dest / name), second / name)
    return {
        "tree": tree,
        "limit": limit,
        "calls": [{"carry": dest.name, "parts": first}, {"carry": second.name, "parts": rest}],
    }


def carry_table(plan: dict) -> str:
    """The sizes `build` (and `scripts/gpu-tier.sh carry`) prints: every part, the tree, each call's total."""
    mib = lambda n: f"{n / 2**20:6.1f} MiB"  # noqa: E731
    lines = [
        f"gpu-tier: a device call carries the tree and its carry paths, {plan['limit'] / 2**20:.0f} MiB"
        " in all"
    ]
    for i, call in enumerate(plan["calls"], 1):
        lines += [f'  call {i}: carry ["{call["carry"]}"]']
        lines += [f"    {name:<22} {mib(size)}" for name, size in call["parts"].items()]
        total = plan["tree"] + sum(call["parts"].values())
        lines += [
            f"    {'the tree (git)':<22} {mib(plan['tree'])}",
            (
                f"    {'in all':<22} {mib(total)} of {plan['limit'] / 2**20:.0f} MiB"
                f" ({(plan['limit'] - total) / 2**20:.1f} MiB to spare)"
            ),
        ]
    if len(plan["calls"]) > 1:
        lines.append(
            "  two chained calls: `scripts/gpu-tier.sh up` in each (the second within 30 s of the first)"
        )
    return "\n".join(lines)


def build_bench(dest: Path | None = None) -> int:
    """.gpu-bench/bench.tar.xz: what sglang.benchmark.serving needs beyond the server (7.9 MiB). Carried by a
    call of its own (with .gpu and the tree it would pass the 64 MiB a call carries), after `up`."""
    dest = dest or tier_dir().with_name(".gpu-bench")
    dest.mkdir(parents=True, exist_ok=True)
    return build_site(BENCH_PINS, dest / "bench.tar.xz", trim=False)


def up_bench(src: Path, root: Path) -> Path:
    """On the GPU machine: unpack bench.tar.xz where env.sh's PYTHONPATH already looks (ROOT/bench)."""
    if not (root / "bench" / "aiohttp").is_dir():
        _unpack(src / "bench.tar.xz", root / "bench")
    return root / "bench"


def _unpack(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def _flashinfer_version(site: Path) -> str | None:
    meta = site / "flashinfer" / "_build_meta.py"
    found = re.search(r'__version__\s*=\s*"([^"]+)"', meta.read_text()) if meta.is_file() else None
    return found.group(1) if found else None


def seed_jit_modules(archive: Path, site: Path) -> list[str]:
    """FlashInfer modules JIT-built by an earlier call on this machine kind (`collect`'s jit.tar.gz, kept as
    .gpu/jit.tar.gz), placed where FlashInfer looks for ahead-of-time builds
    (flashinfer/data/aot/NAME/NAME.so): it loads those instead of compiling, which is most of a cold restart
    (227 s cold, 54-69 s warm on the H200). Only modules built by this FlashInfer version for this path's arch
    are taken; anything else is compiled."""
    version = _flashinfer_version(site)
    if not archive.is_file() or not version:
        return []
    placed = []
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if not (m.isfile() and m.name.endswith(".so") and version in parts and "cached_ops" in parts):
                continue
            name = Path(m.name).stem
            if parts[-2] != name:
                continue
            dest = site / "flashinfer" / "data" / "aot" / name / f"{name}.so"
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as fh:  # type: ignore[union-attr]
                dest.write_bytes(fh.read())
            placed.append(name)
    return placed


def keep_jit(collected: Path, dest: Path | None = None) -> Path:
    """Keep a call's jit.tar.gz in the carry set as jit.tar.xz (the next `up` seeds FlashInfer with it). Why
    xz: the modules are 3.7 MB gzipped and 1.4 MB as xz, and the carry set is within a few MB of a call's
    limit."""
    target = (dest or tier_dir()) / "jit.tar.xz"
    with gzip.open(collected, "rb") as src, lzma.open(target.with_suffix(".part"), "wb", preset=9) as out:
        shutil.copyfileobj(src, out)
    target.with_suffix(".part").replace(target)
    (target.parent / "jit.tar.gz").unlink(missing_ok=True)
    return target


def jit_archive(src: Path) -> Path:
    """The kept JIT modules in a carry set: jit.tar.xz, or an older set's jit.tar.gz."""
    xz = src / "jit.tar.xz"
    return xz if xz.is_file() else src / "jit.tar.gz"


class Incomplete(Exception):
    """`up` on the first of two chained calls: the second
    call's parts are not here yet (exit 75: call again)."""


def _gather(srcs: list[Path], root: Path) -> Path:
    """The parts the calls brought so far (`.gpu/`, and `.gpu-2/` on a split), kept under ROOT/carry."""
    kept = root / "carry"
    kept.mkdir(parents=True, exist_ok=True)
    for src in srcs:
        for p in src.iterdir() if src.is_dir() else []:
            if not (kept / p.name).exists():
                (shutil.copytree if p.is_dir() else shutil.copy2)(p, kept / p.name)
    return kept


def missing(src: Path) -> list[str]:
    """The parts `up` still waits for (a split's second call not made yet)."""
    need = ["site.tar.xz", "tools.tar.xz", *MODELS]
    return [n for n in need if not (src / n).exists()]


def up(src: Path | list[Path], root: Path) -> dict:
    """On the GPU machine: unpack, write the inventory, return the environment sglops and the server run with.
    src: the carry folder, or the folders of a split's calls (what is there so far is kept in ROOT/carry)."""
    src = _gather(src if isinstance(src, list) else [src], root)
    lacking = missing(src)
    if lacking:
        raise Incomplete(
            f"gpu-tier: carried so far: {', '.join(sorted(p.name for p in src.iterdir()))}; "
            f"still missing {', '.join(lacking)}: carry {SECOND} in the next call and run `up` again"
        )
    site, tools = root / "site", root / "tools"
    if not (site / "sglang").is_dir():
        _unpack(src / "site.tar.xz", site)
    seeded = seed_jit_modules(jit_archive(src), site)
    if seeded:
        print(
            f"gpu-tier: {len(seeded)} FlashInfer modules from an earlier build: {', '.join(sorted(seeded))}",
            file=sys.stderr,
        )
    if not (tools / "fabric").is_dir():
        _unpack(src / "tools.tar.xz", tools)
    # filled by `up-bench` from a later call (the carry limit: see build_bench)
    bench = root / "bench"
    # the others lie beside it: profiles name them as {vars.model_dir}-h128
    model = root / "tiny-mla"
    for name in MODELS:
        if not (root / name).is_dir() and (src / name).is_dir():
            shutil.copytree(src / name, root / name)
    repo = Path(__file__).resolve().parents[2]
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), str(tools), str(repo), str(bench)]),
        # never NVLink multicast on a shared host (the device README); offline; JIT cache kept per machine
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "FLASHINFER_WORKSPACE_BASE": str(root / "flashinfer-jit"),
        "CUDA_HOME": "/usr/local/cuda",
        "SGLOPS_INVENTORY": str(root / "hosts.yaml"),
    }
    inventory = {
        "default": "local",
        "hosts": [
            {
                "name": "local",
                "address": "local",
                "python": sys.executable,
                "tags": ["gpu-tier"],
                "vars": {
                    "model_dir": str(model),
                    "pythonpath": env["PYTHONPATH"],
                    "jit_dir": env["FLASHINFER_WORKSPACE_BASE"],
                    "trace_dir": str(root / "traces"),
                },
            }
        ],
    }
    # JSON is YAML
    (root / "hosts.yaml").write_text(json.dumps(inventory, indent=1) + "\n")
    (root / "env.sh").write_text("".join(f"export {k}={v}\n" for k, v in env.items()))
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sglops.sandbox.gpu_tier", description=__doc__.splitlines()[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="on the CPU machine: the carry set in .gpu/ (cached wheels)")
    b.add_argument("--dest", type=Path)
    u = sub.add_parser("up", help="on the GPU machine: unpack and write ROOT/env.sh and ROOT/hosts.yaml")
    u.add_argument(
        "--src", type=Path, action="append", help="a carry folder (repeat for a split: .gpu, .gpu-2)"
    )
    u.add_argument("--root", type=Path, default=Path("/tmp/gpu-tier"))
    c = sub.add_parser(
        "carry", help="on the CPU machine: the sizes a device call carries (splits .gpu if needed)"
    )
    c.add_argument("--dest", type=Path)
    sub.add_parser(
        "build-bench", help="on the CPU machine: .gpu-bench/bench.tar.xz (bench_serving's imports)"
    )
    ub = sub.add_parser("up-bench", help="on the GPU machine: unpack .gpu-bench/bench.tar.xz into ROOT/bench")
    ub.add_argument("--src", type=Path, default=tier_dir().with_name(".gpu-bench"))
    ub.add_argument("--root", type=Path, default=Path("/tmp/gpu-tier"))
    k = sub.add_parser(
        "keep-jit", help="on the CPU machine: keep a call's jit.tar.gz in .gpu/ for the next `up`"
    )
    k.add_argument("archive", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "build":
        print(json.dumps(build(args.dest)))
    elif args.cmd == "carry":
        print(carry_table(carry(args.dest)))
    elif args.cmd == "build-bench":
        print(build_bench())
    elif args.cmd == "up-bench":
        print(up_bench(args.src, args.root))
    elif args.cmd == "keep-jit":
        print(keep_jit(args.archive))
    else:
        try:
            up([p for p in args.src or [tier_dir(), tier_dir().with_name(SECOND)] if p.is_dir()], args.root)
        except Incomplete as exc:
            print(exc, file=sys.stderr)
            return 75
        print(args.root / "env.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
