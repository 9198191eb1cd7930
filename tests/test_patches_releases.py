"""gather-cast and fp8-mla-native on every SGLang release 0.5.11-0.5.23 (issue 39, item 4).

The trees are the PyPI wheels laid out as pip installs them (sglops.sandbox.trees.sglang_site, cached, never
committed). `inv patches --hosts ...` runs once, over SSH to a real sshd sandbox host, with one inventory
entry per release (the same sshd, each entry's sglang_root a release's tree): it must find a variant that
applies on each of the 13, by exact release or by checking every variant. Then, without SSH, on the same
trees: what each chosen variant makes of the file is sound beyond "the hunks fit" (compiles, binds every name,
reads only attributes the release has), 0.5.22's KV-write API (KVWriteLoc.for_batch, plans taking kv_loc_plan)
is left as the release has it, and a release that only moves lines needs no new variant while one that changes
a statement is refused.
"""

from __future__ import annotations

import functools
import json
import re

import pytest

from sglops.patch import apply as patches
from sglops.patch import diff as patch_diff
from sglops.patch import names as patch_names
from sglops.patch import spec as patch_spec
from sglops.sandbox import trees
from tests.conftest import inv_cmd

MLA = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
RELEASES = [f"0.5.{n}" for n in range(11, 24)]
PATCHES = ("gather-cast", "fp8-mla-native")
# What each release gets (release -> variant). A release no variant names is checked against every variant
# (docs/patches.md, "Choosing a variant"): 0.5.11/0.5.12
# (gather-cast), 0.5.16 (both) are real releases taken so.
EXPECT = {
    "gather-cast": {
        "0.5.11": "sglang-0.4.10",
        "0.5.12": "sglang-0.4.10",
        "0.5.13": "sglang-0.5.13",
        "0.5.14": "sglang-0.5.13",
        "0.5.15": "sglang-0.5.15",
        "0.5.16": "sglang-0.5.17",
        "0.5.17": "sglang-0.5.17",
        "0.5.18": "sglang-0.5.18",
        "0.5.19": "sglang-0.5.19",
        "0.5.20": "sglang-0.5.20",
        "0.5.21": "sglang-0.5.20",
        "0.5.22": "sglang-0.5.23",
        "0.5.23": "sglang-0.5.23",
    },
    "fp8-mla-native": {
        "0.5.11": "sglang-0.5.11",
        "0.5.12": "sglang-0.5.11",
        "0.5.13": "sglang-0.5.13",
        "0.5.14": "sglang-0.5.13",
        "0.5.15": "sglang-0.5.15",
        "0.5.16": "sglang-0.5.17",
        "0.5.17": "sglang-0.5.17",
        "0.5.18": "sglang-0.5.18",
        "0.5.19": "sglang-0.5.19",
        "0.5.20": "sglang-0.5.20",
        "0.5.21": "sglang-0.5.20",
        "0.5.22": "sglang-0.5.23",
        "0.5.23": "sglang-0.5.23",
    },
}


def host_name(release: str) -> str:
    return "r" + release.replace(".", "-")


def release_text(release: str) -> str:
    return (trees.sglang_site(release) / MLA.removeprefix("python/")).read_text()


@pytest.fixture(scope="module")
def listed(make_sandbox, tmp_path_factory):
    """`inv patches --hosts` over SSH, one inventory entry
    per release's installed tree: {release: {patch: row}}."""
    sb = make_sandbox(
        [{"name": "rel", "sglang": "0.5.23", "flashinfer": "0.7.2", "tags": ["sandbox"]}], name="releases"
    )
    port = sb.hosts[0].client_port
    sb.write_inventory(
        [
            {
                "name": host_name(r),
                "address": "127.0.0.1",
                "port": port,
                "sglang_root": str(trees.sglang_site(r) / "sglang"),
            }
            for r in RELEASES
        ]
    )
    env = {
        "SGLOPS_INVENTORY": str(sb.inventory),
        "SGLOPS_ARTIFACTS": str(tmp_path_factory.mktemp("artifacts")),
    }
    proc = inv_cmd("patches", "--hosts", ",".join(host_name(r) for r in RELEASES), "--json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for host in json.loads(proc.stdout):
        assert host["ok"], host
        release = next(r for r in RELEASES if host_name(r) == host["host"])
        # the tree's own version file, read on the host
        assert host["sglang"] == release
        out[release] = {row["patch"]: row for row in host["patches"]}
    return out


@pytest.mark.parametrize("name", PATCHES)
@pytest.mark.parametrize("release", RELEASES)
def test_inv_patches_finds_a_variant_on_every_release(listed, release, name):
    row = listed[release][name]
    assert row["variant"] == EXPECT[name][release], row
    named = any(release in v.sglang for v in patch_spec.load(name).variants)
    assert ("exact match for sglang " + release if named else f"{row['variant']} applies (checked)") in row[
        "detail"
    ] or row["status"] == "available", row
    # no requirements: applies as it stands
    if name == "gather-cast":
        assert row["status"] == "applicable", row
    # needs its kernel built for the host's GPU, which no sandbox host has: the reason is named
    else:
        assert row["status"] == "available", row
        assert (
            "kernel_fp8_mla_decode_for_this_gpu" in row["detail"] and "inv build-kernel" in row["detail"]
        ), row


@functools.cache
def chosen(name: str, release: str, version: str | None = None, text: str | None = None):
    patch = patch_spec.load(name)
    text = release_text(release) if text is None else text
    trial, how = patches.choose(
        patch, {"files": {MLA: {"text": text}}, "version": version or release, "commit": None}
    )
    return patch, trial, how, text


def added_lines(variant: patch_spec.Variant) -> str:
    return "".join(t for fp in variant.files() for h in fp.hunks for tag, t in h.lines if tag == "+")


def missing_attributes(variant: patch_spec.Variant, release: str, new: str) -> list[str]:
    """What the variant's own lines read that the release does not have: `self.X` no line of the patched file
    assigns or defines, `get_parallel().X` the release's
    runtime context does not define (names.py sees neither)."""
    added = added_lines(variant)
    missing = [
        f"self.{a}"
        for a in sorted(set(re.findall(r"self\.(\w+)", added)))
        if not re.search(rf"self\.{a}\s*[:=][^=]|def {a}\(", new)
    ]
    ctx = trees.sglang_site(release) / "sglang" / "srt" / "runtime_context.py"
    ctx_text = ctx.read_text() if ctx.is_file() else ""
    missing += [
        f"get_parallel().{a}"
        for a in sorted(set(re.findall(r"get_parallel\(\)\.(\w+)", added)))
        if not re.search(rf"def {a}\(|\b{a}\s*[:=]", ctx_text)
    ]
    return missing


@pytest.mark.parametrize("name", PATCHES)
@pytest.mark.parametrize("release", RELEASES)
def test_the_patched_file_is_sound_on_every_release(release, name):
    patch, trial, how, text = chosen(name, release)
    assert trial.outcome == "applies", how
    new = trial.new_texts[MLA]
    compile(new, MLA, "exec")
    assert not patch_names.introduced(text, new)
    assert not missing_attributes(trial.variant, release, new)
    assert not patch.run_checks(trial.new_texts)
    # the stock whole-pool cast (one line or wrapped, as 0.5.11's is) is gone from both paths the patch owns
    cast = re.compile(r"get_key_buffer\(layer\.layer_id\)\.to\(\s*q\.dtype")
    assert len(cast.findall(text)) == 2 and not cast.findall(new)


def test_attribute_check_catches_what_names_cannot():
    """0.5.17's fp8-mla-native applies to 0.5.15 as text and binds every name, but asks
    get_parallel().dcp_enabled, which 0.5.15 lacks (it has dcp_enabled()): the reason 0.5.15 has its own
    variant."""
    patch, trial, how, text = chosen("fp8-mla-native", "0.5.15")
    forced = patches.trial(patch.variant("sglang-0.5.17"), {MLA: text})
    assert forced.outcome == "applies"
    assert missing_attributes(forced.variant, "0.5.15", forced.new_texts[MLA]) == [
        "get_parallel().dcp_enabled"
    ]
    assert trial.variant.name == "sglang-0.5.15" and "get_parallel().dcp_enabled" not in added_lines(
        trial.variant
    )


KV_WRITE_API = (
    "KVWriteLoc.for_batch(forward_batch)",
    "plan=forward_batch.kv_loc_plan",
    "forward_batch.kv_loc_plan",
)


@pytest.mark.parametrize("name", PATCHES)
@pytest.mark.parametrize("release", RELEASES)
def test_the_kv_write_api_of_0_5_22_is_followed(release, name):
    """0.5.22 writes KV through KVWriteLoc.for_batch and hands plans kv_loc_plan: the variant of 0.5.22 on
    keeps every such call as the release has it; the ones before 0.5.22 never use the new API (their releases
    lack it)."""
    _, trial, how, text = chosen(name, release)
    new = trial.new_texts[MLA]
    has_api = "KVWriteLoc" in text
    assert has_api == (tuple(int(x) for x in release.split(".")) >= (0, 5, 22))
    for call in KV_WRITE_API:
        assert new.count(call) == text.count(call), (call, how)
    if not has_api:
        assert not any(call in added_lines(trial.variant) for call in KV_WRITE_API + ("KVWriteLoc",))


def spans(variant: patch_spec.Variant, text: str) -> list[range]:
    """The lines of TEXT each hunk of the variant matches (its context and removed lines), in order."""
    lines, out, cursor = text.splitlines(keepends=True), [], 0
    for h in variant.files()[0].hunks:
        pos = patch_diff._find(lines[cursor:], h.old(), h.old_start - 1 - cursor) + cursor
        out.append(range(pos, pos + len(h.old())))
        cursor = pos + len(h.old())
    return out


def moved(text: str, variant: patch_spec.Variant) -> tuple[str, list[str]]:
    """The same statements, other lines: two comment blocks at module level, away from every line a hunk
    matches (as a new release's unrelated additions shift every hunk after them); returns (text, the
    blocks)."""
    lines = text.splitlines(keepends=True)
    near = {n for r in spans(variant, text) for n in range(r.start - 2, r.stop + 2)}
    points = [
        n
        for n in range(1, len(lines))
        if n not in near and lines[n - 1] == "\n" and lines[n][:1] not in (" ", "\t", "\n", ")", "]")
    ]
    first = next(n for n in points if n > len(lines) // 4)
    second = next(n for n in points if n > len(lines) * 3 // 5)
    blocks = ["# a new release's unrelated lines\n" * 17, "# another block that moves what follows\n\n" * 9]
    out = lines[:first] + [blocks[0]] + lines[first:second] + [blocks[1]] + lines[second:]
    return "".join(out), blocks


@pytest.mark.parametrize("name", PATCHES)
@pytest.mark.parametrize("release", RELEASES)
def test_a_release_that_moves_lines_needs_no_new_variant(release, name):
    """A release nobody wrote a variant for (0.5.99) whose file is a known release's with lines moved: the
    variant of that release is found by checking, and makes the same change at the moved places."""
    _, want, _, text = chosen(name, release)
    shifted, blocks = moved(text, want.variant)
    assert shifted != text
    _, got, how = chosen(name, release, version="0.5.99", text=shifted)[:3]
    assert got.outcome == "applies", how
    assert "no variant targets sglang 0.5.99" in how and "(checked)" in how
    new = got.new_texts[MLA]
    for block in blocks:
        new = new.replace(block, "", 1)
    # the same patched file, only moved
    assert new == want.new_texts[MLA]
    # ... while a changed statement inside what a hunk matches is refused, by hunk, never applied roughly
    fp = want.variant.files()[0]
    line = next(t for h in fp.hunks for tag, t in h.lines if tag == "-" or (tag == " " and "kv_indices" in t))
    changed = shifted.replace(line, line.replace("(", "( ", 1) if "(" in line else line + "  # moved\n", 1)
    refused = patches.trial(want.variant, {MLA: changed})
    assert refused.outcome == "conflict" and refused.conflicts[0].hunk, refused


def test_every_variant_diff_is_a_real_diff_of_its_release():
    """Each variant of both patches applies exactly to the
    releases its `sglang:` names (no fuzz, no check)."""
    for name in PATCHES:
        for v in patch_spec.load(name).variants:
            for release in v.sglang:
                if release not in RELEASES:
                    continue
                t = patches.trial(v, {MLA: release_text(release)})
                assert t.outcome == "applies", (name, v.name, release, [str(c) for c in t.conflicts])
                assert not patch_diff.apply(patch_diff.reverse(v.files()), t.new_texts)[1]
