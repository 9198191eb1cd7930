"""Unified diffs in pure Python: parse, apply (exact context, hunks may move), reverse, make.

Why our own: the laptop applies a variant to the file contents it fetched from the host in
the same round trip as the version, so a conflict can name the file and hunk before anything
on the host changes, and the host needs neither `git` nor `patch`. Context must match exactly
(no fuzz): a patch that lands "roughly" on a hot path is worse than one that refuses.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from sglops.core.errors import SglopsError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
NO_EOL = "\\ No newline at end of file"


class DiffError(SglopsError):
    """A diff file that cannot be parsed."""


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: str
    # (" ", "-", "+"), text with its newline
    lines: list[tuple[str, str]] = field(default_factory=list)

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@{self.section}"

    def old(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " -"]

    def new(self) -> list[str]:
        return [t for tag, t in self.lines if tag in " +"]

    def reversed(self) -> Hunk:
        flip = {" ": " ", "-": "+", "+": "-"}
        return Hunk(
            self.new_start,
            self.new_len,
            self.old_start,
            self.old_len,
            self.section,
            [(flip[tag], t) for tag, t in self.lines],
        )


@dataclass
class FilePatch:
    # relative to the SGLang checkout root
    path: str
    hunks: list[Hunk]

    def reversed(self) -> FilePatch:
        return FilePatch(self.path, [h.reversed() for h in self.hunks])


@dataclass
class Conflict:
    path: str
    # 1-based
    hunk: int
    header: str
    reason: str

    def __str__(self) -> str:
        # the whole file, not one hunk (patch/names.py)
        if not self.hunk:
            return f"{self.path}: {self.reason}"
        return f"{self.path} hunk #{self.hunk} ({self.header.split(' @@')[0]} @@): {self.reason}"


def _strip_prefix(name: str) -> str:
    name = name.split("\t")[0].strip()
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse(text: str, source: str = "<diff>") -> list[FilePatch]:
    """The file patches in a unified diff (git or plain `diff -u` style)."""
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])
            files.append(FilePatch(new if new != "/dev/null" else old, []))
            i += 2
            continue
        m = _HUNK.match(line.rstrip("\n"))
        if m:
            if not files:
                raise DiffError(f"{source}:{i + 1}: hunk before any ---/+++ header")
            hunk = Hunk(
                int(m[1]),
                int(m[2] if m[2] is not None else 1),
                int(m[3]),
                int(m[4] if m[4] is not None else 1),
                m[5],
            )
            need_old, need_new = hunk.old_len, hunk.new_len
            i += 1
            while (need_old > 0 or need_new > 0) and i < len(lines):
                body = lines[i]
                tag = body[:1] if body[:1] in " -+" else (" " if body in ("\n", "\r\n") else None)
                if tag is None:
                    raise DiffError(f"{source}:{i + 1}: unexpected line inside a hunk: {body[:40]!r}")
                text_ = body[1:] if body[:1] in " -+" else body
                hunk.lines.append((tag, text_))
                need_old -= tag in " -"
                need_new -= tag in " +"
                i += 1
                if i < len(lines) and lines[i].startswith(NO_EOL):
                    t, s = hunk.lines[-1]
                    hunk.lines[-1] = (t, s.rstrip("\r\n"))
                    i += 1
            if need_old > 0 or need_new > 0:
                raise DiffError(f"{source}: hunk {hunk.header} is truncated")
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files or not any(f.hunks for f in files):
        raise DiffError(f"{source}: no hunks found (is it a unified diff?)")
    return files


def _find(lines: list[str], block: list[str], guess: int) -> int | None:
    """Where block occurs in lines, nearest to guess first."""
    n = len(block)
    if n == 0:
        return min(max(guess, 0), len(lines))
    # only where the first line matches: the same positions, in the same order, found sooner
    head = block[0]
    order = sorted(
        (p for p in range(0, len(lines) - n + 1) if lines[p] == head), key=lambda p: abs(p - guess)
    )
    for pos in order:
        if lines[pos : pos + n] == block:
            return pos
    return None


def apply_file(patch: FilePatch, text: str) -> tuple[str | None, list[Conflict]]:
    """Apply one file's hunks to its text: (new text, []) or (None, the hunks that failed)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    offset = 0
    conflicts = []
    for k, hunk in enumerate(patch.hunks, 1):
        old = hunk.old()
        guess = hunk.old_start - 1 + offset if hunk.old_len else hunk.old_start + offset
        pos = _find(lines[cursor:], old, guess - cursor)
        if pos is None:
            conflicts.append(Conflict(patch.path, k, hunk.header, "context or removed lines not found"))
            continue
        pos += cursor
        out.extend(lines[cursor:pos])
        out.extend(hunk.new())
        cursor = pos + len(old)
        offset = pos - (hunk.old_start - 1 if hunk.old_len else hunk.old_start)
    if conflicts:
        return None, conflicts
    out.extend(lines[cursor:])
    return "".join(out), []


def apply(files: list[FilePatch], texts: dict[str, str | None]) -> tuple[dict[str, str], list[Conflict]]:
    """Apply every file patch to texts[path]; all conflicts are collected, not just the first."""
    result: dict[str, str] = {}
    conflicts: list[Conflict] = []
    for fp in files:
        text = texts.get(fp.path)
        if text is None:
            conflicts.append(Conflict(fp.path, 1, fp.hunks[0].header, "file does not exist on the host"))
            continue
        new, bad = apply_file(fp, text)
        conflicts.extend(bad)
        if new is not None:
            result[fp.path] = new
    return result, conflicts


def reverse(files: list[FilePatch]) -> list[FilePatch]:
    return [f.reversed() for f in files]


def make(path: str, before: str, after: str, context: int = 3) -> str:
    """A git-style unified diff of one file (marks a missing final newline as git does)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(a, b, f"a/{path}", f"b/{path}", n=context):
        if line.startswith(("---", "+++")):
            out.append(line.rstrip("\n") + "\n")
        elif line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n" + NO_EOL + "\n")
    return "".join(out)
