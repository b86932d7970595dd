"""The draft-length rules (D = 128/G - 1, the 128-row tile ladder) turned into integers a user can set,
and the KV-cache cost a draft length adds.

    G          = query heads per KV head
    D_suggested = floor(128 / G) - 1        the largest D with G x (1 + D) <= 128: one 128-row tile
    ladder     = D with G x (1 + D) a multiple of 128, i.e. 1 + D a multiple of 128 / gcd(G, 128)
    rung k     = floor(128 k / G) - 1       the largest D whose verify pass fits k tiles; the rungs
                                            that fill their tiles exactly are the ladder
    KV bytes per sequence = 2 (K and V) x KV heads x head size x dtype bytes
                            x [full layers x (context + D) + sliding layers x (min(context, window) + D)]

Pure arithmetic on config facts (plain dicts, the keys of `backend.core.models.config_facts`); knows
nothing about models, measurements, the store or the UI.
"""

from __future__ import annotations

import math
from fractions import Fraction

from backend.lab.analysis import TILE, d_ladder, d_start

LADDER_CAP = 64  # the ladder lists D up to this; larger D are far beyond what engines verify per step
RUNGS_SHOWN = 4
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
GIB = 2**30


def heads_problem(heads: int, kv_heads: int) -> str | None:
    """One sentence on what is wrong with a (query heads, KV heads) pair, or None when it is valid."""
    if heads < 1 or kv_heads < 1:
        return "Query heads and KV heads must both be at least 1."
    if kv_heads > heads:
        return f"{kv_heads} KV heads is more than the {heads} query heads: each KV head serves one or more query heads."
    if heads % kv_heads:
        return (
            f"{heads} query heads cannot be shared evenly by {kv_heads} KV heads: "
            "in grouped-query attention the KV heads divide the query heads."
        )
    return None


def suggested_d(heads: int, kv_heads: int) -> int:
    """D = 128/G - 1 rounded down, so that G x (1 + D) <= 128 (at least 0)."""
    return max(TILE * kv_heads // heads - 1, 0)


def tile_step(heads: int, kv_heads: int) -> int:
    """The smallest n with G x n a multiple of 128: 1 + D must be a multiple of it to fill whole tiles
    (128 / gcd(G, 128) for a whole G)."""
    return Fraction(TILE * kv_heads, heads).numerator


def tile_rungs(heads: int, kv_heads: int, count: int = RUNGS_SHOWN) -> list[dict]:
    """The first `count` rungs: for k = 1, 2, ... the largest D whose 1 + D verify rows per KV head
    (G x (1 + D) attention rows) fit k tiles, with the share of those tiles' rows they use."""
    rungs: list[dict] = []
    k = 1
    while len(rungs) < count:
        d = TILE * k * kv_heads // heads - 1
        k += 1
        if d < 0 or any(r["D"] == d for r in rungs):
            continue
        rows = heads * (1 + d) // kv_heads
        tiles = math.ceil(rows / TILE)
        rungs.append({"D": d, "rows": rows, "tiles": tiles, "fill": rows / (TILE * tiles)})
    return rungs


def ladder_note(heads: int, kv_heads: int, cap: int = LADDER_CAP) -> str | None:
    """Why the ladder is empty up to `cap` (None when it is not)."""
    if d_ladder(heads, kv_heads, cap):
        return None
    step = tile_step(heads, kv_heads)
    g = Fraction(heads, kv_heads)
    return (
        f"With G = {g}, G × (1 + D) is a multiple of 128 only when 1 + D is a multiple of {step}, "
        f"so the first D that fills whole tiles is {step - 1}, beyond the cap of {cap}; "
        "the rungs below are the nearest widths, each filling its last tile almost fully."
    )


def draft_rules(heads: int, kv_heads: int, cap: int = LADDER_CAP) -> dict:
    """Everything the rules say for one (query heads, KV heads) pair, as plain JSON-able values."""
    d = suggested_d(heads, kv_heads)
    g = heads / kv_heads
    if g >= TILE:
        rounding = f"one token already fills {g / TILE:g} tiles (G ≥ 128), so the rule suggests no drafts"
    else:
        rounding = f"rounded down so that G × (1 + D) = {g * (1 + d):g} ≤ 128: the verify pass fits one 128-row tile"
    return {
        "G": g,
        "d_start": d_start(heads, kv_heads),
        "d_suggested": d,
        "rounding": rounding,
        "tile_step": tile_step(heads, kv_heads),
        "d_ladder": d_ladder(heads, kv_heads, cap),
        "ladder_cap": cap,
        "ladder_note": ladder_note(heads, kv_heads, cap),
        "rungs": tile_rungs(heads, kv_heads),
    }


def kv_bytes_per_sequence(facts: dict, context: int, draft_len: int, dtype_bytes: int) -> int:
    """KV-cache bytes one sequence holds at its peak: the keys and values of `context` tokens plus the D
    draft tokens written during a verify pass (kept until rejected ones are dropped). A sliding-window
    layer keeps only its last `sliding_window` tokens plus the D drafts. Leaves out the drafter's own
    cache, paging block rounding, activations and weights."""
    per_slot = 2 * facts["num_key_value_heads"] * facts["head_dim"] * dtype_bytes  # K and V, one layer, one token
    sliding = facts.get("sliding_layers") or 0
    window = facts.get("sliding_window") or context
    full = facts["num_layers"] - sliding
    return per_slot * (full * (context + draft_len) + sliding * (min(context, window) + draft_len))


def kv_cost(facts: dict, context: int, dtype: str, budget_gib: float, lengths: list[int]) -> list[dict]:
    """For each D: bytes per sequence, how many whole sequences fit `budget_gib` of KV cache, and the
    change in that count against D = 0."""
    budget = int(budget_gib * GIB)
    plain = kv_bytes_per_sequence(facts, context, 0, DTYPE_BYTES[dtype])
    rows = []
    for d in lengths:
        size = kv_bytes_per_sequence(facts, context, d, DTYPE_BYTES[dtype])
        fit = budget // size
        rows.append(
            {
                "D": d,
                "bytes_per_sequence": size,
                "sequences": fit,
                "vs_plain": fit / (budget // plain) - 1 if budget >= plain else 0.0,
            }
        )
    return rows


def kv_lengths(rules: dict) -> list[int]:
    """The D values the KV-cost table shows: plain decoding, then the rules' rungs."""
    return sorted({0, *(r["D"] for r in rules["rungs"])})
