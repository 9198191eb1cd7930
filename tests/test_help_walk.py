"""Every task's help, as `inv --help TASK` prints it, reads right (issue 41, item 5).

The walk runs `python3 -m invoke --help TASK` for every task `inv --list` shows and checks each option line
against the operation catalogue: a number flag says INT/FLOAT, a list flag LIST, every value flag shows a
placeholder and no switch does, short flags are letters and mean one long flag across all tasks, no help
text names a one-letter flag as `--x`, and every `inv --list` line is a whole sentence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sglops.cli.glue import TARGET_FLAGS
from sglops.core.op import Marker
from sglops.core.values import Flag, Float, Int, IntList, Required, StrList

REPO = Path(__file__).resolve().parent.parent
ENTRY = re.compile(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$")
GOOD_NAME = re.compile(r"^(-[A-Za-z]( [A-Z]+)?|--(\[no-\])?[a-z][a-z0-9-]+(=[A-Z]+)?)$")


def inv(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def list_entries(text: str) -> dict[str, str]:
    """task -> its `inv --list` text, wrapped lines joined."""
    entries: dict[str, str] = {}
    name = None
    for line in text.splitlines()[1:]:
        m = re.match(r"^  (\S+)\s+(.*)$", line)
        if m:
            name = m.group(1)
            entries[name] = m.group(2).strip()
        elif name and line.strip():
            entries[name] += " " + line.strip()
    return entries


def options(text: str) -> list[tuple[list[str], str]]:
    """(flag names as printed, help) of every option of one task's help."""
    out: list[tuple[list[str], str]] = []
    body = text.split("Options:", 1)[1] if "Options:" in text else ""
    for line in body.splitlines():
        m = ENTRY.match(line)
        if m:
            out.append(([n.strip() for n in m.group(1).split(", ")], m.group(2) or ""))
        elif out and line.strip():
            out[-1] = (out[-1][0], (out[-1][1] + " " + line.strip()).strip())
    return out


def _kind(p) -> object:
    return p.kind.kind if isinstance(p.kind, Required) else p.kind


def catalogue() -> dict[str, dict[str, str]]:
    """task -> long flag -> the placeholder it must show ('' for a switch)."""
    from sglops.ops import OPS
    from sglops.play.ops import OPS as PLAY_OPS

    want: dict[str, dict[str, str]] = {}
    for op in [*OPS, *PLAY_OPS]:
        flags: dict[str, str] = {}
        for p in op.params:
            if isinstance(p, Marker):
                for k in TARGET_FLAGS:
                    flags[k] = "" if k == "accept_new_host_key" else "LIST" if k == "hosts" else "STRING"
                continue
            if not p.cli:
                continue
            k = _kind(p)
            flags[p.name] = (
                ""
                if isinstance(k, Flag)
                else (
                    "INT"
                    if isinstance(k, Int)
                    else (
                        "FLOAT"
                        if isinstance(k, Float)
                        else (
                            "LIST"
                            if isinstance(k, IntList | StrList) or p.name in op.task.get("iterable", ())
                            else None
                        )
                    )
                )
            )
        want[op.name] = {n.replace("_", "-"): v for n, v in flags.items()}
    return want


def findings(listing: str, helps: dict[str, str]) -> dict[str, list[str]]:
    """oddity -> where: empty lists when every help reads right."""
    found: dict[str, list[str]] = defaultdict(list)
    want = catalogue()
    for task, text in list_entries(listing).items():
        if not re.search(r"[.)!?]$", text):
            found["list line cut"].append(f"{task}: ...{text[-40:]}")
    shorts: dict[str, set[str]] = defaultdict(set)
    for task, text in helps.items():
        for names, help_text in options(text):
            longs = [n for n in names if n.startswith("--")]
            long = re.sub(r"^--(\[no-\])?|=.*$", "", longs[0]) if longs else names[0].split()[0].lstrip("-")
            for n in names:
                if not GOOD_NAME.match(n):
                    found["malformed flag name"].append(f"{task}: {n!r}")
                if re.match(r"^-[A-Za-z]\b", n) and longs:
                    shorts[n[:2]].add(long)
            placeholders = {m.group(1) for n in names for m in [re.search(r"[= ]([A-Z]+)$", n)] if m}
            expected = want.get(task, {}).get(long)
            if expected == "":
                if placeholders:
                    found["placeholder on a switch"].append(f"{task}: --{long}")
            elif not placeholders or len([n for n in names if re.search(r"[= ][A-Z]+$", n)]) != len(names):
                found["value flag without placeholder"].append(f"{task}: --{long}")
            elif expected and placeholders != {expected}:
                found["wrong type"].append(
                    f"{task}: --{long} shows {'/'.join(sorted(placeholders))}, not {expected}"
                )
            for ref in re.findall(r"(?<![\w-])--([a-z])\b(?!-)", help_text):
                found["one-letter flag spelt --x"].append(f"{task}: --{long} help says --{ref}")
    for short, longs in shorts.items():
        if len(longs) > 1:
            found["short flag with two meanings"].append(f"{short}: {', '.join(sorted(longs))}")
    return found


@pytest.fixture(scope="module")
def walked() -> tuple[str, dict[str, str]]:
    listing = inv("--list")
    tasks = list(list_entries(listing))
    with ThreadPoolExecutor(4) as pool:
        helps = dict(zip(tasks, pool.map(lambda t: inv("--help", t), tasks), strict=True))
    return listing, helps


def test_every_task_is_walked(walked):
    listing, helps = walked
    assert len(helps) == len(catalogue()) >= 20
    assert all("Options:" in text for text in helps.values())


def test_help_reads_right(walked):
    found = findings(*walked)
    print({k: len(v) for k, v in found.items()})
    assert not found, "\n".join(f"{k}: {w}" for k, v in found.items() for w in v)


def test_the_walk_sees_each_oddity():
    """The checks themselves: a help with every oddity is caught, each by its own rule."""
    listing = "Available tasks:\n\n  bench   Decode figures measured ON the host (TTFT, ITL, TPOT,\n"
    helps = {
        "bench": (
            "Options:\n  --, --no-logprobs   keep only ids\n  -n STRING, --concurrency=STRING   streams\n"
            "  --slo   goodput SLOs, like --a\n  -h STRING, --host=STRING   a host\n"
        ),
        "sandbox": "Options:\n  -h STRING, --hosts=STRING   number of hosts\n",
    }
    found = findings(listing, helps)
    assert set(found) == {
        "list line cut",
        "malformed flag name",
        "wrong type",
        "value flag without placeholder",
        "one-letter flag spelt --x",
        "short flag with two meanings",
    }
