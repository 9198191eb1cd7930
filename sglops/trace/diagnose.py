"""Diagnosis rules: name the bottleneck in plain words, with its share and the next thing to try.

Rules are data (playbooks/diagnosis.yaml) so a new pattern is a new entry, not new code; the
metrics they can use are the small functions in METRICS.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sglops.core import paths
from sglops.core.errors import ConfigError
from sglops.core.yamlio import check_fields, load_yaml

RULES_PATH = paths.shipped("playbooks/diagnosis.yaml")
FIELDS = {"id", "what", "metric", "op", "kernel", "graph_kernel", "min_share", "try"}
# what {op} says for kernels a graph replay launched (no aten op of their own)
GRAPH_REPLAY = "CUDA graph replay"


@dataclass
class Rule:
    id: str
    what: str
    min_share: float
    metric: str = "kernel_share"
    op: re.Pattern | None = None
    kernel: re.Pattern | None = None
    graph_kernel: re.Pattern | None = None
    try_next: list[str] = field(default_factory=list)


@dataclass
class Finding:
    """One named bottleneck; `message` is the sentence a person reads."""

    rule: str
    share: float
    message: str
    try_next: list[str]
    top_op: str | None = None
    top_kernel: str | None = None

    def to_json(self) -> dict:
        return {**asdict(self), "share": round(self.share, 4)}


def load_rules(path: str | Path = RULES_PATH) -> list[Rule]:
    """Read and check the rules file; mistakes are ConfigErrors naming file:line."""
    try:
        stamp = Path(path).stat().st_mtime_ns
    except OSError:
        stamp = None
    return _load_rules(str(path), stamp)


@functools.lru_cache(maxsize=8)
def _load_rules(path: str, _stamp: int | None) -> list[Rule]:
    """Cached per (file, mtime): an edit to the rules file is picked up on the next analysis."""
    doc = load_yaml(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rules"), list):
        raise ConfigError(f"{path}: expected a mapping with a 'rules' list")
    rules = []
    for entry in doc["rules"]:
        check_fields(entry, FIELDS, "diagnosis rule", required={"id", "what", "min_share"})
        where = getattr(entry, "where", str(path))
        metric = entry.get("metric", "kernel_share")
        if metric not in METRICS:
            raise ConfigError(f"{where}: unknown metric {metric!r} (known: {', '.join(METRICS)})")
        try:
            op = re.compile(entry["op"]) if entry.get("op") else None
            kernel = re.compile(entry["kernel"]) if entry.get("kernel") else None
            graph_kernel = re.compile(entry["graph_kernel"]) if entry.get("graph_kernel") else None
        except re.error as exc:
            raise ConfigError(f"{where}: bad regex in rule {entry['id']}: {exc}") from None
        if metric == "kernel_share" and not (op or kernel):
            raise ConfigError(f"{where}: rule {entry['id']} needs an op or kernel regex")
        rules.append(
            Rule(
                id=str(entry["id"]),
                what=str(entry["what"]),
                min_share=float(entry["min_share"]),
                metric=metric,
                op=op,
                kernel=kernel,
                graph_kernel=graph_kernel,
                try_next=[str(t) for t in entry.get("try") or []],
            )
        )
    return rules


# rules read this much of a name: real kernel names are < 2 KB; a 60 MB one is not scanned whole
MATCH_CAP = 8192


def _kernel_share(rule: Rule, facts: dict) -> tuple[float, str | None, str | None]:
    pairs: dict[tuple[str, str], float] = facts["op_kernel"]
    total = facts["scope_gpu_us"]
    by_op: dict[str, float] = {}
    by_kernel: dict[str, float] = {}
    for (op, kernel), us in pairs.items():
        if rule.op is None or rule.op.search(op[:MATCH_CAP]):
            if rule.kernel and not rule.kernel.search(kernel[:MATCH_CAP]):
                continue
        elif (
            rule.graph_kernel and not op.startswith("aten::") and rule.graph_kernel.search(kernel[:MATCH_CAP])
        ):
            # replayed from a CUDA graph: no aten op to match, the kernel alone says what it is
            op = GRAPH_REPLAY
        else:
            continue
        by_op[op] = by_op.get(op, 0.0) + us
        by_kernel[kernel] = by_kernel.get(kernel, 0.0) + us
    if not by_op or total <= 0:
        return 0.0, None, None
    return (sum(by_op.values()) / total, max(by_op, key=by_op.get), max(by_kernel, key=by_kernel.get))


def _idle_share(rule: Rule, facts: dict) -> tuple[float, str | None, str | None]:
    window = facts["window_us"]
    return (facts["idle_us"] / window if window > 0 else 0.0), None, None


METRICS: dict[str, Callable[[Rule, dict], tuple[float, str | None, str | None]]] = {
    "kernel_share": _kernel_share,
    "idle_share": _idle_share,
}


def diagnose(facts: dict, rules: list[Rule], short: Callable[[str], str]) -> list[Finding]:
    """Evaluate every rule on the summed facts; findings come biggest share first.

    facts: op_kernel {(innermost op, kernel): us} in scope, scope_gpu_us, scope_label,
    window_us, idle_us.
    """
    found = []
    for rule in rules:
        share, op, kernel = METRICS[rule.metric](rule, facts)
        if share < rule.min_share:
            continue
        what = rule.what.format(op=op or "?", kernel=short(kernel) if kernel else "?")
        if rule.metric == "idle_share":
            message = f"{what}: the GPU is idle {share:.0%} of the profiled window"
        else:
            message = f"{what} takes {share:.0%} of GPU time {facts['scope_label']}"
        found.append(
            Finding(
                rule=rule.id,
                share=share,
                message=message,
                try_next=rule.try_next,
                top_op=op,
                top_kernel=kernel,
            )
        )
    return sorted(found, key=lambda f: -f.share)
