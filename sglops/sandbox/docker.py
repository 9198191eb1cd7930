"""A real Docker daemon for the sandbox, started by sglops itself, and an image built here with no registry.

dockerd runs with `--iptables=false --ip-forward=false --bridge=none`, its own socket, exec-root and pidfile,
so the machine's networking is untouched and nothing collides with another daemon; containers run with
`--network none` (loopback only inside). Its data-root lives in the sglops cache, so built images survive.

The image is made from files already on this machine (no registry, no apt inside, ~1-2 s): a shell, the
coreutils and procps a host script and `timeout` need, Debian's python3.11 with its standard library, and
SGLang's release wheel unpacked as a pip install lays it out (site-packages/sglang + dist-info, no git).
The real SGLang CPU environment is not copied in: a container that serves for real bind-mounts it read-only
(`serve_mounts()`: the venv + model folder and the Python the venv was made from, at the same paths). Its
serving image (`ensure_image(..., serve=True)`) carries what that environment links against and a shell
image would have: the system libraries its shared objects need (found with `ldd`, ~10 s, once per build;
e.g. libmvec for soundfile's bundled libsndfile, libgomp, libnuma) and an ld.so.cache made by `ldconfig`
inside the image, so `ctypes.util.find_library` answers as on any Debian image.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sglops.core.errors import SglopsError
from sglops.sandbox import trees

DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
DOCKER = shutil.which("docker") or "/usr/bin/docker"
TOOLS = (
    "sh",
    "bash",
    "timeout",
    "base64",
    "cat",
    "mv",
    "rm",
    "mkdir",
    "ls",
    "sleep",
    "env",
    "kill",
    "ps",
    "dirname",
    "cp",
    "chmod",
    "nohup",
    "tail",
    "head",
    "setsid",
    "id",
    "uname",
    "true",
    "grep",
    "sed",
    "printf",
    "echo",
    "sha256sum",
    "stat",
    "readlink",
    "flock",
    "pgrep",
    "pkill",
    "lscpu",
    "nproc",
)
PYTHON = "/usr/bin/python3.11"
# what the bind-mounted real SGLang environment (torch, numpy) links against
EXTRA_LIBS = (
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libutil.so.1",
    "libm.so.6",
    "libz.so.1",
)
# static: no libraries of its own; makes /etc/ld.so.cache inside the image
LDCONFIG = "/sbin/ldconfig"
LD_DIRS = ("/usr/local/lib", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
# where the image's SGLang is "pip-installed"
SITE = "/opt/sglang/lib/python3.11/site-packages"
IMAGE_REPO = "sglops-sandbox"


def available() -> str | None:
    """None when a daemon can be started here, else the one reason it cannot."""
    if not Path(DOCKERD).exists():
        return "dockerd is not installed (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "dockerd needs root"
    return None


@dataclass
class Dockerd:
    """A dockerd of our own; `docker(...)` talks to it through its socket."""

    root: Path
    proc: subprocess.Popen | None = None
    _lock: object = None

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def docker(
        self, *args: str, check: bool = True, input: bytes | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [DOCKER, *args], env=self.env(), capture_output=True, input=input, timeout=timeout
        )
        if check and proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SglopsError(f"docker {' '.join(args[:3])} failed: {err[0]}")
        return proc

    def start(self, timeout: float = 60) -> Dockerd:
        reason = available()
        if reason:
            raise SglopsError(reason)
        self.root.mkdir(parents=True, exist_ok=True)
        data = self._data_root()
        log = open(self.root / "dockerd.log", "ab")
        self.proc = subprocess.Popen(
            [
                DOCKERD,
                "--iptables=false",
                "--ip-forward=false",
                "--bridge=none",
                "--ip-masq=false",
                "-H",
                self.host,
                "--data-root",
                str(data),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "dockerd.pid"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._release()
                tail = (self.root / "dockerd.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise SglopsError(
                    f"dockerd exited ({self.proc.returncode}): {tail[0] if tail else 'no output'}"
                )
            if self.socket.exists() and self.docker("info", check=False, timeout=10).returncode == 0:
                return self
            time.sleep(0.2)
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._release()
        raise SglopsError(f"dockerd not ready within {timeout:g} s (log: {self.root / 'dockerd.log'})")

    def _data_root(self) -> Path:
        """The cached data-root (images survive), or a private one while another daemon of ours holds it."""
        import fcntl

        shared = trees.cache_dir() / "docker-data"
        shared.mkdir(parents=True, exist_ok=True)
        lock = open(trees.cache_dir() / "docker-data.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            return self.root / "data"
        self._lock = lock
        return shared

    def stop(self) -> None:
        """Containers first (else containerd shims stay behind), then the daemon."""
        if self.proc is None or self.proc.poll() is not None:
            return
        ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.decode().split()
        if ids:
            self.docker("rm", "-f", *ids, check=False, timeout=60)
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


# -- the image
# ------------------------------------------------------------------------------------------------
def _ldd(paths: list[str]) -> set[str]:
    out = subprocess.run(["ldd", *paths], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/") and os.path.exists(p):
                libs.add(p)
    return libs


def _machine_files() -> list[str]:
    tools = [shutil.which(t, path="/usr/bin:/bin") for t in TOOLS]
    missing = [t for t, p in zip(TOOLS, tools, strict=True) if not p]
    if missing:
        raise SglopsError(f"cannot build the sandbox image: {', '.join(missing)} not found on this machine")
    stdlib = Path("/usr/lib/python3.11")
    dynload = [str(p) for p in (stdlib / "lib-dynload").glob("*.so")]
    libs = _ldd([*tools, PYTHON, *dynload])
    for name in EXTRA_LIBS:
        found = list(Path("/usr/lib/x86_64-linux-gnu").glob(name)) + list(
            Path("/lib/x86_64-linux-gnu").glob(name)
        )
        libs.update(str(p) for p in found[:1])
    return sorted({*tools, PYTHON, *libs})


def _add_stdlib(tar: tarfile.TarFile) -> None:
    skip = {
        "test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "lib2to3",
        "ensurepip",
        "__pycache__",
        "site-packages",
        "dist-packages",
    }
    root = Path("/usr/lib/python3.11")
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if skip & set(rel.parts) or path.is_dir():
            continue
        tar.add(path, arcname=f"usr/lib/python3.11/{rel}", recursive=False)


def _add_text(tar: tarfile.TarFile, name: str, text: str, mode: int = 0o644) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
    tar.addfile(info)


class _Tree:
    """Tar entries without duplicates, laid out as on this machine (merged /usr, library symlinks kept)."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar, self.names = tar, set()

    def _norm(self, path: str) -> str:
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)).lstrip("/")

    def add_file(self, path: str, arcname: str | None = None) -> None:
        """A file by the path programs use; symlinks on the way are kept as symlinks."""
        seen = 0
        while os.path.islink(path) and seen < 10:
            name = arcname or self._norm(path)
            target = os.readlink(path)
            if name not in self.names:
                info = tarfile.TarInfo(name)
                info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
                self.tar.addfile(info)
                self.names.add(name)
            path = os.path.join(os.path.dirname(path), target) if not target.startswith("/") else target
            arcname, seen = None, seen + 1
        name = arcname or self._norm(path)
        if name not in self.names:
            self.tar.add(os.path.realpath(path), arcname=name, recursive=False)
            self.names.add(name)


def build_rootfs(dest: Path, sglang_version: str, extra_libs: tuple[str, ...] = ()) -> Path:
    """A tar of the image's root filesystem (see the module docstring); extra_libs: more system libraries."""
    import zipfile

    wheel = trees.cached_wheel("sglang", sglang_version)
    files = sorted({*_machine_files(), *extra_libs, LDCONFIG})
    with tarfile.open(dest, "w") as tar:
        tree = _Tree(tar)
        for d in (
            "usr",
            "usr/bin",
            "usr/lib",
            "etc",
            "tmp",
            "root",
            "proc",
            "sys",
            "dev",
            "opt",
            "run",
            "var",
            "var/tmp",
        ):
            _add_dir(tar, d, 0o1777 if d in ("tmp", "var/tmp") else 0o755)
        # merged /usr, as this machine has it
        for top in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{top}"):
                info = tarfile.TarInfo(top)
                info.type, info.linkname, info.mtime = tarfile.SYMTYPE, os.readlink(f"/{top}"), 0
                tar.addfile(info)
                tree.names.add(top)
        for f in files:
            tree.add_file(f)
        tree.add_file(PYTHON, "usr/bin/python3")
        _add_stdlib(tar)
        _add_text(
            tar, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/sh\n"
        )
        _add_text(tar, "etc/group", "root:x:0:\nnogroup:x:65534:\n")
        _add_text(tar, "etc/ld.so.conf", "\n".join(LD_DIRS) + "\n")
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                ti = tarfile.TarInfo(f"{SITE.lstrip('/')}/{info.filename}")
                data = zf.read(info)
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
                tar.addfile(ti, io.BytesIO(data))
    return dest


def serve_mounts() -> tuple[tuple[str, str], ...]:
    """(host path, container path) pairs that make the real SGLang CPU environment usable inside a container,
    read-only and at the same paths (its venv links to the Python it was made from): the server-env folder
    (venv + tiny model) and that Python's prefix."""
    from sglops.sandbox import sglang_cpu

    base = os.path.realpath(sglang_cpu.venv_python())
    prefix = os.path.dirname(os.path.dirname(base))
    mounts = [(str(sglang_cpu.env_root()), str(sglang_cpu.env_root()))]
    # a pyenv / uv / conda Python: not in the image, so mounted too
    if not prefix.startswith("/usr"):
        mounts.append((prefix, prefix))
    return tuple(mounts)


def serve_libs() -> tuple[str, ...]:
    """The system libraries (outside the mounted folders)
    that the environment's shared objects link against."""
    roots = [src for src, _ in serve_mounts()]
    objects = []
    for root in roots:
        for folder, _, names in os.walk(root):
            objects += [os.path.join(folder, n) for n in names if ".so" in n and not n.endswith(".py")]
    from sglops.sandbox import sglang_cpu

    objects.append(os.path.realpath(sglang_cpu.venv_python()))
    found: set[str] = set()
    for i in range(0, len(objects), 200):
        found |= _ldd(objects[i : i + 200])
    return tuple(sorted(p for p in found if not any(p.startswith(r + "/") for r in roots)))


def image_tag(sglang_version: str, serve: bool = False) -> str:
    """A tag that changes when what goes into the image changes (this file, the tools, the release, and for a
    serving image the environment it is made for)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(sglang_version.encode())
    h.update(" ".join(TOOLS).encode())
    if serve:
        from sglops.sandbox import sglang_cpu

        h.update(str(sglang_cpu.venv_dir()).encode())
        h.update((sglang_cpu.venv_dir() / sglang_cpu.READY).read_bytes())
    return f"{IMAGE_REPO}:{sglang_version}{'-serve' if serve else ''}-{h.hexdigest()[:12]}"


def ensure_image(dockerd: Dockerd, sglang_version: str = "0.5.23", serve: bool = False) -> str:
    """The sandbox image's tag, built (`docker import` of build_rootfs, then `ldconfig` inside) when the
    daemon lacks it. serve=True: the image a container serving the bind-mounted real SGLang environment
    needs."""
    if serve:
        from sglops.sandbox import sglang_cpu

        reason = sglang_cpu.not_ready()
        if reason:
            raise SglopsError(reason)
    tag = image_tag(sglang_version, serve)
    if dockerd.docker("image", "inspect", tag, check=False, timeout=30).returncode == 0:
        return tag
    raw = f"{tag}-raw"
    with tempfile.TemporaryDirectory(prefix="sglops-rootfs-") as tmp:
        rootfs = build_rootfs(Path(tmp) / "rootfs.tar", sglang_version, serve_libs() if serve else ())
        with open(rootfs, "rb") as fh:
            dockerd.docker(
                "import",
                "--change",
                "ENV PATH=/usr/bin:/bin",
                "--change",
                "WORKDIR /root",
                "-",
                raw,
                input=fh.read(),
                timeout=600,
            )
    name = f"sglops-ldconfig-{uuid.uuid4().hex[:8]}"
    # the ld.so.cache a real image has (ctypes.util.find_library reads it through `ldconfig -p`)
    try:
        dockerd.docker("run", "--name", name, "--network", "none", raw, LDCONFIG, timeout=120)
        dockerd.docker("commit", "--change", 'CMD ["sh"]', name, tag, timeout=300)
    finally:
        dockerd.docker("rm", "-f", name, check=False, timeout=60)
        dockerd.docker("rmi", raw, check=False, timeout=60)
    return tag


def run_container(
    dockerd: Dockerd,
    image: str,
    name: str,
    *,
    mounts: tuple[tuple[str, str], ...] = (),
    command: tuple[str, ...] = ("sleep", "infinity"),
    env: dict[str, str] | None = None,
) -> str:
    """Start a long-running container (tini as PID 1 reaps what sglops stops); returns its id."""
    args = ["run", "-d", "--init", "--name", name, "--network", "none"]
    for src, dst in mounts:
        args += ["-v", f"{src}:{dst}:ro"]
    for k, v in (env or {}).items():
        args += ["-e", f"{k}={v}"]
    return dockerd.docker(*args, image, *command).stdout.decode().strip()


def docker_wrapper(dockerd: Dockerd, bin_dir: Path) -> Path:
    """A `docker` on a sandbox host's PATH that talks to our daemon (what the host's own docker would be)."""
    path = bin_dir / "docker"
    path.write_text(f'#!/bin/sh\nexec {DOCKER} -H {dockerd.host} "$@"\n')
    path.chmod(0o755)
    return path
