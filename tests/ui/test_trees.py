"""A token-tree step as the dashboard shows it, on a hand-made tree: each node's fate, the branches
listed for the fan's hover, the inline rendering (kept path, rejected alternatives, correction or
bonus) and the figure's layout and colours."""

from __future__ import annotations

import re

from ui.tokens import step_html
from ui.trees import BONUS, CORRECTION, KEPT, _layout, branches, branches_text, node_fates, tree_figure

# root ─ a(0) ─ b(1) ─ d(4)
#      │      └ c(2)
#      └ x(3)
STEP = {
    "index": 7,
    "parents": [-1, 0, 0, -1, 1],
    "drafted_text": ["a", "b", "c", "x", "d"],
    "draft_probs": None,
    "target_probs": [0.9, 0.8, 0.1, 0.05, 0.2],
    "accepted": 2,
    "accepted_path": [0, 1],
    "emitted": [10, 11, 12],
    "emitted_text": ["a", "b", "e"],
    "target_text": "e",
    "target_token_prob": 0.6,
}
BONUS_STEP = {**STEP, "accepted": 3, "accepted_path": [0, 1, 4], "emitted": [10, 11, 13, 12]}


def spans(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<span class="([^"]+)" title="[^"]*">([^<]*)</span>', html)


def test_fates_and_branches():
    assert node_fates(STEP) == ["kept", "kept", "rejected", "rejected", "rejected"]
    assert node_fates({**STEP, "accepted": 0, "accepted_path": []}) == [
        "rejected",
        "unreached",
        "unreached",
        "rejected",
        "unreached",
    ]
    assert branches(STEP) == [[0, 2], [3], [0, 1, 4]]
    text = branches_text(STEP)
    assert text.splitlines() == [
        "token tree: 5 nodes, depth 3, 3 branches, 2 kept",
        "✓ 'a' · 'c'",
        "✗ 'x'",
        "✓ 'a' · 'b' · 'd'",
    ]


def test_the_kept_path_then_the_rejected_alternative_then_the_correction_then_the_fan():
    assert spans(step_html(STEP)) == [
        ("ss-acc", "a"),
        ("ss-acc", "b"),
        ("ss-rej", "d"),
        ("ss-tgt ss-fix", "e"),
        ("ss-fan", "⋔5"),
    ]
    assert spans(step_html(BONUS_STEP)) == [
        ("ss-acc", "a"),
        ("ss-acc", "b"),
        ("ss-acc", "d"),
        ("ss-tgt ss-bonus", "e"),
        ("ss-fan", "⋔5"),
    ]


def test_a_step_cut_at_a_stop_shows_only_what_it_emitted():
    cut = {**STEP, "emitted": [10], "emitted_text": ["a"]}
    assert [css for css, _ in spans(step_html(cut))] == ["ss-acc", "ss-fan"]


def test_leaves_are_spread_and_parents_sit_between_their_children():
    assert _layout(STEP["parents"]) == {4: 0.0, 1: 0.0, 2: 1.0, 0: 0.5, 3: 2.0, -1: 1.25}


def test_the_figure_colours_the_kept_path_and_puts_the_target_token_after_it():
    figure = tree_figure(STEP)
    by_name = {trace.name: trace for trace in figure.data if trace.name}
    kept = by_name["kept draft"]
    assert list(kept.x) == [1, 2] and list(kept.text) == ["a", "b"] and kept.marker.color == KEPT
    assert list(by_name["rejected draft"].text) == ["c", "x", "d"]
    correction = by_name["target's correction"]
    assert list(correction.x) == [3] and correction.marker.color == CORRECTION
    assert tree_figure(BONUS_STEP).data[-2].marker.color == BONUS
