"""`inv sandbox`: local sandbox GPU hosts (real sshd on loopback, real SGLang trees)."""

from __future__ import annotations

from sglops.core.op import Context, Op, Param
from sglops.core.values import Choice, Flag, Int


def sandbox(ctx: Context, action: str, hosts: int = 2, base: str | None = None, real: bool = False) -> None:
    from sglops.sandbox import cli

    cli.main(action, hosts=hosts, base=base, real=real)


OPS = [
    Op(
        "sandbox",
        sandbox,
        "Bring local sandbox GPU hosts up or down (real sshd on loopback, real SGLang trees): "
        "up|down|status.",
        (
            Param("action", Choice(("up", "down", "status")), positional=True),
            Param("hosts", Int(1, 16, 2), "number of sandbox hosts"),
            Param("base", help="folder for the sandbox (default .cache/sandbox)"),
            Param(
                "real",
                Flag(),
                "add host cpu-a with the real SGLang 0.5.23 CPU server environment (scripts/setup.sh "
                "builds it)",
                flag=False,
            ),
        ),
    ),
]
