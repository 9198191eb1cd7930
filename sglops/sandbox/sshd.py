"""Sandbox GPU hosts: real OpenSSH sshd processes on loopback, one per host.

Each host gets its own host key, port, PATH (with the stand-in nvidia-smi), a real SGLang
release checkout and a FlashInfer site folder; or, with `sglang_env: cpu`, the REAL SGLang
server environment (sglops/sandbox/sglang_cpu.py): its venv's python and its pip-installed
`site-packages/sglang` as the host's tree, and the tiny model's folder as the host var
`model_dir`. The inventory and known_hosts written here are ordinary files, so everything above
the SSH layer runs exactly as against a real host.
Loopback only: sshd listens on 127.0.0.1 and nothing here connects anywhere else.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sglops.core.errors import SglopsError
from sglops.sandbox import sglang_cpu, trees
from sglops.sandbox.netproxy import NetProfile, NetProxy
from sglops.sandbox.ports import LOOPBACK, free_port

HERE = Path(__file__).parent
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
# real server environments a sandbox host can have (sglops.sandbox.sglang_cpu)
SGLANG_ENVS = ("cpu",)
# a stdlib-only python, like a GPU host's
HOST_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"


GPU_KEYS = {
    "count": "COUNT",
    "name": "NAME",
    "compute_cap": "CC",
    "memory_mib": "MEM",
    "driver": "DRIVER",
    "cuda": "CUDA",
}


def gpus_env(gpus: dict) -> str:
    """The stand-in nvidia-smi's GPU set, e.g. {"count": 1, "name": "NVIDIA H200", "compute_cap": "9.0",
    "memory_mib": 143771}, as the sh file it sources."""
    import shlex

    unknown = set(gpus) - set(GPU_KEYS)
    if unknown:
        raise ValueError(f"unknown stand-in GPU keys {sorted(unknown)}; known: {sorted(GPU_KEYS)}")
    return "".join(f"{GPU_KEYS[k]}={shlex.quote(str(v))}\n" for k, v in gpus.items())


def _keygen(path: Path, comment: str) -> None:
    if not path.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
        )


@dataclass
class SandboxHost:
    """One sshd on loopback with a GPU-host-like filesystem under `home`."""

    name: str
    home: Path
    port: int
    sglang_version: str
    flashinfer_version: str | None
    gpus: dict | None = None
    tags: list[str] = field(default_factory=list)
    python: str = HOST_PYTHON
    # "cpu": the real SGLang server environment instead of a release checkout
    sglang_env: str | None = None
    vars: dict = field(default_factory=dict)
    # set: clients reach sshd only through a hostile-network proxy
    network: NetProfile | None = None
    # sshd's RekeyLimit, e.g. "2M": key re-exchanges every 2 MB
    rekey_limit: str | None = None
    # a node of a server over several hosts (the inventory's node_rank)
    node_rank: int | None = None
    proc: subprocess.Popen | None = None
    proxy: NetProxy | None = None

    @property
    def client_port(self) -> int:
        """The port clients connect to: the proxy's when the host sits behind one."""
        return self.proxy.port if self.proxy else self.port

    def __post_init__(self) -> None:
        if self.sglang_env is None:
            return
        if self.sglang_env not in SGLANG_ENVS:
            raise SglopsError(
                f"sandbox host {self.name}: unknown sglang_env {self.sglang_env!r}; "
                f"known: {', '.join(SGLANG_ENVS)}"
            )
        self.python = str(sglang_cpu.venv_python())
        self.sglang_version = sglang_cpu.SGLANG_VERSION
        self.flashinfer_version = None
        self.vars = {"model_dir": str(sglang_cpu.model_dir()), **self.vars}

    @property
    def sglang_root(self) -> Path:
        if self.sglang_env:
            return sglang_cpu.sglang_tree()
        return self.home / "sglang"

    @property
    def bin(self) -> Path:
        return self.home / "bin"

    def prepare(self, user_pub: Path) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.bin.mkdir(exist_ok=True)
        # as a lived-in host has (pip's, HF's; sglops' probe cache)
        (self.home / ".cache").mkdir(exist_ok=True)
        smi = self.bin / "nvidia-smi"
        shutil.copy(HERE / "bin" / "nvidia-smi", smi)
        smi.chmod(0o755)
        if self.gpus:
            (self.bin / "gpus.env").write_text(gpus_env(self.gpus))
        # the stand-in server (sglops/sandbox/standin_server.py), see launch
        standin = self.bin / "sglang-standin"
        standin.write_text(f'#!/bin/sh\nexec {self.python} {HERE / "standin_server.py"} "$@"\n')
        standin.chmod(0o755)
        if self.sglang_env:
            # the venv and the model: built once per machine, cached
            sglang_cpu.ensure_model()
        elif not (self.sglang_root / ".git").exists():
            trees.make_sglang_checkout(self.sglang_version, self.sglang_root)
        site = self.home / "site"
        if self.flashinfer_version and not site.exists():
            site.symlink_to(trees.flashinfer_site(self.flashinfer_version))
        else:
            site.mkdir(exist_ok=True)
        _keygen(self.home / "ssh_host_ed25519_key", f"sandbox-{self.name}")
        shutil.copy(user_pub, self.home / "authorized_keys")
        (self.home / "authorized_keys").chmod(0o600)
        path = f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        (self.home / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {LOOPBACK}",
                    f"HostKey {self.home / 'ssh_host_ed25519_key'}",
                    f"PidFile {self.home / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.home / 'authorized_keys'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "MaxStartups 64",
                    "MaxSessions 64",
                    "LogLevel ERROR",
                    "Subsystem sftp internal-sftp",
                    *([f"RekeyLimit {self.rekey_limit}"] if self.rekey_limit else []),
                    f"SetEnv HOME={self.home} PATH={path} PYTHONPATH={site} SGLOPS_SANDBOX_HOST={self.name}",
                    "",
                ]
            )
        )

    def start(self) -> None:
        Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
        log = open(self.home / "sshd.log", "ab")
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.home / "sshd_config")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SglopsError(
                    f"sandbox sshd for {self.name} exited: {(self.home / 'sshd.log').read_text()[-300:]}"
                )
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise SglopsError(f"sandbox sshd for {self.name} did not listen on {self.port}")
        if self.network is not None and self.proxy is None:
            self.proxy = NetProxy(self.port, self.network).start()

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None

    def pause(self) -> None:
        """Freeze sshd (SIGSTOP): connections hang, as with a host that stopped answering."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def host_key_line(self) -> str:
        kind, key = (self.home / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"[{LOOPBACK}]:{self.client_port} {kind} {key}\n"


class Sandbox:
    """Several sandbox hosts plus the client side: user key, known_hosts, inventory."""

    def __init__(self, base: Path, hosts: list[dict]) -> None:
        self.base = Path(base)
        self.hosts = [
            SandboxHost(
                name=h["name"],
                home=self.base / h["name"],
                port=h.get("port") or free_port(),
                sglang_version=h.get("sglang", "0.5.23"),
                flashinfer_version=h.get("flashinfer", "0.7.2"),
                gpus=h.get("gpus"),
                tags=h.get("tags", ["sandbox"]),
                python=h.get("python", HOST_PYTHON),
                sglang_env=h.get("sglang_env"),
                vars=dict(h.get("vars") or {}),
                network=NetProfile.from_dict(h["network"]) if h.get("network") not in (None, False) else None,
                rekey_limit=h.get("rekey_limit"),
                node_rank=h.get("node_rank"),
            )
            for h in hosts
        ]
        self.client_key = self.base / "client_ed25519"
        self.known_hosts = self.base / "known_hosts"
        self.inventory = self.base / "hosts.yaml"

    def start(self) -> Sandbox:
        self.base.mkdir(parents=True, exist_ok=True)
        _keygen(self.client_key, "sglops-sandbox-client")
        for h in self.hosts:
            h.prepare(self.client_key.with_suffix(".pub"))
            h.start()
        self.known_hosts.write_text("".join(h.host_key_line() for h in self.hosts))
        self.write_inventory()
        return self

    def write_inventory(self, extra: list[dict] | None = None) -> Path:
        doc = {
            "defaults": {
                "user": getpass.getuser(),
                "identity_file": str(self.client_key),
                "known_hosts": str(self.known_hosts),
                "python": HOST_PYTHON,
                "connect_timeout": 5,
            },
            "default": self.hosts[0].name,
            "hosts": [
                {
                    "name": h.name,
                    "address": LOOPBACK,
                    "port": h.client_port,
                    "sglang_root": str(h.sglang_root),
                    "tags": h.tags,
                    **({"node_rank": h.node_rank} if h.node_rank is not None else {}),
                    **({"python": h.python} if h.python != HOST_PYTHON else {}),
                    **({"vars": dict(h.vars)} if h.vars else {}),
                }
                for h in self.hosts
            ]
            + list(extra or []),
        }
        self.inventory.write_text(
            "# written by the sglops sandbox (loopback only)\n" + yaml.safe_dump(doc, sort_keys=False)
        )
        return self.inventory

    def host(self, name: str) -> SandboxHost:
        return next(h for h in self.hosts if h.name == name)

    def stop(self) -> None:
        for h in self.hosts:
            h.stop()

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
