"""Versioned patches on a remote SGLang tree: status, apply, revert, and the ledger others read.

Decisions are made on the laptop from one round trip of host state (version, commit, target
file contents, ledger): which variant, whether it applies, conflicts by file and hunk, drift,
requirements. The change itself is one more round trip to `patch_txn`, which does it all or
nothing under a lock on the host. Ledger format: docs/patches.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglops.core import artifacts, owner
from sglops.core.errors import ConnectError, Refused, RemoteError, SglopsError
from sglops.core.remote import Remote
from sglops.core.result import Observation, Result
from sglops.patch import diff as patch_diff
from sglops.patch import names as patch_names
from sglops.patch.spec import Patch, Variant, load, load_all


class PatchRefused(Refused):
    """The patch cannot be applied or reverted here as things are (conflict, drift, requirement)."""


def lock_wait_s() -> float:
    """How long a patch step waits for another operator's lock on the same tree."""
    return float(os.environ.get("SGLOPS_PATCH_LOCK_WAIT_S") or 60)


def operator() -> str:
    """Who takes the host's patch lock and writes its ledger entries (sglops.core.owner: the one source)."""
    from sglops.core import owner

    return owner.operator()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- host state ------------------------------------------------------------------------------
# the host's ledger entries in the connection's memo (Remote.remembered)
LEDGER_KEY = "ledger"


def host_state(
    remote: Remote,
    files: list[str],
    *,
    contents: bool = True,
    backups_of: list[str] = (),
    recover: bool = False,
    on_progress: Callable[[dict], None] | None = None,
) -> dict:
    """One round trip: version, commit, the files (text + sha256 + git status), the ledger.

    Read-only unless `recover` (mutating commands only): then, under the host's lock, it first
    finishes or rolls back a transaction that a dropped connection or a crash cut short. Read-only,
    a pending transaction comes back as "recovery_needed" and the answer shows the tree as it will
    be once recovered.
    """
    args = {
        "sglang_root": remote.host.sglang_root,
        "files": files,
        "contents": contents,
        "backups_of": list(backups_of),
        "recover": recover,
        "operator": operator(),
        "lock_wait_s": lock_wait_s(),
    }
    if recover:
        return _mutating(remote, "patch_state", args, "recovery", on_progress=on_progress)
    state = remote.reading(lambda: remote.run_py("patch_state", args))
    # the whole ledger came with it: `applied()`
    remote.memo.put(LEDGER_KEY, state["ledger"].get("applied", []))
    return state


def applied(remote: Remote) -> list[dict]:
    """The host's ledger entries (`applied.json` "applied" list), for bench/play code (read-only).

    Read once until the next step that may change the host (the connection's memo: Remote.remembered)."""
    return remote.remembered(
        LEDGER_KEY, lambda: host_state(remote, [], contents=False)["ledger"].get("applied", [])
    )


def recovery_note(pending: dict | None) -> str | None:
    """One line on a transaction cut short that the next mutating patch command will recover."""
    if not pending:
        return None
    if pending.get("live"):
        return (
            f"in progress: {pending['op']} of {pending['patch']} (journal state {pending['state']}), owned by"
            f" {pending['live']}; it finishes or rolls back on its own: look again when it is done"
        )
    what = "finished" if pending.get("will") == "roll forward" else "rolled back"
    return (
        f"recovery needed: {pending['op']} of {pending['patch']} was cut short (journal state "
        f"{pending['state']}); the next apply-patch or revert-patch on this host {what} it first; "
        "shown as it will be then"
    )


def _entry(state: dict, name: str) -> dict | None:
    return next((e for e in state["ledger"].get("applied", []) if e.get("patch") == name), None)


def _drift(state: dict, entry: dict) -> list[str]:
    return [
        rel for rel, h in entry["files"].items() if state["files"].get(rel, {}).get("sha256") != h["after"]
    ]


def _hand_modified(state: dict, files: list[str]) -> list[str]:
    """Target files that git says changed and that no recorded patch left as they are."""
    ours = {(rel, h["after"]) for e in state["ledger"].get("applied", []) for rel, h in e["files"].items()}
    return [
        rel
        for rel in files
        if state["files"].get(rel, {}).get("git_modified")
        and (rel, state["files"][rel]["sha256"]) not in ours
    ]


# -- variants --------------------------------------------------------------------------------
@dataclass
class Trial:
    """What one variant does to the host's files: applies, is already applied, or conflicts."""

    variant: Variant
    # "applies" | "applied" | "conflict"
    outcome: str
    new_texts: dict[str, str] = field(default_factory=dict)
    conflicts: list[patch_diff.Conflict] = field(default_factory=list)


def _unsound(texts: dict[str, str | None], new: dict[str, str]) -> list[patch_diff.Conflict]:
    """Files the variant applies to as text that would raise
    NameError: names the patch uses but nothing defines."""
    out = []
    for rel, text in new.items():
        bad = patch_names.introduced(texts.get(rel), text) if rel.endswith(".py") and text is not None else {}
        if bad:
            named = ", ".join(f"{n} (line {line})" for n, line in list(bad.items())[:5])
            out.append(
                patch_diff.Conflict(
                    rel,
                    0,
                    "",
                    "applies as text, but the patched file uses names it never "
                    f"defines (NameError when that line runs): {named}",
                )
            )
    return out


def trial(variant: Variant, texts: dict[str, str | None]) -> Trial:
    fps = variant.files()
    new, conflicts = patch_diff.apply(fps, texts)
    if not conflicts:
        unsound = _unsound(texts, new)
        return Trial(variant, "conflict", conflicts=unsound) if unsound else Trial(variant, "applies", new)
    _, rev_conflicts = patch_diff.apply(patch_diff.reverse(fps), texts)
    if not rev_conflicts:
        return Trial(variant, "applied")
    return Trial(variant, "conflict", conflicts=conflicts)


def choose(patch: Patch, state: dict, forced: str | None = None) -> tuple[Trial, str]:
    """The variant for this host and how it was chosen: --variant, exact version/commit, or a check."""
    texts = {rel: f["text"] for rel, f in state["files"].items()}
    ver, commit = state.get("version"), state.get("commit")
    where = f"sglang {ver or '?'}" + (f" @ {commit[:12]}" if commit else "")
    if forced:
        return trial(patch.variant(forced), texts), f"--variant {forced}"
    exact = [v for v in patch.variants if v.matches(ver, commit)]
    for v in exact:
        t = trial(v, texts)
        if t.outcome != "conflict":
            return t, f"exact match for {where}"
    if exact:
        return trial(exact[0], texts), f"exact match for {where}"
    trials = [trial(v, texts) for v in patch.variants]
    for t in trials:
        if t.outcome != "conflict":
            return (
                t,
                (
                    f"no variant targets {where}; {t.variant.name}"
                    f" {'applies' if t.outcome == 'applies' else 'is applied'} (checked)"
                ),
            )
    if not trials:
        raise PatchRefused(f"patch {patch.name} has no variants")
    return trials[0], f"no variant targets {where}; none applies: " + "; ".join(
        f"{t.variant.name}: {_why_not(t)}" for t in trials
    )


def _why_not(trial: Trial) -> str:
    """A failed variant's reason: its conflict's own words, else how many hunks failed."""
    conflicts = trial.conflicts
    return conflicts[0].reason if conflicts and not conflicts[0].hunk else f"{len(conflicts)} hunk(s) fail"


def conflict_message(patch: Patch, t: Trial, how: str) -> str:
    failing = "; ".join(str(c) for c in t.conflicts[:6]) + (
        f"; +{len(t.conflicts) - 6} more" if len(t.conflicts) > 6 else ""
    )
    files = sorted({c.path for c in t.conflicts})
    return (
        f"patch {patch.name} variant {t.variant.name} does not apply ({how}): failing in {', '.join(files)}: "
        f"{failing}; nothing changed"
    )


# -- requirements ----------------------------------------------------------------------------
def host_facts(remote: Remote) -> dict[str, Any]:
    """Probe facts (sglops.probe.scan) merged with host facts (GPU SM, versions) for `requires`."""
    from sglops.patch.kernel_facts import installed_kernel_facts
    from sglops.probe.facts import gather

    f = gather(remote)
    facts: dict[str, Any] = {
        "gpu_sm": f.sm,
        "sglang_version": (f.sglang or {}).get("version"),
        "flashinfer_version": (f.data.get("flashinfer") or {}).get("version"),
    }
    facts.update(installed_kernel_facts(remote, f.sm))
    try:
        from sglops.probe.scan import scan
    except ImportError:
        return facts
    facts.update(scan(remote).facts)
    return facts


def unmet(patch: Patch, facts: dict[str, Any]) -> list[str]:
    return [r for r in (req.check(facts) for req in patch.requires) if r]


# -- results ---------------------------------------------------------------------------------
@dataclass
class PatchResult(Result):
    """What apply-patch / revert-patch did (or, in a dry run, would do) on one host; `diff` is what a dry run
    would write."""

    host: str
    patch: str
    # applied | already applied | would apply | reverted | not applied | would revert
    action: str
    changed: bool
    variant: str | None = None
    how: str = ""
    files: list[str] = field(default_factory=list)
    diff: str = ""
    notes: list[str] = field(default_factory=list)
    recovered: dict | None = None
    ledger_entry: dict | None = None
    recovery_needed: dict | None = None

    @property
    def dry_run(self) -> bool:
        return self.action.startswith("would ")

    @property
    def plan(self) -> list[str]:
        if not self.dry_run:
            return []
        what = self.action.removeprefix("would ")
        return [
            f"{what} {self.patch}" + (f" ({self.variant})" if self.variant else "") + f": {f}"
            for f in self.files
        ] or [f"{what} {self.patch}"]

    def payload(self) -> dict:
        return {
            "host": self.host,
            "patch": self.patch,
            "action": self.action,
            "changed": self.changed,
            "variant": self.variant,
            "how": self.how,
            "files": self.files,
            "diff": self.diff or None,
            "notes": self.notes,
            "recovered": self.recovered,
            "recovery_needed": self.recovery_needed,
            "ledger_entry": self.ledger_entry,
        }


def recovered_line(rec: dict) -> str:
    what = f"{rec['op']} of {rec['patch']}: {rec['outcome']}" if rec.get("op") else "leftovers cleaned"
    return what + (f" (removed {', '.join(rec['orphans'])})" if rec.get("orphans") else "")


@dataclass
class PatchStatus:
    patch: str
    # available | applicable | applied | conflicting | drifted | gone
    status: str
    variant: str | None
    detail: str


def recorded_changes(host: str) -> dict[str, dict]:
    """Per patch, the last apply or revert this machine recorded on `host` (its artifacts), oldest first."""
    last: dict[str, dict] = {}
    for run in artifacts.list_runs(host):
        if run.get("task") not in ("apply-patch", "revert-patch"):
            continue
        try:
            doc = artifacts.read_json(Path(run["path"]) / "patch.json")
        except (OSError, ValueError):
            continue
        if doc.get("changed") and doc.get("patch"):
            last[doc["patch"]] = doc
    return last


def _gone(remote: Remote, state: dict, name: str, recorded: dict[str, dict]) -> str | None:
    """Why a patch this machine applied in a container is no longer there: the container was recreated."""
    doc = recorded.get(name)
    now = state.get("container") or {}
    was = ((doc or {}).get("ledger_entry") or {}).get("container") or {}
    if (
        not remote.container
        or not doc
        or doc.get("action") != "applied"
        or not was
        or was.get("id") == now.get("id")
    ):
        return None
    return (
        f"container {remote.container.name} was recreated since apply ({was['id'][:12]} -> "
        f"{(now.get('id') or '?')[:12]}, image {(now.get('image') or '?').removeprefix('sha256:')[:12]}): "
        "the patch went with it; apply it again"
    )


@dataclass
class PatchList(Observation):
    host: str
    sglang: str
    rows: list[PatchStatus]
    recovery_needed: dict | None = None
    # the journal of an `inv ab` in progress or cut short (sglops.experiment.ab_journal), "live"
    ab: dict | None = None
    # a node of a server over several hosts whose patches are not the other nodes'
    differs: bool = False

    def payload(self) -> dict:
        return {
            "host": self.host,
            "sglang": self.sglang,
            "recovery_needed": self.recovery_needed,
            "ab": self.ab,
            "patches": [vars(r) for r in self.rows],
            "differs": self.differs,
        }


# -- operations ------------------------------------------------------------------------------
FactsFn = Callable[[Remote], dict[str, Any]]


def status(remote: Remote, *, facts_fn: FactsFn = host_facts) -> PatchList:
    """Every patch under patches/ against this host: applied / drifted / applicable / available / conflicting.

    Read-only: no lock, nothing created; a transaction cut short is reported, not recovered."""
    patches = load_all()
    state = host_state(remote, sorted({f for p in patches for f in p.files}))
    facts: dict | None = None
    rows = []
    recorded = recorded_changes(remote.name) if remote.container else {}
    for p in patches:
        entry = _entry(state, p.name)
        gone = None if entry else _gone(remote, state, p.name, recorded)
        if gone:
            rows.append(PatchStatus(p.name, "gone", recorded[p.name].get("variant"), gone))
            continue
        if entry:
            drift = _drift(state, entry)
            rows.append(
                PatchStatus(
                    p.name,
                    "drifted" if drift else "applied",
                    entry.get("variant"),
                    (
                        f"changed since apply: {', '.join(drift)}"
                        if drift
                        else f"{entry.get('time')} by {entry.get('operator')}"
                    ),
                )
            )
            continue
        t, how = choose(p, state)
        if t.outcome == "conflict":
            rows.append(
                PatchStatus(
                    p.name,
                    "conflicting",
                    t.variant.name,
                    f"{len(t.conflicts)} hunk(s) fail in {', '.join(sorted({c.path for c in t.conflicts}))}"
                    f" ({how})",
                )
            )
        elif t.outcome == "applied":
            rows.append(
                PatchStatus(p.name, "applied", t.variant.name, "found in the files; not in the ledger")
            )
        else:
            reasons = []
            if p.requires:
                facts = facts if facts is not None else facts_fn(remote)
                reasons = unmet(p, facts)
            hand = _hand_modified(state, list(t.new_texts))
            detail = "; ".join(reasons) if reasons else how
            if hand:
                detail += f"; modified by hand: {', '.join(hand)}"
            rows.append(PatchStatus(p.name, "available" if reasons else "applicable", t.variant.name, detail))
    where = (state.get("version") or "?") + (f" @ {state['commit'][:12]}" if state.get("commit") else "")
    ab = state.get("ab")
    return PatchList(
        remote.name,
        where,
        rows,
        state.get("recovery_needed"),
        {**ab, "live": owner.alive(ab.get("owner"))} if ab else None,
    )


def apply_patch(
    remote: Remote,
    name: str,
    *,
    dry_run: bool = False,
    variant: str | None = None,
    force: bool = False,
    facts_fn: FactsFn = host_facts,
    on_progress: Callable[[dict], None] | None = None,
) -> PatchResult:
    """Apply NAME atomically (or show what would change); a second apply reports "already applied"."""
    patch = load(name)
    state = host_state(remote, patch.files, recover=not dry_run, on_progress=on_progress)
    base = {
        "host": remote.name,
        "patch": name,
        "recovered": state.get("recovered"),
        "recovery_needed": state.get("recovery_needed"),
    }
    entry = _entry(state, name)
    if entry:
        drift = _drift(state, entry)
        if drift:
            raise PatchRefused(
                f"{name} is applied ({entry.get('variant')}) but drifted: {', '.join(drift)} changed "
                "since; see `inv patches`, then `inv revert-patch --force` to start over"
            )
        return PatchResult(
            **base,
            action="already applied",
            changed=False,
            variant=entry.get("variant"),
            how=f"{entry.get('time')} by {entry.get('operator')}",
            files=sorted(entry["files"]),
        )
    t, how = choose(patch, state, variant)
    if t.outcome == "applied":
        return PatchResult(
            **base,
            action="already applied",
            changed=False,
            variant=t.variant.name,
            how=how,
            files=sorted(fp.path for fp in t.variant.files()),
            notes=["the files already contain it, but the ledger has no record"],
        )
    if t.outcome == "conflict":
        raise PatchRefused(conflict_message(patch, t, how))
    notes = []
    hand = _hand_modified(state, list(t.new_texts))
    if hand:
        if not force:
            raise PatchRefused(
                f"{', '.join(hand)} modified by hand on {remote.name} (differs from "
                f"{(state.get('commit') or 'the commit')[:12]}, not by an sglops patch); "
                "refusing without --force; nothing changed"
            )
        notes.append(f"--force: applied over hand edits in {', '.join(hand)}")
    if patch.requires:
        reasons = unmet(patch, facts_fn(remote))
        if reasons and not force:
            raise PatchRefused(
                f"{name} not applied: {'; '.join(reasons)} (--force overrides); nothing changed"
            )
        notes += [f"--force: requirement not met: {r}" for r in reasons]
    bad = patch.run_checks(t.new_texts)
    if bad:
        raise PatchRefused(
            f"{name} {t.variant.name}: post-apply check failed: {'; '.join(bad)}; nothing changed"
        )
    files = sorted(t.new_texts)
    diff = t.variant.diff.read_text()
    if dry_run:
        return PatchResult(
            **base,
            action="would apply",
            changed=False,
            variant=t.variant.name,
            how=how,
            files=files,
            diff=diff,
            notes=notes,
        )
    payload = {
        rel: {"before": state["files"][rel]["sha256"], "after": sha(text), "content": text}
        for rel, text in t.new_texts.items()
    }
    entry_in = {"variant": t.variant.name, "operator": operator()}
    done = _txn(
        remote,
        name,
        "apply",
        {
            "sglang_root": remote.host.sglang_root,
            "op": "apply",
            "patch": name,
            "files": payload,
            "entry": entry_in,
            "operator": operator(),
            "lock_wait_s": lock_wait_s(),
        },
        timeout=300,
        on_progress=on_progress,
        take_over=force,
    )
    notes = [*notes, *([done["owner_note"]] if done.get("owner_note") else [])]
    # lost the race to an identical apply: its result, not an error
    if done.get("already"):
        won = done["already"]
        return PatchResult(
            **base,
            action="already applied",
            changed=False,
            variant=won.get("variant"),
            how=f"{won.get('time')} by {won.get('operator')}",
            files=files,
            notes=["applied by another operator while this one waited for the lock"],
        )
    new_entry = next(e for e in done["ledger"]["applied"] if e["patch"] == name)
    return PatchResult(
        **base,
        action="applied",
        changed=True,
        variant=t.variant.name,
        how=how,
        files=files,
        notes=notes,
        ledger_entry=new_entry,
    )


def revert_patch(
    remote: Remote,
    name: str,
    *,
    dry_run: bool = False,
    force: bool = False,
    on_progress: Callable[[dict], None] | None = None,
) -> PatchResult:
    """Put the originals back, only if the files are still as the patch left them (else --force)."""
    patch = load(name)
    state = host_state(
        remote,
        patch.files,
        backups_of=[f"{name}:{f}" for f in patch.files],
        recover=not dry_run,
        on_progress=on_progress,
    )
    base = {
        "host": remote.name,
        "patch": name,
        "recovered": state.get("recovered"),
        "recovery_needed": state.get("recovery_needed"),
    }
    entry = _entry(state, name)
    if not entry:
        return PatchResult(
            **base, action="not applied", changed=False, notes=["nothing recorded in the ledger"]
        )
    files = sorted(entry["files"])
    drift = _drift(state, entry)
    notes = []
    if drift:
        if not force:
            diffs = []
            for rel in drift:
                cur = state["files"].get(rel, {}).get("text")
                diffs.append(
                    f"{rel} (now {(state['files'].get(rel, {}).get('sha256') or 'missing')[:12]}, "
                    f"patch left {entry['files'][rel]['after'][:12]})"
                    if cur is not None
                    else f"{rel} (missing)"
                )
            raise PatchRefused(
                f"{name} drifted since it was applied: {'; '.join(diffs)}; refusing to revert "
                "(--force restores the originals and loses those changes); nothing changed"
            )
        notes.append(f"--force: discarding changes made after the patch in {', '.join(drift)}")
    missing = [rel for rel in files if state["backups"].get(f"{name}:{rel}") != entry["files"][rel]["before"]]
    if missing:
        raise PatchRefused(
            f"{name}: the backups of {', '.join(missing)} under .sglops/backups/{name}/ are missing "
            "or altered; cannot restore the originals exactly; nothing changed"
        )
    variant = entry.get("variant")
    diff = ""
    try:
        rev = patch_diff.reverse(patch.variant(variant).files())
        diff = "".join(_render(fp) for fp in rev)
    except SglopsError:
        pass
    if dry_run:
        return PatchResult(
            **base, action="would revert", changed=False, variant=variant, files=files, diff=diff, notes=notes
        )
    payload = {
        rel: {
            "before": state["files"][rel]["sha256"],
            "after": entry["files"][rel]["before"],
            "from_backup": True,
        }
        for rel in files
    }
    done = _txn(
        remote,
        name,
        "revert",
        {
            "sglang_root": remote.host.sglang_root,
            "op": "revert",
            "patch": name,
            "files": payload,
            "operator": operator(),
            "lock_wait_s": lock_wait_s(),
        },
        timeout=300,
        on_progress=on_progress,
        take_over=force,
    )
    notes = [*notes, *([done["owner_note"]] if done.get("owner_note") else [])]
    # an identical revert won the race for the lock
    if done.get("already") is not None:
        return PatchResult(
            **base,
            action="not applied",
            changed=False,
            variant=variant,
            files=files,
            notes=["reverted by another operator while this one waited for the lock"],
        )
    return PatchResult(**base, action="reverted", changed=True, variant=variant, files=files, notes=notes)


def _txn(remote: Remote, name: str, op: str, args: dict, *, take_over: bool = False, **kw: Any) -> dict:
    """Run patch_txn; a lost connection is explained (the host finishes or rolls back on its own)."""
    return _mutating(remote, "patch_txn", args, f"{op} of {name}", take_over=take_over, **kw)


def _mutating(
    remote: Remote, script: str, args: dict, what: str, *, take_over: bool = False, **kw: Any
) -> dict:
    """Run a host step that may change the tree; a lost connection or a killed host process is
    explained as what it means for the tree (never half-way)."""
    from sglops.core import owner

    try:
        return owner.honoured(
            remote, lambda extra: remote.run_py(script, {**args, **extra}, **kw), what, take_over=take_over
        )
    except (ConnectError, RemoteError) as exc:
        if isinstance(exc, ConnectError) or "gave no answer" in str(exc):
            raise ConnectError(
                f"{remote.name}: connection lost during {what}; the host never leaves it "
                "half-way: a live host process completes or rolls it back by itself, a killed one is "
                "recovered by the next apply-patch or revert-patch: run `inv patches` to see which"
            ) from None
        raise


def _render(fp: patch_diff.FilePatch) -> str:
    out = [f"--- a/{fp.path}\n", f"+++ b/{fp.path}\n"]
    for h in fp.hunks:
        out.append(h.header + "\n")
        for tag, text in h.lines:
            out.append(tag + text + ("" if text.endswith("\n") else "\n" + patch_diff.NO_EOL + "\n"))
    return "".join(out)
