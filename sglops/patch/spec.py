"""patches/<name>/patch.yaml: what a patch is, which releases each variant targets, what it needs.

A patch is declarative because it changes with SGLang releases: one unified diff per variant,
picked by the host's version or commit; `requires` are conditions on probe/host facts, so a
patch that only works on some GPUs or FlashInfer builds says so once, here, and apply-patch
checks it for every host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import paths
from sglops.core.errors import ConfigError
from sglops.core.yamlio import check_fields, list_field, load_yaml
from sglops.patch import diff as patch_diff

PATCH_FIELDS = {"description", "files", "variants", "requires", "checks"}
VARIANT_FIELDS = {"name", "diff", "sglang", "commits", "note"}
REQUIRE_FIELDS = {"fact", "equals", "in", "not_in", "why"}
CHECK_FIELDS = {"file", "contains", "absent"}


class UnknownPatch(ConfigError):
    """A patch name that is not under patches/."""


def patches_root() -> Path:
    """The folder new patches go to (capture-patch) and an
    error names; reading searches core/paths.py's order."""
    return paths.writable("patches", env="SGLOPS_PATCHES")


@dataclass
class Variant:
    name: str
    diff: Path
    sglang: list[str]
    commits: list[str]
    note: str = ""

    def files(self) -> list[patch_diff.FilePatch]:
        return patch_diff.parse(self.diff.read_text(), str(self.diff))

    def matches(self, version: str | None, commit: str | None) -> bool:
        return bool(
            (version and version in self.sglang)
            or (commit and any(commit.startswith(c) for c in self.commits))
        )


@dataclass
class Requirement:
    fact: str
    why: str
    equals: Any = None
    one_of: list | None = None
    not_in: list | None = None
    has_equals: bool = False

    def check(self, facts: dict[str, Any]) -> str | None:
        """None when met, else the one-line reason it is not."""
        if self.fact not in facts:
            return f"{self.fact} is unknown on this host ({self.why})"
        value = facts[self.fact]
        ok = True
        if self.has_equals:
            ok = value == self.equals
        if self.one_of is not None:
            ok = ok and value in self.one_of
        if self.not_in is not None:
            ok = ok and value not in self.not_in
        if ok:
            return None
        want = (
            f"== {self.equals!r}"
            if self.has_equals
            else f"in {self.one_of}"
            if self.one_of is not None
            else f"not in {self.not_in}"
        )
        return f"{self.fact} is {value!r}, needs {want}: {self.why}"

    def to_json(self) -> dict:
        d: dict[str, Any] = {"fact": self.fact, "why": self.why}
        if self.has_equals:
            d["equals"] = self.equals
        if self.one_of is not None:
            d["in"] = self.one_of
        if self.not_in is not None:
            d["not_in"] = self.not_in
        return d


@dataclass
class Patch:
    name: str
    folder: Path
    description: str
    files: list[str]
    variants: list[Variant]
    requires: list[Requirement] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError(
            f"patch {self.name} has no variant {name!r} (variants:"
            f" {', '.join(v.name for v in self.variants)})"
        )

    def run_checks(self, texts: dict[str, str]) -> list[str]:
        """Post-apply content checks on the new file texts; the failures, one line each."""
        bad = []
        for c in self.checks:
            text = texts.get(c["file"])
            if text is None:
                continue
            if "contains" in c and c["contains"] not in text:
                bad.append(f"{c['file']} lacks {c['contains']!r}")
            if "absent" in c and c["absent"] in text:
                bad.append(f"{c['file']} still has {c['absent']!r}")
        return bad


def available() -> list[str]:
    return [p.parent.name for p in paths.listing("patches", "*/patch.yaml", env="SGLOPS_PATCHES")]


def load(name: str) -> Patch:
    folder = paths.find("patches", name, env="SGLOPS_PATCHES")
    if not (folder / "patch.yaml").is_file():
        names = available()
        raise UnknownPatch(
            f"no patch {name!r}; available: {', '.join(names) if names else 'none'} (under {patches_root()})"
        )
    doc = load_yaml(folder / "patch.yaml")
    what = f"patch {name}"
    check_fields(doc, PATCH_FIELDS, what, {"description", "variants"})
    variants = []
    for v in list_field(doc, "variants", what):
        check_fields(v, VARIANT_FIELDS, f"{what} variant", {"name", "diff"})
        diff = folder / str(v["diff"])
        if not diff.is_file():
            raise ConfigError(f"{v.where}: variant {v['name']}: no diff file {diff}")
        variants.append(
            Variant(
                v["name"],
                diff,
                [str(x) for x in list_field(v, "sglang", f"{what} variant")],
                [str(x) for x in list_field(v, "commits", f"{what} variant")],
                v.get("note", ""),
            )
        )
    requires = []
    for r in list_field(doc, "requires", what):
        check_fields(r, REQUIRE_FIELDS, f"{what} requirement", {"fact", "why"})
        requires.append(
            Requirement(r["fact"], r["why"], r.get("equals"), r.get("in"), r.get("not_in"), "equals" in r)
        )
    checks = []
    for c in list_field(doc, "checks", what):
        check_fields(c, CHECK_FIELDS, f"{what} check", {"file"})
        checks.append(dict(c))
    files = [str(f) for f in list_field(doc, "files", what)]
    for v in variants:
        for fp in v.files():
            if fp.path not in files:
                files.append(fp.path)
    return Patch(name, folder, str(doc["description"]).strip(), files, variants, requires, checks)


def load_all() -> list[Patch]:
    return [load(n) for n in available()]
