"""LocalRemote: `--host local`, the same commands and host
steps run on this machine by `bash -c`, without SSH."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from sglops.core.errors import RemoteTimeout
from sglops.core.transport.base import Remote
from sglops.core.transport.command import CommandResult
from sglops.core.transport.spec import Transport


class LocalRemote(Remote):
    """`--host local`: the same commands and scripts, run on this machine without SSH."""

    def _exec(self, command, stdin, timeout, on_output):
        self.round_trips += 1
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            if on_output is None:
                out, err = proc.communicate(stdin, timeout=timeout)
            else:
                out, err = _stream_local(proc, stdin, timeout, on_output)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise RemoteTimeout(f"local: command timed out after {timeout:g} s") from None
        return CommandResult(
            command,
            proc.returncode,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            time.monotonic() - start,
        )

    def _put(self, local, remote):
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{remote}.sglops-tmp"
        with open(local, "rb") as src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, remote)

    def _get(self, remote, local, progress):
        self._put(remote, str(local))


TRANSPORT = Transport("local", takes=lambda host: host.is_local, open=lambda host, **_: LocalRemote(host))


def _stream_local(
    proc: subprocess.Popen, stdin: bytes | None, timeout: float, on_output
) -> tuple[bytes, bytes]:
    if stdin:
        proc.stdin.write(stdin)
    proc.stdin.close()
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    for line in iter(proc.stdout.readline, b""):
        out.append(line)
        on_output(line.decode(errors="replace"))
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    err = proc.stderr.read()
    proc.wait(timeout=max(1, deadline - time.monotonic()))
    return b"".join(out), err
