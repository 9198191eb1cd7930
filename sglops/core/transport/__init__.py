"""The remote layer, one module per seam (`sglops.core.remote` re-exports what callers use, and `connect()`).

    command.py      the command protocol: one quoted shell line with its `timeout`, a CommandResult, the
                    JSON answer of a host step, one-line error text
    memo.py         a connection's memo of host reads (facts, tree, ledger), dropped by every other step
    base.py         Remote: run / run_py / put / get over a transport's `_exec`, `_put`, `_get`, `_close`
    local.py        LocalRemote: `--host local`, a local `bash -c`
    ssh_keys.py     host keys: fingerprints, known_hosts, the unknown-key policy
    ssh_connect.py  SSH connect: every hop (ProxyJump, inventory gateway) opened and checked in turn
    ssh_channel.py  SSHRemote: one exec channel per command, stdin in one write, both streams read to EOF
    spec.py         Transport, TargetKind: what each declares (which hosts it takes, how it opens, its
                    inventory fields with their kinds)
    registry.py     TRANSPORTS and TARGETS: `connect()` and the inventory's fields come from here

A target that is not the host itself (a container: `sglops/core/container.py`) is a Remote that WRAPS one of
these transports: it rewrites the shell line and delegates the round trip.
"""
