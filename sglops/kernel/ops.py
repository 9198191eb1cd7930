"""The kernel family's operations: build-kernel, uninstall-kernel, kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglops.core.op import DRY_RUN, JSON, TARGETS, Context, Op, Param
from sglops.core.values import Flag, Name, Required, Str

if TYPE_CHECKING:
    from sglops.kernel.build import KernelAction, KernelBuild


def build_kernel(
    ctx: Context, name: str, force: bool = False, target: str | None = None, arch: str | None = None
) -> KernelBuild:
    from sglops.kernel import build

    return build.build(
        ctx.remote,
        build.load_kernel(name),
        dry_run=ctx.dry_run,
        force=force,
        target=target,
        arch=arch,
        run_id=ctx.own_run_id,
    )


def uninstall_kernel(ctx: Context, name: str) -> KernelAction:
    from sglops.kernel import build

    return build.uninstall(ctx.remote, name, dry_run=ctx.dry_run)


def kernels(ctx: Context) -> KernelAction:
    from sglops.kernel import build

    return build.installed(ctx.remote)


def _load(o: dict) -> None:
    from sglops.kernel import build

    build.load_kernel(o["name"])


OPS = [
    Op(
        "build-kernel",
        build_kernel,
        "Build kernels/NAME for the host's GPU, self-test it there, install it atomically "
        "(logs in artifacts).",
        (
            Param(
                "name",
                Required(Name("kernel")),
                "a folder under kernels/ with a kernel.yaml",
                positional=True,
            ),
            TARGETS,
            DRY_RUN.again(help="show the target, install path and commands; change nothing"),
            Param("force", Flag(), "rebuild even when the sources and target are unchanged", flag=False),
            Param("target", Str(), "install here instead: site-packages | sglang | /abs/path on the host"),
            Param("arch", Str(), "build for this instead of the host's GPU: 9.0, sm_90a, sm_120"),
            JSON,
        ),
        step="build-kernel",
        prepare=_load,
        record="kernel-build.json",
        own_run=True,
    ),
    Op(
        "uninstall-kernel",
        uninstall_kernel,
        "Remove a kernel build-kernel installed (its link, versioned copy, build tree and record).",
        (
            Param(
                "name", Required(Name("kernel")), "an installed kernel (see `inv kernels`)", positional=True
            ),
            TARGETS,
            DRY_RUN.again(help="show what would be removed"),
            JSON,
        ),
    ),
    Op("kernels", kernels, "The kernels sglops installed on the host, from its record.", (TARGETS, JSON)),
]
