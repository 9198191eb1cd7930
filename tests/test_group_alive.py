"""A stopped server's process group counts as gone once every member has exited, even while exited members
wait to be reaped: a zombie holds no GPU memory, port or file. Why it matters: on a container's or sandbox's
init (this machine's reaps about every 1.5 s) every stop used to wait for the reap (23 stops cost 30 s of
test_ab.py). The zombies here belong to a subreaper that never reaps, so the test does not depend on any
init's timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from sglops.host import server_common

# R: a child subreaper that never reaps. P: R's child in a new session (the "server" group). C: P's child,
# exits at once (a zombie: P never waits). P exits after HOLD s: both group members are then unreaped zombies
# of R.
HOLD = 1.5
SUBREAPER = f"""
import ctypes, os, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os._exit(0)
    time.sleep({HOLD})
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


def states(pgid: int) -> list[str]:
    out = []
    for stat in __import__("pathlib").Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[2] == str(pgid):
            out.append(fields[0])
    return out


def test_a_group_of_unreaped_zombies_is_not_alive_and_a_live_member_is():
    reaper = subprocess.Popen([sys.executable, "-c", SUBREAPER], stdout=subprocess.PIPE, text=True)
    try:
        pgid = int(reaper.stdout.readline())
        time.sleep(0.3)
        assert "Z" in states(pgid) and any(s != "Z" for s in states(pgid)), states(pgid)
        # P still runs
        assert server_common.group_alive(pgid) is True
        deadline = time.monotonic() + HOLD + 5
        while any(s != "Z" for s in states(pgid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        # both exited, neither reaped
        assert states(pgid) and set(states(pgid)) == {"Z"}, states(pgid)
        assert server_common.group_alive(pgid) is False
    finally:
        reaper.kill()
        reaper.wait()


# P: a new session whose main thread ends (pthread_exit) while a second thread keeps the process, and its
# files, alive: the leader shows Z, the process has not exited.
LEADER_GONE = """
import ctypes, os, threading, time
pid = os.fork()
if pid == 0:
    os.setsid()
    threading.Thread(target=lambda: (time.sleep(30), os._exit(0))).start()
    time.sleep(0.1)
    ctypes.CDLL(None).pthread_exit(None)
print(pid, flush=True)
time.sleep(60)
"""


def test_a_zombie_leader_whose_other_thread_still_runs_is_alive():
    parent = subprocess.Popen([sys.executable, "-c", LEADER_GONE], stdout=subprocess.PIPE, text=True)
    pgid = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 5
        while states(pgid) != ["Z"] and time.monotonic() < deadline:
            time.sleep(0.05)
        # the leader alone, as a zombie
        assert states(pgid) == ["Z"], states(pgid)
        assert server_common.group_alive(pgid) is True
    finally:
        os.killpg(pgid, signal.SIGKILL)
        parent.kill()
        parent.wait()


# P: a new session holding 512 MB it has written to (tearing that down takes a KILLed process a while, as a
# scheduler's GBs do), and its child that does the same; both wait to be killed.
HEAVY_GROUP = """
import os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    os.fork()
    block = bytearray(512 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    # one write each (atomic on a pipe): print's could interleave as "readyready" (CI)
    os.write(1, b"ready\\n")
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


def test_kill_group_returns_only_when_no_member_is_left():
    """A start that died leaves its workers to kill_group: the check for leftovers that follows (and the next
    start on the same port) must find none still exiting (seen in CI: a failed real start's scheduler still
    listed)."""
    parent = subprocess.Popen([sys.executable, "-c", HEAVY_GROUP], stdout=subprocess.PIPE, text=True)
    pgid = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline() == "ready\n" and parent.stdout.readline() == "ready\n"
        assert len(states(pgid)) == 2
        t0 = time.monotonic()
        server_common.kill_group(pgid)
        took = time.monotonic() - t0
        assert [s for s in states(pgid) if s != "Z"] == [], states(pgid)
        assert server_common.group_alive(pgid) is False and took < server_common.KILL_WAIT_S
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        parent.kill()
        parent.wait()
