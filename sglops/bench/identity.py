"""Did the model still say the same thing? Output identity between two recorded bench runs.

A kernel change is only a win if the outputs stay the same. `inv bench` keeps, per measured request,
the output token ids (and the chosen tokens' logprobs where the server gives them) in the run's
`outputs.json`, keyed by a hash of the exact prompt ids; the same seed gives the same prompts, so two
runs answer the same prompts and can be compared token by token:

- identical: every common prompt got the same token ids and, where both runs have logprobs, exactly the
  same logprobs (bitwise: a deterministic server gives that run to run);
- first divergence: the first prompt (in the baseline's order) whose ids differ, the token index, both
  token ids, and the text around it when the server gave text;
- max |logprob difference| over the tokens both runs agree on (after a divergence the two continuations
  condition on different text, so their logprobs are not comparable);
- a Tolerance for non-deterministic kernels: a bound on that logprob difference and a share of prompts
  whose ids must be identical.
Indices are 0-based, as in outputs.json.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from sglops.core.errors import ConfigError

if TYPE_CHECKING:
    from sglops.bench.record import Run

OUTPUTS_FILE = "outputs.json"
# text shown before and after a divergence
CONTEXT_CHARS = 40
# tokens shown before a divergence when the server gave per-token text
CONTEXT_TOKENS = 6


def ids_hash(ids: Sequence[int]) -> str:
    """The hash a manifest keeps per prompt (and per output): sha256 over the ids, 16 hex digits."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Tolerance:
    """How far outputs may drift and still count, for kernels that are not deterministic.

    max_logprob_diff: the largest |logprob A - logprob B| allowed on tokens both runs chose alike;
    min_identical_share: the share of common prompts (0..1) whose token ids must be identical.
    """

    max_logprob_diff: float = math.inf
    min_identical_share: float = 1.0

    def __post_init__(self) -> None:
        if not (self.max_logprob_diff >= 0):
            raise ConfigError(f"--tolerance-logprob must be >= 0 (got {self.max_logprob_diff})")
        if not 0 <= self.min_identical_share <= 1:
            raise ConfigError(f"--min-identical-share must be from 0 to 1 (got {self.min_identical_share})")

    def describe(self) -> str:
        parts = []
        if math.isfinite(self.max_logprob_diff):
            parts.append(f"|dlogprob| <= {self.max_logprob_diff:g}")
        parts.append(f">= {self.min_identical_share:.0%} of prompts identical")
        return ", ".join(parts)

    def to_json(self) -> dict:
        return {
            "max_logprob_diff": self.max_logprob_diff if math.isfinite(self.max_logprob_diff) else None,
            "min_identical_share": self.min_identical_share,
        }

    @classmethod
    def from_options(cls, logprob: float | None, share: float | None) -> Tolerance | None:
        """The tolerance the flags ask for, or None when neither is given (identity then means identical)."""
        if logprob is None and share is None:
            return None
        return cls(math.inf if logprob is None else float(logprob), 1.0 if share is None else float(share))


@dataclass
class Divergence:
    """Where the first differing prompt's outputs part: prompt, token index, both tokens, text around it."""

    # the request's place in the baseline's measured order (outputs.json "n")
    prompt_index: int
    # hash of its input ids
    prompt: str
    token_index: int
    # None: that run's output ended there
    a_id: int | None
    b_id: int | None
    concurrency: int | None = None
    repeat: int | None = None
    # the token's text, where the server gave per-token text
    a_token: str | None = None
    b_token: str | None = None
    # text both runs produced just before the divergence
    before: str | None = None
    a_after: str | None = None
    b_after: str | None = None

    def describe(self) -> str:
        def tok(i: int | None, text: str | None) -> str:
            if i is None:
                return "end of output"
            return f"{i}" + (f" {text!r}" if text is not None else "")

        out = (
            f"token {self.token_index} of prompt {self.prompt_index}: {tok(self.a_id, self.a_token)} vs "
            f"{tok(self.b_id, self.b_token)}"
        )
        if self.before is not None or self.a_after is not None:
            out += f"; text ...{self.before or ''!r} then {self.a_after or ''!r} vs {self.b_after or ''!r}"
        return out

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class OutputsVerdict:
    """Output identity of run B against baseline A over the prompts both answered."""

    # prompts both runs answered (ok requests, same input ids)
    compared: int
    # of those, prompts whose token ids are identical
    identical_prompts: int
    only_a: int = 0
    only_b: int = 0
    # both runs recorded logprobs
    logprobs: bool = False
    # over tokens both runs chose alike; None without logprobs
    max_logprob_diff: float | None = None
    # how many token pairs that maximum covers
    logprob_tokens: int = 0
    first_divergence: Divergence | None = None
    tolerance: Tolerance | None = None
    # outputs.json (token by token) or manifest hashes (prompt by prompt)
    source: str = OUTPUTS_FILE
    # prompt indices whose ids differ (first 20)
    differing: list[int] = field(default_factory=list)
    # only the first `limit` tokens compared (the runs asked for different lengths)
    limit: int | None = None
    # the largest |logprob A - logprob B| of the two runs' own tokens at a divergence: A chose its token over
    # B's and B the other way, so when both runs' logprobs agree within d elsewhere, a gap within ~d means
    # both tokens were near-tied and the runs parted on rounding; a large gap means they disagree on what is
    # likely
    divergence_gap: float | None = None
    # the typical |dlogprob| on tokens chosen alike (the max is one token)
    median_logprob_diff: float | None = None
    # the first output token comes from the prefill alone: prompts whose first token (id and logprob) is
    # bit-equal, of those compared with logprobs; all equal with later tokens apart puts a difference in
    # decode
    first_token_equal: int = 0
    first_token_compared: int = 0

    @property
    def near_ties_only(self) -> bool:
        """Every divergence (with logprobs on both sides) parted two tokens no further apart than twice the
        largest logprob difference seen on the tokens both runs chose alike."""
        d = self.max_logprob_diff
        return self.divergence_gap is not None and d is not None and self.divergence_gap <= 2 * d

    @property
    def tokens_identical(self) -> bool:
        return self.compared > 0 and self.identical_prompts == self.compared

    @property
    def identical(self) -> bool:
        """Same token ids for every common prompt and, where recorded, the very same logprobs."""
        return self.tokens_identical and not self.max_logprob_diff

    @property
    def identical_share(self) -> float:
        return self.identical_prompts / self.compared if self.compared else 0.0

    @property
    def within_tolerance(self) -> bool:
        """identical, or inside the tolerance when one is given."""
        if self.identical:
            return True
        tol = self.tolerance
        if tol is None or not self.compared:
            return False
        lp_ok = self.max_logprob_diff is None or self.max_logprob_diff <= tol.max_logprob_diff
        return lp_ok and self.identical_share >= tol.min_identical_share

    @property
    def status(self) -> str:
        """identical | within_tolerance | logprobs_differ | differ | not_compared."""
        if not self.compared:
            return "not_compared"
        if self.identical:
            return "identical"
        if self.tolerance is not None and self.within_tolerance:
            return "within_tolerance"
        return "logprobs_differ" if self.tokens_identical else "differ"

    def line(self) -> str:
        """One phrase for the headline: 'outputs identical'
        or 'OUTPUTS DIFFER at token 17 of prompt 3 ...'."""
        n = f"{self.compared} prompt{'s' if self.compared != 1 else ''}"
        lp = f", max |dlogprob| {self.max_logprob_diff:.3g}" if self.max_logprob_diff else ""
        st = self.status
        if st == "not_compared":
            return (
                "outputs not compared: no prompt answered by both runs (different seed, lengths or no"
                " outputs)"
            )
        if st == "identical":
            return (
                f"outputs identical ({n}"
                + (", logprobs equal" if self.logprobs else ", token ids")
                + ")"
                + self._limit()
            )
        if st == "within_tolerance":
            assert self.tolerance is not None
            return (
                f"outputs within tolerance ({self.identical_prompts}/{n} identical{lp}; "
                f"allowed: {self.tolerance.describe()})"
            )
        if st == "logprobs_differ":
            return f"same tokens, LOGPROBS DIFFER (max |dlogprob| {self.max_logprob_diff:.3g} over {n})"
        d = self.first_divergence
        where = (
            f" at token {d.token_index} of prompt {d.prompt_index}"
            if d and d.token_index >= 0
            else f" for prompt {d.prompt_index}"
            if d
            else ""
        )
        detail = f" ({d.a_id} vs {d.b_id})" if d and d.token_index >= 0 else ""
        gap = ""
        if self.divergence_gap is not None:
            gap = (
                f"; each divergence a near tie (the runs' tokens there within {self.divergence_gap:.3g} in"
                " logprob)"
                if self.near_ties_only
                else f"; logprob gap at a divergence up to {self.divergence_gap:.3g}"
            )
        return (
            f"OUTPUTS DIFFER{where}{detail}: {self.compared - self.identical_prompts}/{n} differ{lp}{gap}"
            f"{self._first_tokens()}{self._limit()}"
        )

    def _first_tokens(self) -> str:
        k, m = self.first_token_equal, self.first_token_compared
        if not m:
            return ""
        if k == m:
            return f"; first tokens (prefill) bit-equal on all {m}"
        return f"; first tokens (prefill) differ on {m - k}/{m}"

    def _limit(self) -> str:
        return f" (first {self.limit} tokens: the runs asked for different lengths)" if self.limit else ""

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "identical": self.identical,
            "tokens_identical": self.tokens_identical,
            "within_tolerance": self.within_tolerance,
            "compared": self.compared,
            "identical_prompts": self.identical_prompts,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "logprobs": self.logprobs,
            "max_logprob_diff": self.max_logprob_diff,
            "logprob_tokens": self.logprob_tokens,
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
            "differing_prompts": self.differing,
            "source": self.source,
            "tolerance": self.tolerance.to_json() if self.tolerance else None,
            "limit": self.limit,
            "divergence_gap": self.divergence_gap,
            "near_ties_only": self.near_ties_only,
            "median_logprob_diff": self.median_logprob_diff,
            "first_token_equal": self.first_token_equal,
            "first_token_compared": self.first_token_compared,
            "line": self.line(),
        }


# -- reading a run's outputs -------------------------------------------------------------------------
def load_outputs(run: Run) -> list[dict] | None:
    """The run's recorded outputs (outputs.json: one entry per measured request), or None if it has none."""
    path = Path(run.path) / OUTPUTS_FILE
    if not path.is_file():
        return None
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is unreadable: {exc}") from None
    return list(doc.get("requests") or [])


def _from_manifest(run: Run) -> list[dict] | None:
    """Prompt -> output hashes from the manifest (an outputs.json that was deleted or not copied)."""
    hashes = ((run.doc.get("outputs") or {}).get("hashes")) or None
    if not hashes:
        return None
    return [{"n": i, "prompt": p, "output": o, "outcome": "ok"} for i, (p, o) in enumerate(hashes.items())]


def _answered(entries: list[dict]) -> dict[str, dict]:
    return {e["prompt"]: e for e in entries if e.get("outcome", "ok") == "ok" and e.get("prompt")}


def _divergence(ea: dict, eb: dict, at: int) -> Divergence:
    ia, ib = ea.get("ids") or [], eb.get("ids") or []
    d = Divergence(
        prompt_index=ea.get("n", 0),
        prompt=ea["prompt"],
        token_index=at,
        a_id=ia[at] if at < len(ia) else None,
        b_id=ib[at] if at < len(ib) else None,
        concurrency=ea.get("concurrency"),
        repeat=ea.get("repeat"),
    )
    ta, tb = ea.get("tokens"), eb.get("tokens")
    # per-token text (OpenAI logprobs.tokens)
    if ta and tb and len(ta) == len(ia) and len(tb) == len(ib):
        d.a_token = ta[at] if at < len(ta) else None
        d.b_token = tb[at] if at < len(tb) else None
        d.before = "".join(ta[max(0, at - CONTEXT_TOKENS) : at])[-CONTEXT_CHARS:]
        d.a_after = "".join(ta[at : at + CONTEXT_TOKENS])[:CONTEXT_CHARS]
        d.b_after = "".join(tb[at : at + CONTEXT_TOKENS])[:CONTEXT_CHARS]
        return d
    xa, xb = ea.get("text"), eb.get("text")
    # whole texts: show where they part
    if isinstance(xa, str) and isinstance(xb, str):
        c = next((i for i, (p, q) in enumerate(zip(xa, xb, strict=False)) if p != q), min(len(xa), len(xb)))
        d.before = xa[max(0, c - CONTEXT_CHARS) : c]
        d.a_after, d.b_after = xa[c : c + CONTEXT_CHARS], xb[c : c + CONTEXT_CHARS]
    return d


def _cut(entries: list[dict], limit: int) -> list[dict]:
    out = []
    for e in entries:
        e = dict(e)
        for key in ("ids", "logprobs", "tokens"):
            if e.get(key) is not None:
                e[key] = e[key][:limit]
        out.append(e)
    return out


def compare_entries(
    a: list[dict],
    b: list[dict],
    tolerance: Tolerance | None = None,
    source: str = OUTPUTS_FILE,
    limit: int | None = None,
) -> OutputsVerdict:
    """Identity of B's outputs against A's, prompt by prompt (matched by the hash of their input ids);
    `limit`: compare only the first tokens (runs that asked for different output lengths)."""
    if limit:
        a, b = _cut(a, limit), _cut(b, limit)
    ma, mb = _answered(a), _answered(b)
    common = [p for p in sorted(ma, key=lambda p: ma[p].get("n", 0)) if p in mb]
    verdict = OutputsVerdict(
        compared=len(common),
        identical_prompts=0,
        only_a=len(set(ma) - set(mb)),
        only_b=len(set(mb) - set(ma)),
        tolerance=tolerance,
        source=source,
        limit=limit,
    )
    with_lp = [p for p in common if ma[p].get("logprobs") is not None and mb[p].get("logprobs") is not None]
    verdict.logprobs = bool(common) and len(with_lp) == len(common)
    diffs: list[float] = []
    for p in common:
        ea, eb = ma[p], mb[p]
        ia, ib = ea.get("ids"), eb.get("ids")
        # hashes only
        if ia is None or ib is None:
            same = ea.get("output") == eb.get("output")
            at = -1
        else:
            same = ia == ib
            at = next(
                (i for i, (x, y) in enumerate(zip(ia, ib, strict=False)) if x != y), min(len(ia), len(ib))
            )
        if same:
            verdict.identical_prompts += 1
        else:
            if verdict.first_divergence is None:
                verdict.first_divergence = (
                    _divergence(ea, eb, at)
                    if at >= 0
                    else Divergence(
                        ea.get("n", 0), p, -1, None, None, ea.get("concurrency"), ea.get("repeat")
                    )
                )
            if len(verdict.differing) < 20:
                verdict.differing.append(ea.get("n", 0))
        la, lb = ea.get("logprobs"), eb.get("logprobs")
        if la and lb and ia and ib and la[0] is not None and lb[0] is not None:
            verdict.first_token_compared += 1
            verdict.first_token_equal += ia[0] == ib[0] and la[0] == lb[0]
        if la is not None and lb is not None and ia is not None:
            upto = len(ia) if same else at
            if not same and at < min(len(la), len(lb)) and la[at] is not None and lb[at] is not None:
                gap = abs(la[at] - lb[at])
                verdict.divergence_gap = (
                    gap if verdict.divergence_gap is None else max(verdict.divergence_gap, gap)
                )
            for x, y in zip(la[:upto], lb[:upto], strict=False):
                if x is not None and y is not None:
                    diffs.append(abs(x - y))
    if with_lp:
        verdict.max_logprob_diff, verdict.logprob_tokens = max(diffs, default=0.0), len(diffs)
        verdict.median_logprob_diff = statistics.median(diffs) if diffs else None
    return verdict


def compare_outputs(a: Run, b: Run, tolerance: Tolerance | None = None) -> OutputsVerdict | None:
    """Identity of run B's outputs against baseline A; None when a side recorded no outputs."""
    ea, eb = load_outputs(a), load_outputs(b)
    source = OUTPUTS_FILE
    # fall back to the manifests' hashes: prompt by prompt, no token index
    if ea is None or eb is None:
        ea, eb = ea or _from_manifest(a), eb or _from_manifest(b)
        source = "manifest hashes"
        if ea is not None and eb is not None:
            ea = [{k: v for k, v in e.items() if k in ("n", "prompt", "output", "outcome")} for e in ea]
            eb = [{k: v for k, v in e.items() if k in ("n", "prompt", "output", "outcome")} for e in eb]
    if ea is None or eb is None:
        return None
    la, lb = ((r.doc.get("config") or {}).get("output_len") for r in (a, b))
    limit = min(la, lb) if la and lb and la != lb and source == OUTPUTS_FILE else None
    return compare_entries(ea, eb, tolerance, source, limit)


def summary(entries: list[dict], logprobs: bool, api: str) -> dict[str, Any]:
    """What the manifest keeps about a run's outputs: the file, and one output hash per prompt."""
    ok = [e for e in entries if e.get("outcome") == "ok" and e.get("ids") is not None]
    return {
        "file": OUTPUTS_FILE,
        "requests": len(entries),
        "with_ids": len(ok),
        "logprobs": logprobs,
        "api": api,
        "hash": "sha256 over the comma-joined ids, 16 hex digits",
        "hashes": {e["prompt"]: e["output"] for e in ok},
    }
