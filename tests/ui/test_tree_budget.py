"""The AL-vs-tree-budget figure: which acceptance groups make its lines and how they are drawn."""

from __future__ import annotations

import pytest

from ui import run_status, tree_budget
from ui.charts import drafter_colour


def group(drafter: str, base: str, budget: int, draft_len: str = "4", al: float = 2.0) -> dict:
    return {
        "drafter": drafter,
        "base_drafter": base,
        "tree_budget": budget,
        "draft_len": draft_len,
        "al": al,
        "al_ci_low": al - 0.1,
        "al_ci_high": al + 0.2,
    }


def test_lines_are_drafters_and_ds_with_a_tree_their_chain_included():
    groups = [
        group("ngram", "ngram", 0, al=1.5),
        group("ngram [tree=8]", "ngram", 8, al=1.9),
        group("ngram [tree=16]", "ngram", 16, al=2.2),
        group("ngram [T=0.7, tree=16]", "ngram", 16),  # varied its temperature too
        group("ngram", "ngram", 0, draft_len="8"),  # no tree at D=8
        group("suffix", "suffix", 0),  # no tree at all
        group("suffix [tree=8]", "suffix", 8, draft_len="auto"),
    ]
    picked = tree_budget.groups_by_budget(groups)
    assert [(g["drafter"], g["draft_len"]) for g in picked] == [
        ("ngram", "4"),
        ("ngram [tree=8]", "4"),
        ("ngram [tree=16]", "4"),
        ("suffix [tree=8]", "auto"),
    ]
    figure = tree_budget.al_figure(picked)
    lines = {trace.name: trace for trace in figure.data}
    assert set(lines) == {"ngram D=4", "suffix D=auto"}
    assert list(lines["ngram D=4"].x) == [0, 8, 16] and list(lines["ngram D=4"].y) == [1.5, 1.9, 2.2]
    assert list(lines["ngram D=4"].error_y.array) == pytest.approx([0.2, 0.2, 0.2])
    assert lines["ngram D=4"].line.color == drafter_colour("ngram")
    assert lines["suffix D=auto"].line.color == drafter_colour("suffix")
    assert list(figure.layout.xaxis.tickvals) == [0, 8, 16]


def test_a_second_d_of_one_drafter_is_dashed():
    groups = [group("ngram", "ngram", 0, d) for d in ("2", "4")] + [
        group("ngram [tree=8]", "ngram", 8, d) for d in ("2", "4")
    ]
    dashes = [trace.line.dash for trace in tree_budget.al_figure(tree_budget.groups_by_budget(groups)).data]
    assert dashes == ["solid", "dash"]


def test_a_lane_is_named_with_its_tree_budget():
    assert run_status.lane_name({"drafter": "ngram", "draft_len": 4, "tree_budget": 16}) == "ngram [tree=16]"
    assert run_status.lane_name({"drafter": "ngram", "draft_len": 4, "tree_budget": 0}) == "ngram"
    assert run_status.lane_name({"drafter": "draft-model", "draft_len": 4}) == "draft-model"
