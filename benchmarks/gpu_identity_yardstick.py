"""How far apart the FP8 attention paths' outputs are, against a yardstick: the table of the GPU tier's
`inv play gpu-fp8-identity` (playbooks/gpu-fp8-identity.yaml) from its records.

    # DIR: what `scripts/gpu-tier.sh collect` brought back
    python3 benchmarks/gpu_identity_yardstick.py DIR

Per run against gather-cast (the baseline: bit-exact to stock FlashInfer by construction): prompts whose
greedy outputs are identical, where they part, the median and max |dlogprob| on the tokens chosen alike before
parting, the largest logprob gap between the two runs' own tokens at a divergence (a near tie when small), and
whether the first output token (the prefill's alone) is bit-equal on the prompts whose prefix the server had
cached (an extend over cached FP8 rows: FlashInfer's paged prefill, where each patch casts its plan's rows).
Then decode tok/s and TTFT per level, with the share of prompt tokens the server served from its prefix cache.
Every figure is read from the records; nothing is computed beyond medians and ratios of what they hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglops.bench.identity import OUTPUTS_FILE, OutputsVerdict, compare_entries  # noqa: E402

RUNS = (
    ("stock", "stock-bench", "FP8 pool, stock FlashInfer (whole-pool cast)"),
    ("native", "native-bench", "FP8 pool, fp8-mla-native (FP8 read in the kernel)"),
    ("bf16", "bf16-bench", "BF16 pool (no KV quantisation): the yardstick"),
)
BASE = "gather-bench"


def play_doc(art: Path) -> dict:
    for path in sorted(art.glob("*/*/play.json"), reverse=True):
        doc = json.loads(path.read_text())
        if doc.get("play") == "gpu-fp8-identity" and not doc.get("dry_run"):
            return doc
    raise SystemExit(f"no gpu-fp8-identity play record under {art}")


def run_dir(art: Path, play: dict, step: str) -> Path:
    s = next((s for s in play["steps"] if s["id"] == step), None)
    if s is None or not (s.get("result") or {}).get("run_id"):
        raise SystemExit(f"step {step} recorded no run")
    found = sorted(art.glob(f"*/{s['result']['run_id']}"))
    if not found:
        raise SystemExit(f"run {s['result']['run_id']} of step {step} is not under {art}")
    return found[0]


def entries(run: Path) -> list[dict]:
    return json.loads((run / OUTPUTS_FILE).read_text())["requests"]


def cached(reqs: list[dict]) -> list[dict]:
    """The requests the server answered from a cached prefix (its paged prefill over cached FP8 rows)."""
    return [e for e in reqs if (e.get("cached_tokens") or 0) > 0]


def first_tokens(v: OutputsVerdict) -> str:
    return f"{v.first_token_equal}/{v.first_token_compared}" if v.first_token_compared else "-"


def row(name: str, what: str, v: OutputsVerdict, prefill: str) -> str:
    d = v.first_divergence
    parted = f"{v.compared - v.identical_prompts}/{v.compared}"
    first = f"token {d.token_index}" if d and d.token_index >= 0 else "-"
    med = f"{v.median_logprob_diff:.3g}" if v.median_logprob_diff is not None else "-"
    mx = f"{v.max_logprob_diff:.3g}" if v.max_logprob_diff is not None else "-"
    gap = f"{v.divergence_gap:.3g}" if v.divergence_gap is not None else "-"
    return (
        f"| {name} | {what} | {parted} | {first} | {med} | {mx} ({v.logprob_tokens} tokens) | {gap} |"
        f" {prefill} |"
    )


def levels(run: Path) -> dict[int, dict]:
    doc = json.loads((run / "bench.json").read_text())
    return {lv["concurrency"]: lv for lv in doc["levels"]}


def markdown(root: Path) -> str:
    art = root / "artifacts" if (root / "artifacts").is_dir() else root
    play = play_doc(art)
    runs = {step: run_dir(art, play, step) for step in (BASE, *(step for _, step, _ in RUNS))}
    outputs = {step: entries(run) for step, run in runs.items()}
    base = outputs[BASE]
    out = [
        (
            "| run vs gather-cast | pool / path | prompts parted | first parting | median \\|dlogprob\\| |"
            " max \\|dlogprob\\| | gap at a parting | first token bit-equal (cached prefix) |"
        ),
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for name, step, what in RUNS:
        # prompts cached on both servers
        on_cached = compare_entries(cached(base), cached(outputs[step]))
        out.append(row(name, what, compare_entries(base, outputs[step]), first_tokens(on_cached)))
    out += [
        "",
        "| run | C | decode tok/s | TTFT median ms | prompt tokens from the prefix cache |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, step in (("gather", BASE), *((n, s) for n, s, _ in RUNS)):
        for c, lv in sorted(levels(runs[step]).items()):
            out.append(
                f"| {name} | {c} | {lv['decode_tok_s']['median']:.1f} | "
                f"{lv['ttft_ms']['median']:.2f} | {lv['prompt'].get('cached_share', 0):.0%} |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 benchmarks/gpu_identity_yardstick.py DIR")
    print(markdown(Path(sys.argv[1])))
