"""A task's start-up: what it imports before its first byte goes out to a host.

A real `python -m invoke facts` against a closed loopback port (nothing listens: the connect is the first byte
and fails at once); an audit hook notes the modules loaded at the first socket connect. The views (rich
tables, every result class), the trace analysis and Jinja are for later or for other tasks: a facts task must
not wait for them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sglops.sandbox.sshd import free_port

REPO = Path(__file__).resolve().parent.parent
HOOK = (
    "import sys, json\n"
    "def hook(e, a):\n"
    "    if e == 'socket.connect' and not getattr(hook, 'done', False):\n"
    "        hook.done = True\n"
    "        sys.stderr.write('@@MODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\n"
    "sys.addaudithook(hook)\n"
    "sys.argv = ['invoke'] + sys.argv[1:]\n"
    "from invoke.main import program\n"
    "program.run()\n"
)
NOT_BEFORE_THE_FIRST_BYTE = (
    "sglops.views.show",
    "sglops.views.probe",
    "sglops.trace.analysis",
    "jinja2",
    "sglops.launch.render",
    "sglops.bench.run",
    "numpy",
)


def test_facts_connects_before_importing_views_trace_analysis_or_jinja(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "SGLOPS_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = subprocess.run(
        [sys.executable, "-c", HOOK, "facts", "--host", f"127.0.0.1:{free_port()}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # the connect was refused: one line, non-zero
    assert proc.returncode != 0 and "cannot reach" in proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("@@MODULES "))
    loaded = set(json.loads(line.split(" ", 1)[1]))
    # the hook saw the task's own connect
    assert "paramiko" in loaded and "sglops.core.remote" in loaded
    assert [m for m in NOT_BEFORE_THE_FIRST_BYTE if m in loaded] == []
