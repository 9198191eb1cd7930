"""`inv capture-patch`: turn edits made by hand on a host into a new variant under patches/NAME/.

Engineers often try a fix in place on the GPU host first; this keeps that work as a versioned
diff against the commit (git HEAD) or the pristine PyPI release, with its patch.yaml entry, so
it can be applied, reverted and tested like every other patch.
"""

from __future__ import annotations

import base64
import csv
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from sglops.core.errors import ConfigError, SglopsError
from sglops.core.remote import Remote
from sglops.core.result import Result
from sglops.core.yamlio import loads_yaml
from sglops.patch import diff as patch_diff
from sglops.patch.apply import host_state, lock_wait_s, operator
from sglops.patch.spec import load, patches_root


@dataclass
class Capture(Result):
    """Hand edits on a host kept as a patch variant: the diff, the files written here (none on a dry run).

    `changed` is False: capture reads the host and writes only this machine's patches/ folder (`written`); a
    dry run's `plan` names what it would write there."""

    host: str
    patch: str
    variant: str
    against: str
    files: list[str]
    diff: str
    written: list[str] = field(default_factory=list)
    yaml_entry: str = ""
    dry_run: bool = False
    # the local files a real run writes (the diff, patch.yaml)
    targets: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return False

    @property
    def plan(self) -> list[str]:
        return [f"write {t}" for t in self.targets] if self.dry_run else []

    def payload(self) -> dict:
        return {
            "host": self.host,
            "patch": self.patch,
            "variant": self.variant,
            "against": self.against,
            "files": self.files,
            "diff": self.diff,
            "written": self.written,
            "yaml_entry": self.yaml_entry,
        }


def release_files(version: str) -> tuple[dict[str, str], zipfile.ZipFile]:
    """The PyPI wheel's .py files and their sha256 (from its RECORD), fetched once and cached."""
    from sglops.core.wheels import cached_wheel

    zf = zipfile.ZipFile(cached_wheel("sglang", version))
    record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
    hashes = {}
    for row in csv.reader(io.StringIO(zf.read(record).decode())):
        if len(row) >= 2 and row[0].endswith(".py") and row[1].startswith("sha256="):
            digest = base64.urlsafe_b64decode(row[1][7:] + "==").hex()
            hashes[row[0]] = digest
    return hashes, zf


def _yaml_entry(variant: str, diff_name: str, version: str | None, commit: str | None, against: str) -> str:
    lines = [f"  - name: {variant}", f"    diff: {diff_name}"]
    if version:
        lines.append(f'    sglang: ["{version}"]')
    if commit and against == "commit":
        lines.append(f'    commits: ["{commit[:12]}"]')
    lines.append(f"    note: captured by {operator()} (vs {against})")
    return "\n".join(lines) + "\n"


def _insert_variant(yaml_text: str, entry: str) -> str:
    """Add a variant at the end of the `variants:` list, keeping the file's comments and order."""
    lines = yaml_text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == "variants:"), None)
    if start is None:
        raise ConfigError("patch.yaml has no top-level `variants:` list to add to")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "-", "#")):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return "".join(lines[:end]) + entry + "".join(lines[end:])


def capture(
    remote: Remote,
    name: str,
    *,
    against: str = "commit",
    variant: str | None = None,
    files: list[str] | None = None,
    dry_run: bool = False,
    force: bool = False,
    description: str | None = None,
) -> Capture:
    """Diff the host's hand edits against `against` and save them as patches/NAME/VARIANT.diff."""
    if against not in ("commit", "release"):
        raise ConfigError(f"--against must be commit or release, not {against!r}")
    args = {
        "sglang_root": remote.host.sglang_root,
        "against": against,
        "files": files or [],
        "operator": operator(),
        "lock_wait_s": lock_wait_s(),
        "read_only": dry_run,
    }
    wheel = None
    if against == "release":
        info = host_state(remote, [], contents=False)
        if not info.get("version"):
            raise SglopsError(f"{remote.name}: cannot tell the SGLang version to fetch the release")
        hashes, wheel = release_files(info["version"])
        args["release_hashes"] = hashes
    got = remote.run_py("patch_capture", args)
    ours = {(rel, h["after"]) for e in got["ledger"].get("applied", []) for rel, h in e["files"].items()}
    diffs, names = [], []
    for rel, f in sorted(got["files"].items()):
        if (rel, f["sha256"]) in ours:
            # left as it is by a recorded sglops patch, not a hand edit
            continue
        before = f["before"] if against == "commit" else wheel.read(f["key"]).decode("utf-8")
        if before is None or f["after"] is None:
            raise SglopsError(
                f"{remote.name}: {rel} was added or deleted; capture handles edits to existing files"
            )
        d = patch_diff.make(rel, before, f["after"])
        if d:
            diffs.append(d)
            names.append(rel)
    if not diffs:
        raise SglopsError(f"{remote.name}: no hand edits found (vs {against}) to capture")
    version, commit = got.get("version"), got.get("commit")
    variant = variant or f"sglang-{version or 'unknown'}" + ("-local" if against == "commit" else "")
    folder = patches_root() / name
    diff_name = f"{variant}.diff"
    entry = _yaml_entry(variant, diff_name, version, commit, against)
    exists = (folder / "patch.yaml").is_file()
    if exists and any(v.name == variant for v in load(name).variants) and not force:
        raise ConfigError(
            f"patches/{name} already has a variant {variant!r}; pick --variant or --force to replace its diff"
        )
    yaml_path = folder / "patch.yaml"
    result = Capture(
        remote.name,
        name,
        variant,
        against,
        names,
        "".join(diffs),
        yaml_entry=entry,
        dry_run=dry_run,
        targets=[str(folder / diff_name), str(yaml_path)],
    )
    if dry_run:
        return result
    folder.mkdir(parents=True, exist_ok=True)
    if exists:
        text = yaml_path.read_text()
        if not any(v.name == variant for v in load(name).variants):
            text = _insert_variant(text, entry)
    else:
        text = (
            f"description: >\n  {description or f'captured from hand edits on {remote.name}'}\n"
            "files:\n" + "".join(f"  - {n}\n" for n in names) + "variants:\n" + entry
        )
    # refuse to write a patch.yaml that would not load
    loads_yaml(text, str(yaml_path))
    _write(folder / diff_name, result.diff)
    _write(yaml_path, text)
    load(name)
    result.written = [str(folder / diff_name), str(yaml_path)]
    return result


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
