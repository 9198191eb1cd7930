"""The patch family's operations: apply-patch, revert-patch, patches, capture-patch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglops.core.op import DRY_RUN, JSON, TARGET, TARGETS, Context, Op, Param
from sglops.core.values import Choice, Flag, Name, Required, StrList

if TYPE_CHECKING:
    from sglops.patch.apply import PatchList, PatchResult
    from sglops.patch.capture import Capture


NAME = Param("name", Required(Name("patch")), positional=True)
DRY = DRY_RUN.again(help="show the diff and the files it would touch; change nothing")
FORCE = Param("force", Flag(), "override: hand-modified files, unmet requirements, drift", flag=False)
VARIANT = Param(
    "variant", Name("variant"), "use this variant (default: by version/commit, else the one that applies)"
)


def apply_patch(ctx: Context, name: str, variant: str | None = None, force: bool = False) -> PatchResult:
    """On the nodes of one server (sglops.core.meet.one_server), all of them or none."""
    from sglops.patch import across_nodes, apply
    from sglops.patch.kernel_facts import planned_kernels, planning

    def here():
        with planning(planned_kernels(ctx.dry_run, ctx.records)):
            return apply.apply_patch(ctx.remote, name, dry_run=ctx.dry_run, variant=variant, force=force)

    return across_nodes.all_or_none(
        ctx, f"apply-patch {name}", here, undo=lambda applied: apply.revert_patch(ctx.remote, name)
    )


def revert_patch(ctx: Context, name: str, force: bool = False) -> PatchResult:
    """On the nodes of one server, all of them or none (a node taken back is re-applied if another fails)."""
    from sglops.patch import across_nodes, apply

    def redo(reverted):
        return apply.apply_patch(ctx.remote, name, variant=reverted.variant, force=True)

    return across_nodes.all_or_none(
        ctx,
        f"revert-patch {name}",
        lambda: apply.revert_patch(ctx.remote, name, dry_run=ctx.dry_run, force=force),
        undo=redo,
    )


def patches(ctx: Context) -> PatchList:
    """On the nodes of one server, each node's list also names what differs from the other nodes."""
    from sglops.patch import across_nodes, apply

    return across_nodes.compared(ctx, apply.status(ctx.remote))


def capture_patch(
    ctx: Context,
    name: str,
    against: str = "commit",
    variant: str | None = None,
    files: list[str] | None = None,
    force: bool = False,
) -> Capture:
    from sglops.patch.capture import capture

    return capture(
        ctx.remote, name, against=against, variant=variant, dry_run=ctx.dry_run, force=force, files=files
    )


def _load(o: dict) -> None:
    from sglops.patch import spec

    spec.load(o["name"])


OPS = [
    Op(
        "apply-patch",
        apply_patch,
        "Apply patches/NAME to the host's SGLang tree: atomic, recorded in the host's ledger, idempotent.",
        (NAME, TARGETS, DRY, VARIANT, FORCE, JSON),
        step="apply-patch",
        prepare=_load,
        record="patch.json",
        together=True,
        play_shows=True,
    ),
    Op(
        "revert-patch",
        revert_patch,
        "Take patches/NAME back off the host, only if its files are as the patch left them (else --force).",
        (NAME, TARGETS, DRY, FORCE, JSON),
        step="revert-patch",
        prepare=_load,
        record="patch.json",
        together=True,
        play_shows=True,
    ),
    Op(
        "patches",
        patches,
        "Each patch on the host: available / applicable / applied / conflicting / drifted.",
        (TARGETS, JSON),
        together=True,
    ),
    Op(
        "capture-patch",
        capture_patch,
        "Turn hand edits on the host into a new variant under patches/NAME/ with its patch.yaml entry.",
        (
            NAME,
            TARGET,
            Param(
                "against",
                Choice(("commit", "release"), "commit"),
                "commit (git HEAD) or release (the PyPI wheel)",
                flag="commit",
            ),
            VARIANT.again(help="variant name (default sglang-VERSION[-local])"),
            Param("files", StrList(), "only these files (comma-separated, relative to the checkout)"),
            DRY,
            FORCE,
            JSON,
        ),
    ),
]
