"""Bootstrap CIs, the Pareto frontier, interpolation and the draft-length rules against hand-worked cases."""

import pytest

from backend.lab.analysis import (
    acceptance_groups,
    bootstrap_al_ci,
    d_ladder,
    d_start,
    interpolate,
    matched_interactivity,
    newest_per_config,
    paired_gain_ci,
    pareto_frontier,
    predicted_speedup,
    recommended_d,
)


def test_bootstrap_of_two_prompts_spans_their_own_als():
    # prompt A: 4 accepted over 2 drafting steps (AL 3); prompt B: 0 over 2 (AL 1); pooled AL 2.
    # Resampling two prompts gives AA (AL 3), AB/BA (AL 2) or BB (AL 1), each AA/BB with probability
    # 1/4, so the 2.5% and 97.5% percentiles are exactly 1 and 3.
    al, low, high = bootstrap_al_ci([(4, 2), (0, 2)], resamples=4000)
    assert (al, low, high) == (pytest.approx(2.0), pytest.approx(1.0), pytest.approx(3.0))


def test_bootstrap_of_identical_prompts_has_no_width_and_skips_empty_ones():
    assert bootstrap_al_ci([(3, 2), (3, 2), (3, 2), (0, 0)]) == (2.5, 2.5, 2.5)
    assert bootstrap_al_ci([(0, 0)]) == (1.0, 1.0, 1.0)


def test_bootstrap_narrows_with_more_prompts():
    few = bootstrap_al_ci([(4, 2), (0, 2)] * 2)
    many = bootstrap_al_ci([(4, 2), (0, 2)] * 50)
    assert few[2] - few[1] > many[2] - many[1] > 0


def test_paired_gain_of_two_prompts_spans_their_own_gains():
    # gains +0.4 and -0.2: resampling two pairs gives means +0.4, +0.1 or -0.2, the ends each with
    # probability 1/4, so the 2.5% and 97.5% percentiles are exactly -0.2 and +0.4.
    gain, low, high = paired_gain_ci([1.8, 1.2], [1.4, 1.4], resamples=4000)
    assert (gain, low, high) == (pytest.approx(0.1), pytest.approx(-0.2), pytest.approx(0.4))


def test_paired_gain_ignores_what_the_pairs_share():
    """Prompts of very different ALs, each improved by 0.05: the CI has no width (unpaired, it would span ~2)."""
    old = [1.1, 3.0, 1.5, 2.2]
    assert paired_gain_ci([a + 0.05 for a in old], old) == pytest.approx((0.05, 0.05, 0.05))
    with pytest.raises(ValueError):
        paired_gain_ci([], [])


def point(x, y, name="p"):
    return {"interactivity_tps": x, "throughput_tps": y, "name": name}


def test_pareto_frontier_keeps_the_undominated_points_in_order():
    points = [
        point(10, 100, "a"),
        point(20, 80, "b"),
        point(15, 70, "c"),
        point(30, 40, "d"),
        point(20, 80, "e"),
        point(5, 100, "f"),
    ]
    # c is beaten by b; f by a (same throughput, less interactivity); b and e tie and both stay
    assert [p["name"] for p in pareto_frontier(points)] == ["a", "b", "e", "d"]


def test_pareto_frontier_leaves_out_points_missing_a_figure():
    points = [{"interactivity_tps": None, "throughput_tps": 50.0}, {"interactivity_tps": 3.0, "throughput_tps": 9.0}]
    assert pareto_frontier(points) == [points[1]]


def test_interpolation():
    curve = [(10.0, 100.0), (30.0, 40.0), (20.0, 80.0)]
    assert interpolate(curve, 15.0) == pytest.approx(90.0)
    assert interpolate(curve, 25.0) == pytest.approx(60.0)
    assert interpolate(curve, 30.0) == pytest.approx(40.0)
    assert interpolate(curve, 5.0) is None and interpolate(curve, 31.0) is None


def test_matched_interactivity_compares_the_frontiers_where_both_exist():
    off = [point(10, 100), point(30, 40)]
    on = [point(20, 120), point(40, 60)]
    rows = matched_interactivity(off, on, levels=3)
    assert [r["interactivity_tps"] for r in rows] == pytest.approx([20, 25, 30])
    # off at 20: 100 + (40-100) * 10/20 = 70; on at 20: 120 -> gain 120/70
    assert rows[0]["throughput_off"] == pytest.approx(70) and rows[0]["gain"] == pytest.approx(120 / 70)
    assert rows[-1]["throughput_on"] == pytest.approx(120 + (60 - 120) * 10 / 20)
    assert matched_interactivity(off, [point(50, 10)]) == []


def test_draft_length_rules():
    assert d_start(9, 3) == pytest.approx(128 / 3 - 1)  # SmolLM2-135M: G = 3
    assert d_ladder(9, 3) == []  # 3 x (1 + D) is a multiple of 128 only at D = 127
    assert d_start(4, 1) == 31 and d_ladder(4, 1) == [31, 63]  # Gemma-3-270M: G = 4
    assert d_ladder(32, 8) == [31, 63]
    assert d_ladder(64, 8) == [15, 31, 47, 63]  # G = 8
    assert predicted_speedup(al=3.0, rho=0.1, draft_len=5) == pytest.approx(2.0)


def test_recommended_d_is_the_fastest_per_batch_size():
    points = [
        {"batch_size": b, "draft_len": d, "throughput_tps": t}
        for b, d, t in ((1, 0, 10), (1, 4, 14), (8, 0, 50), (8, 4, 45))
    ]
    assert recommended_d(points) == {1: "4", 8: "0"}


def test_acceptance_groups_by_hand():
    # run A: two steps of D=2 accepting 2 then 0; run B: one step accepting 1
    runs = [
        {"drafter": "ngram", "draft_len": "2", "category": "chat", "accepted": 2, "steps": 2, "drafted": 4},
        {"drafter": "ngram", "draft_len": "2", "category": "chat", "accepted": 1, "steps": 1, "drafted": 2},
    ]
    runs = [{**row, "base_drafter": "ngram", "tree_budget": 0} for row in runs]
    histogram = [
        {"drafter": "ngram", "draft_len": "2", "category": "chat", "accepted": j, "steps": 1} for j in range(3)
    ]
    positions = [
        {"drafter": "ngram", "draft_len": "2", "category": "chat", "position": 1, "reached": 3, "accepted": 2},
        {"drafter": "ngram", "draft_len": "2", "category": "chat", "position": 2, "reached": 2, "accepted": 1},
    ]
    [group] = acceptance_groups(runs, histogram, positions)
    assert group["runs"] == 2 and group["drafting_steps"] == 3 and group["histogram"] == [1, 1, 1]
    assert (group["base_drafter"], group["tree_budget"]) == ("ngram", 0)
    assert group["al"] == pytest.approx(2.0)  # 1 + 3 accepted / 3 steps
    assert group["acceptance_rate"] == pytest.approx(3 / 6)
    assert group["survival"] == pytest.approx([2 / 3, 1 / 3])
    assert group["conditional"] == pytest.approx([2 / 3, 1 / 2])
    assert group["al_ci_low"] <= 2.0 <= group["al_ci_high"]


def test_newest_per_config_keeps_the_first_of_each():
    points = [
        {"drafter": "ngram", "draft_len": 4, "batch_size": 1, "sweep": "new"},
        {"drafter": "ngram", "draft_len": "4", "batch_size": 1, "sweep": "old"},
        {"drafter": "ngram", "draft_len": "4", "batch_size": 2, "sweep": "old"},
    ]
    assert [p["sweep"] for p in newest_per_config(points)] == ["new", "old"]


def test_newest_per_config_keeps_the_newest_points_path_only():
    """A compiled drafter point must not meet an eager baseline from another sweep."""
    points = [
        {"drafter": "ngram", "draft_len": 4, "batch_size": 1, "compile": "on", "sweep": "new"},
        {"drafter": "none", "draft_len": 0, "batch_size": 1, "compile": "off", "sweep": "old"},
        {"drafter": "none", "draft_len": 0, "batch_size": 1, "compile": "on", "sweep": "older"},
    ]
    assert [p["sweep"] for p in newest_per_config(points)] == ["new", "older"]
