"""The draft-length rules as whole numbers (D rounded down so that G x (1 + D) <= 128, the ladder and its
rungs, why a ladder is empty) and the KV-cache cost of D, on architectures whose numbers are worked by hand."""

from __future__ import annotations

import pytest

from backend.lab.architectures import ARCHITECTURES
from backend.lab.draft_rules import (
    GIB,
    draft_rules,
    heads_problem,
    kv_bytes_per_sequence,
    kv_cost,
    kv_lengths,
    suggested_d,
    tile_step,
)


@pytest.mark.parametrize("g", range(1, 129))
def test_suggested_d_is_the_largest_d_that_fits_one_tile(g):
    d = suggested_d(g * 2, 2)
    assert g * (1 + d) <= 128 < g * (2 + d)


def test_suggested_d_of_known_shapes():
    assert suggested_d(9, 3) == 41  # SmolLM2-135M: 3 x 42 = 126 rows, 128/3 - 1 = 41.67
    assert suggested_d(64, 8) == 15 and suggested_d(32, 8) == 31 and suggested_d(32, 16) == 63
    assert suggested_d(256, 1) == 0  # a single token already fills two tiles


def test_ladder_for_eight_query_heads_per_kv_head():
    rules = draft_rules(64, 8)
    assert rules["G"] == 8 and rules["d_suggested"] == 15
    assert rules["d_ladder"] == [15, 31, 47, 63] and rules["ladder_note"] is None
    assert [r["D"] for r in rules["rungs"]] == [15, 31, 47, 63]
    assert all(r["fill"] == 1.0 and r["rows"] == 128 * r["tiles"] for r in rules["rungs"])
    assert "G × (1 + D) = 128 ≤ 128" in rules["rounding"]


def test_an_empty_ladder_is_explained_with_the_nearest_widths():
    rules = draft_rules(9, 3)  # G = 3 shares no factor with 128
    assert rules["d_ladder"] == [] and rules["d_suggested"] == 41 and rules["tile_step"] == 128
    note = rules["ladder_note"]
    assert "multiple of 128" in note and "127" in note and "cap of 64" in note
    rungs = {r["D"]: r for r in rules["rungs"]}
    assert list(rungs) == [41, 84, 127, 169]
    assert rungs[41]["rows"] == 126 and rungs[41]["fill"] == pytest.approx(126 / 128)
    assert rungs[127]["fill"] == 1.0 and rungs[84]["tiles"] == 2
    assert "G × (1 + D) = 126 ≤ 128" in rules["rounding"]


@pytest.mark.parametrize(("heads", "kv", "step"), [(12, 1, 32), (9, 3, 128), (8, 4, 64), (16, 1, 8), (5, 5, 128)])
def test_tile_step_is_128_over_gcd(heads, kv, step):
    assert tile_step(heads, kv) == step
    g = heads // kv
    assert all((g * (1 + d)) % 128 == 0 for d in draft_rules(heads, kv, cap=4 * step)["d_ladder"])
    assert draft_rules(heads, kv, cap=4 * step)["d_ladder"][0] == step - 1


def test_rungs_reach_the_ladder_when_g_shares_some_factors_with_128():
    rungs = draft_rules(96, 8)["rungs"]  # G = 12: 1 + D must be a multiple of 32
    assert [r["D"] for r in rungs] == [9, 20, 31, 41]
    assert [r["fill"] == 1.0 for r in rungs] == [False, False, True, False]


@pytest.mark.parametrize(
    ("heads", "kv", "words"),
    [(64, 6, "divide"), (8, 16, "more than"), (0, 1, "at least 1"), (8, 0, "at least 1")],
)
def test_bad_head_counts_get_one_sentence(heads, kv, words):
    assert words in heads_problem(heads, kv)


def test_good_head_counts_pass():
    assert heads_problem(64, 8) is None and heads_problem(9, 3) is None and heads_problem(1, 1) is None


def test_kv_bytes_of_a_full_attention_model():
    llama = ARCHITECTURES["Llama-3.1-8B"].facts()
    # 2 x 8 KV heads x 128 x 2 bytes x 32 layers = 128 KiB per token; 8192 tokens = 1 GiB
    assert kv_bytes_per_sequence(llama, 8192, 0, 2) == GIB
    assert kv_bytes_per_sequence(llama, 8192, 15, 2) - GIB == 15 * 128 * 1024
    assert kv_bytes_per_sequence(llama, 8192, 0, 1) == GIB // 2  # fp8


def test_kv_bytes_with_sliding_window_layers():
    oss = ARCHITECTURES["gpt-oss-120b"].facts()  # 18 full + 18 sliding (128) layers, 8 KV heads of 64
    per_token_layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_sequence(oss, 4096, 3, 2) == per_token_layer * (18 * (4096 + 3) + 18 * (128 + 3))
    short = kv_bytes_per_sequence(oss, 100, 0, 2)  # shorter than the window: every layer holds all 100
    assert short == per_token_layer * 36 * 100


def test_sequences_that_fit_a_budget_at_each_d():
    llama = ARCHITECTURES["Llama-3.1-8B"].facts()
    rows = {r["D"]: r for r in kv_cost(llama, 8192, "bf16", 40, kv_lengths(draft_rules(32, 8)))}
    assert list(rows) == [0, 31, 63, 95, 127]
    assert rows[0]["sequences"] == 40 and rows[0]["vs_plain"] == 0
    assert rows[31]["sequences"] == 39 and rows[31]["vs_plain"] == pytest.approx(-1 / 40)
    assert rows[127]["bytes_per_sequence"] == GIB + 127 * 128 * 1024


def test_a_budget_smaller_than_one_sequence_fits_none():
    rows = kv_cost(ARCHITECTURES["Llama-3.1-70B"].facts(), 131072, "fp32", 1, [0, 15])
    assert [r["sequences"] for r in rows] == [0, 0] and rows[1]["vs_plain"] == 0
