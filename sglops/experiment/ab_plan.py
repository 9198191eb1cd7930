"""The two sides of an `inv ab` and its round plan: what is done to the host, in which order.

A side is `PROFILE`, `PROFILE+PATCH[+PATCH...]`, or `+PATCH...` (the profile the host's sglops server runs
now). Patches named on either side are the ones ab manages: each side gets exactly its own; patches found
applied and named on neither side stay as they are throughout. Rounds run A then B (ABAB...), each with its
patch changes (reverts first), a restart and a bench; the plan ends with the restore of the found state.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglops.core.errors import ConfigError


@dataclass(frozen=True)
class Side:
    """One side of the A/B: a profile and the patches (of those ab manages) it runs with."""

    label: str
    spec: str
    profile: str
    patches: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.profile + "".join(f"+{p}" for p in self.patches)

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "spec": self.spec,
            "profile": self.profile,
            "patches": list(self.patches),
        }


def parse_side(text: str) -> tuple[str | None, tuple[str, ...]]:
    """`PROFILE[+PATCH...]` or `+PATCH...` -> (profile or None for the current one, patches)."""
    from sglops.core.values import Name

    raw = (text or "").strip()
    # the current profile, no patch of its own (`--patch P` without --a)
    if raw == "+":
        return None, ()
    if not raw:
        raise ConfigError("a side is PROFILE, PROFILE+PATCH[+PATCH...] or +PATCH (empty side given)")
    profile, *patches = raw.split("+")
    profile = profile.strip() or None
    names = tuple(p.strip() for p in patches)
    if any(not p for p in names):
        raise ConfigError(f"side {text!r}: an empty patch name (write PROFILE+PATCH or +PATCH)")
    if len(set(names)) != len(names):
        raise ConfigError(f"side {text!r} names a patch twice")
    for p in names:
        Name("patch").parse(p, f"side {text!r}: patch")
    if profile is not None:
        Name("profile").parse(profile, f"side {text!r}: profile")
    return profile, names


def sides_from(a: str | None, b: str | None, patch: str | None) -> tuple[str, str]:
    """The two sides as the operator spelt them from --a/--b/--patch: `--patch P` is B = A plus P (A default:
    the current profile); B's text is what the tables show, never parsed again (parse_sides adds P to A's
    patches)."""
    if patch:
        if b:
            raise ConfigError("--patch P means B = A plus P: give --a (optional) and --patch, not --b")
        base = (a or "").strip()
        return base or "+", f"{base}+{patch}"
    if not a or not b:
        raise ConfigError("give both sides (--a SIDE --b SIDE) or --patch P (this profile without vs with P)")
    return a, b


@dataclass(frozen=True)
class SideSpec:
    """A side as the operator spelt it, parsed: the text, the profile (None: the current one), the patches."""

    label: str
    text: str
    profile: str | None
    patches: tuple[str, ...]


def parse_sides(a: str | None, b: str | None, patch: str | None) -> tuple[SideSpec, SideSpec]:
    """--a/--b/--patch -> both sides, parsed once (the operation's prepare, before any host is touched)."""
    text_a, text_b = sides_from(a, b, patch)
    side_a = SideSpec("A", text_a, *parse_side(text_a))
    if not patch:
        return side_a, SideSpec("B", text_b, *parse_side(text_b))
    from sglops.core.values import Name

    Name("patch").parse(patch, "--patch")
    if patch in side_a.patches:
        raise ConfigError(f"side {text_b!r} names a patch twice")
    return side_a, SideSpec("B", text_b, side_a.profile, (*side_a.patches, patch))


@dataclass
class Found:
    """The host as ab found it: the sglops server (profile, port) and the ledger's patches."""

    running: bool
    profile: str | None
    port: int | None
    patches: list[str]

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Step:
    """One entry of the round plan: what is done to the host, for which round and side."""

    # revert | apply | restart | bench | profile | stop
    kind: str
    what: str
    # 1-based; None for the restore
    round: int | None = None
    side: str | None = None

    def line(self) -> str:
        where = f"round {self.round} {self.side}" if self.round else "restore"
        return f"{where}: {self.kind} {self.what}".rstrip()


def transitions(have: set[str], want: set[str], managed: list[str]) -> list[tuple[str, str]]:
    """Reverts first (an unwanted patch may touch the files a wanted one needs), then applies."""
    return [("revert", p) for p in managed if p in have and p not in want] + [
        ("apply", p) for p in managed if p in want and p not in have
    ]


def plan_steps(
    a: Side,
    b: Side,
    rounds: int,
    found: Found,
    managed: list[str],
    *,
    profile_sides: bool,
    bench_what: str,
    now: list[str] | None = None,
) -> list[Step]:
    """Every step in order: per round A then B (patches,
    restart, bench, [profile]), then the restore of `found`.

    now: the ledger's patches as the rounds begin, when they are not found's (an interrupted ab left its
    patches applied: its journal's found state is the one to restore)."""
    steps: list[Step] = []
    have = {p for p in (found.patches if now is None else now) if p in managed}
    for r in range(1, rounds + 1):
        for side in (a, b):
            for kind, p in transitions(have, set(side.patches), managed):
                steps.append(Step(kind, p, r, side.label))
            have = set(side.patches)
            steps.append(Step("restart", side.profile, r, side.label))
            steps.append(Step("bench", bench_what, r, side.label))
            if profile_sides and r == 1:
                steps.append(Step("profile", "one single-stream decode (torch profiler)", r, side.label))
    return steps + restore_steps(have, found, managed)


def restore_steps(have: set[str], found: Found, managed: list[str]) -> list[Step]:
    """The last steps, always run: from the managed patches `have` back to the found set, then the found
    server (or none). Planned from the rounds' end state; run from the ledger's, wherever the rounds
    stopped."""
    steps = [
        Step(kind, p) for kind, p in transitions(have, {p for p in found.patches if p in managed}, managed)
    ]
    if found.running and found.profile:
        steps.append(Step("restart", f"{found.profile} (port {found.port}): the server the host ran before"))
    else:
        steps.append(Step("stop", "the server (none was running before)"))
    return steps
