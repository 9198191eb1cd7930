"""Which CUDA kernel the package launches, per GPU family, head count and batch.

Why a module of its own: it imports nothing, so a script without torch or a GPU (benchmarks/fp8_mla_table.py,
which derives the table of record from a run) applies the same rule by loading this file alone.
"""

from __future__ import annotations

from collections.abc import Mapping

# per family and head class. H200 (2026-12-04, benchmarks/results/fp8-mla-round9-2026-12-04/,
# benchmarks/fp8_mla_table.py): round 7's 64-row, one-barrier, lazy-rescale kernel at 2 CTAs per SM with each
# warp's softmax on its own 16 rows of a tile and P exchanged through shared memory (XCH 2: 927 static
# instructions per tile instead of 1,201; MUFU 35 ->
# 11) - 5-9% faster than round 7's pick at the >= 1M-row 16-head cells (80-85% of copy there) and 4-14% at 128
# heads; round 7 (2026-12-03 night): 64-row tiles beat the 32-row 3-CTA kernels at every 16-head cell (1-10%).
# sm_120 has ~100 KB of shared memory per SM: two-stage 32-row rings (48 KB per CTA) so that two CTAs fit,
# registers uncapped for two (the three-CTA cap spills 8 bytes there); not timed on an SM120 GPU.
DEFAULT = {
    "sm90": {16: "n64_s2_b2_1b_lz_x2", 128: "n64_s2_b2_1b_lz_x2"},
    "sm120": {16: "n32_s2_b2_tma4", 128: "n32_s2_b2_tma4"},
}
# the .cu compiles these always
SHIPPED = frozenset(name for family in DEFAULT.values() for name in family.values())
# 128 heads at batches up to this take the 16-head pick
SMALL_BATCH = 16


def kernel_name(
    heads: int, family: str, batch: int | None = None, picks: Mapping[int, str] | None = None
) -> str:
    """The kernel for `heads` query heads per GPU: the 16-head pick up to 16 heads, and at more heads for
    batches up to SMALL_BATCH (where it is faster); the 128-head pick otherwise. `picks` replaces the family's
    DEFAULT."""
    chosen = DEFAULT[family] if picks is None else picks
    small = heads <= 16 or (batch is not None and batch <= SMALL_BATCH)
    return chosen[16 if small else 128]


# H200 (BENCH.md v0.4, benchmarks/fp8_mla_table.py): (f)/(c) 0.28-0.87 at every 16-head cell; at 128 heads
# 1.10-2.47 at every cell but 4K x bs 1 (0.93), the kernel MMA-bound there (each 16-head block converts every
# tile again)
NATIVE_MAX_HEADS = 16


def beats_gather_cast(heads: int) -> bool:
    """Whether this kernel is the faster decode for `heads` query heads per GPU than gather-cast +
    FlashInfer's BF16 kernel (the patch then runs gather-cast's live-row cast instead: never slower than
    gather-cast)."""
    return heads <= NATIVE_MAX_HEADS
