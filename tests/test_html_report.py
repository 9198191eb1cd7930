"""`inv report RUN --html` (issue 41, item 3): one self-contained page per record kind, checked in a real
headless browser (Debian's chromium; scripts/setup.sh installs it): it loads with no console message (the
page's Content-Security-Policy turns any remote or file load into one), its screenshot has the size asked and
is not blank; the charts are inline SVG, the run's identity is on top, every row a stand-in figure touches is
marked (and none of a record the server did not mark), the traces are linked and open as Chrome JSON.

The records are real: one play on a sandbox host with the stand-in server (restart, bench, profile,
apply-patch, bench, compare, ab, sweep: each a run of its own) and one `inv compare` of its two benches.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sglops.core import artifacts
from sglops.sandbox.sshd import free_port
from sglops.views.html_report import write_html
from tests.conftest import REPO, inv_cmd

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SIZE = (1200, 1800)
PLAY = """\
name: html-report
description: every kind of record inv report --html reads, on a stand-in host
steps:
  - {id: restart, do: restart, with: {profile: sandbox}}
  - {id: trace, do: profile, with: {steps: 2}}
  - {id: ab, do: ab, with: {a: sandbox, b: sandbox+gather-cast, rounds: 1, output_len: 16, warmup: 0}}
  - id: sweep
    do: sweep
    with: {profile: sandbox, patches: [none, gather-cast], output_len: 16, runs: 1, warmup: 0}
"""


def browser_check(page: Path, shot: Path) -> tuple[list[str], float]:
    """Load page in headless chromium with its console on
    stderr and take a screenshot: (console lines, seconds)."""
    t0 = time.monotonic()
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            f"--window-size={SIZE[0]},{SIZE[1]}",
            f"--screenshot={shot}",
            "--hide-scrollbars",
            f"--user-data-dir={shot.parent / 'chromium-profile'}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert shot.is_file(), r.stderr[-2000:]
    return [line for line in r.stderr.splitlines() if ":CONSOLE" in line], time.monotonic() - t0


def pixels(shot: Path) -> tuple[tuple[int, int], float, int]:
    """(size, share of pixels that are not the page's white, distinct colours) of a screenshot."""
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    data = list(small.get_flattened_data()) if hasattr(small, "get_flattened_data") else list(small.getdata())
    return img.size, sum(1 for p in data if p != (255, 255, 255)) / len(data), len(set(data))


@pytest.fixture(scope="module")
def runs(make_sandbox, tmp_path_factory) -> dict:
    """Every record kind, from one play on a stand-in host (and a compare of its benches)."""
    tmp = tmp_path_factory.mktemp("html")
    sb = make_sandbox(
        [{"name": "web-a", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox"]}], name="html"
    )
    # the sandbox profile on a port of its own (other modules' servers share loopback)
    profiles = tmp / "profiles"
    profiles.mkdir()
    text = (REPO / "playbooks" / "profiles" / "sandbox.yaml").read_text()
    text = text.replace("port: 30000", f"port: {free_port()}").replace('STARTUP_S: "1.0"', 'STARTUP_S: "0.2"')
    (profiles / "sandbox.yaml").write_text(text)
    env = {
        "SGLOPS_INVENTORY": str(sb.inventory),
        "SGLOPS_ARTIFACTS": str(tmp / "artifacts"),
        "SGLOPS_PROFILES": str(profiles),
    }
    play = tmp / "html-report.yaml"
    play.write_text(PLAY)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        r = inv_cmd("play", str(play), "--host", "web-a", env=env)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        run = json.loads(inv_cmd("runs", "--task", "play", "--json", env=env).stdout)["runs"][0]["run_id"]
        cmp = inv_cmd("compare", f"{run}-ab-r1a", f"{run}-ab-r1b", "--json", env=env)
        assert cmp.returncode == 0, cmp.stderr
        kinds = {
            "play": run,
            "bench": f"{run}-ab-r1a",
            "profile": f"{run}-trace",
            "ab": f"{run}-ab",
            "sweep": f"{run}-sweep",
            "compare": Path(json.loads(cmp.stdout)["chart"]).parent.name,
        }
        # the task's flag; the other pages in-process
        w = inv_cmd("report", run, "--html", env=env)
        assert w.returncode == 0 and "run-report.html" in w.stdout, w.stderr
        pages = {kind: write_html(rid) for kind, rid in kinds.items()}
        yield {"pages": pages, "env": env, "tmp": tmp, "run": run}
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_every_kind_is_one_self_contained_page(runs):
    for kind, page in runs["pages"].items():
        text = page.read_text()
        assert text.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in text, kind
        assert not re.search(r'(src|href)="(https?:)?//', text), f"{kind}: a remote resource"
        assert "<script" not in text and '<img src="' not in text.replace("<img alt=", ""), kind
        ident = text[text.index('class="identity"') : text.index("</table>")]
        for field in (
            ("run", "host", "SGLang", "GPUs", "patches", "profile") if kind != "compare" else ("run",)
        ):
            assert f"<td>{field}</td>" in ident, (kind, field)
        assert "0.5.23" in ident and "web-a" in ident, kind
    ab = runs["pages"]["ab"].read_text().split("</table>")[0]
    # each side's patches, profile
    assert "A: none" in ab and "B: gather-cast" in ab and "<td>sandbox</td>" in ab
    for kind in ("play", "ab", "sweep", "compare", "profile"):
        assert runs["pages"][kind].read_text().count("<svg") >= 1, f"{kind}: no inline chart"


def test_standin_rows_are_marked_and_measured_ones_are_not(runs):
    for kind, page in runs["pages"].items():
        text = page.read_text()
        # past the identity table
        body = text[text.index("</table>") :]
        rows = re.findall(r"<tr[^>]*>\s*<td.*?</tr>", body, re.S)
        figures = [r for r in rows if re.search(r"(?<![\d.])\d+\.\d+(?![\d.])", re.sub(r"<[^>]+>", "", r))]
        assert figures, kind
        # the probe table (the tree's own facts) and the steps that set no figure stay unmarked
        if kind == "play":
            marked = {re.sub(r"<[^>]+>|STAND-IN", "", r).split()[0] for r in rows if 'class="standin"' in r}
            assert {"trace", "ab", "sweep"} <= marked and "restart" not in marked
        else:
            unmarked = [r for r in figures if 'class="standin"' not in r]
            assert not unmarked, f"{kind}: a stand-in figure's row is unmarked: {unmarked[0][:300]}"
    # the same bench record as a server that does not call itself a stand-in records it: nothing marked
    src = artifacts.find_run(f"{runs['run']}-ab-r1a")
    dst = src.parent / "20990101-000000-meas"
    shutil.copytree(src, dst)
    for name in ("bench.json", "manifest.json"):
        doc = json.loads((dst / name).read_text())
        doc.pop("standin", None)
        (doc.get("launch_args") or {}).pop("standin", None)
        doc["run_id"] = dst.name
        (dst / name).write_text(json.dumps(doc))
    r = inv_cmd("report", dst.name, "--html", env=runs["env"])
    assert r.returncode == 0, r.stderr
    page = (dst / "run-report.html").read_text()
    assert 'class="standin"' not in page and "STAND-IN server" not in page


def test_traces_are_linked_and_open_as_chrome_json(runs):
    for kind in ("play", "profile"):
        page = runs["pages"][kind]
        links = re.findall(r'<a href="([^"]+\.trace\.json\.gz)"', page.read_text())
        assert links, kind
        doc = json.loads(gzip.decompress((page.parent / links[0]).read_bytes()))
        assert doc.get("traceEvents"), "a Chrome JSON trace (what Perfetto opens)"


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/setup.sh installs it)")
def test_pages_in_a_real_browser(runs):
    took = {}
    for kind in ("play", "ab"):
        shot = runs["tmp"] / f"{kind}.png"
        console, took[kind] = browser_check(runs["pages"][kind], shot)
        assert console == [], f"{kind}: {console}"
        size, ink, colours = pixels(shot)
        assert size == SIZE, size
        assert ink > 0.05 and colours > 20, f"{kind}: a blank page? ({ink:.3f} ink, {colours} colours)"
    # the check itself can fail: a page that loads a remote image and throws
    bad = runs["tmp"] / "bad.html"
    text = runs["pages"]["ab"].read_text()
    bad.write_text(
        text.replace("</body>", '<img src="http://127.0.0.1:9/x.png"><script>nope()</script></body>')
    )
    console, _ = browser_check(bad, runs["tmp"] / "bad.png")
    assert any("127.0.0.1:9" in line for line in console)
    from PIL import Image

    # and the pixel count can say blank
    Image.new("RGB", SIZE, (255, 255, 255)).save(runs["tmp"] / "blank.png")
    assert pixels(runs["tmp"] / "blank.png")[1] == 0
    print(
        f"browser check: {', '.join(f'{k} {v:.1f} s' for k, v in took.items())}; page sizes: "
        + ", ".join(f"{k} {p.stat().st_size / 1024:.0f} KiB" for k, p in runs["pages"].items())
    )
