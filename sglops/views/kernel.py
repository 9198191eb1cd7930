"""Views of kernel results: a build (or its dry run), an uninstall, the kernels installed on a host.

KernelBuild and KernelAction (sglops.kernel.build) keep data and JSON; tasks and plays print them through
sglops.views.show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from sglops.kernel.build import KernelAction, KernelBuild


def build_table(kb: KernelBuild) -> Table:
    """`inv build-kernel`: arch, content hash, install path,
    each stage's exit and time, the commands of a dry run."""
    t = Table(
        title=f"build-kernel {kb.kernel}: {kb.host} ({kb.status})", show_header=False, title_justify="left"
    )
    t.add_column(style="bold")
    t.add_column()
    a = kb.answer
    t.add_row("arch", kb.arch)
    t.add_row("content", kb.hash[:12])
    t.add_row("install", f"{a.get('install_path')} (import {a.get('module')})")
    t.add_row("python", str(a.get("python")))
    for stage, info in a.get("stages", {}).items():
        t.add_row(stage, f"exit {info['exit']} in {info['seconds']:.1f} s")
    if kb.status in ("built", "failed"):
        t.add_row("self-test", kb.selftest_summary())
    if kb.status == "would-build":
        for stage, cmd in kb.commands.items():
            env = " ".join(f"{k}={v}" for k, v in cmd["env"].items())
            t.add_row(f"would run {stage}", (env + " " if env else "") + " ".join(cmd["argv"]))
    if kb.artifact_dir:
        t.add_row("logs", kb.artifact_dir)
    return t


def action_table(ka: KernelAction) -> Table:
    """`inv kernels` lists what is installed; `inv uninstall-kernel` shows what went (or would go)."""
    a = ka.answer
    if "installed" in a:
        t = Table(title=f"kernels installed on {ka.host} ({a['state_dir']})", title_justify="left")
        for col in ("kernel", "arch", "content", "installed", "import from"):
            t.add_column(col)
        for r in a["installed"]:
            t.add_row(r["name"], r["arch"], r["hash"][:12], r["installed_at"], r["target_dir"])
        return t
    t = Table(
        title=f"uninstall-kernel {a['name']}: {ka.host} ({a['status']})",
        show_header=False,
        title_justify="left",
    )
    t.add_column(style="bold")
    t.add_column()
    for key in ("install_path", "version_dir", "build_dir", "arch", "hash", "installed_at"):
        t.add_row(key, str(a.get(key)))
    return t
