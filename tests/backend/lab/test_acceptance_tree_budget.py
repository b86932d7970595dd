"""The store's acceptance groups name each group's drafter without its variant and its tree budget, and
count a tree budget's AL as AcceptanceCounter does over the same steps."""

from __future__ import annotations

import pytest

from backend.lab.analysis import acceptance_groups
from backend.lab.labels import drafter_label, variant_label
from backend.lab.store import RunStore
from tests.helpers.tree_store import BUDGETS, seed_tree_runs


def test_groups_carry_the_drafter_and_tree_budget_and_count_as_the_counter(tmp_path):
    counters = seed_tree_runs(tmp_path / "trees.duckdb", "t")
    store = RunStore(tmp_path / "trees.duckdb")
    tables = [table.to_dict(orient="records") for table in store.acceptance_tables(target="t").values()]
    groups = {group["drafter"]: group for group in acceptance_groups(*tables, pool_categories=True)}
    assert groups["ngram [T=0.7, tree=6]"]["base_drafter"] == "ngram"
    assert groups["ngram [T=0.7, tree=6]"]["tree_budget"] == 6
    for (drafter, budget), counter in counters.items():
        group = groups[drafter_label(drafter, variant_label(0.0, {}, budget))]
        assert (group["base_drafter"], group["tree_budget"]) == (drafter, budget)
        assert group["al"] == pytest.approx(counter.stats().al)
        assert group["histogram"] == counter.stats().histogram
    assert {group["tree_budget"] for group in groups.values()} == set(BUDGETS)


def test_drafter_label_names_the_variant_as_the_store_does():
    assert drafter_label("ngram", variant_label(0.0, {}, 16)) == "ngram [tree=16]"
    assert drafter_label("ngram", variant_label(0.0, {}, 0)) == "ngram"
    assert drafter_label("eagle3", variant_label(0.0, {}, 0, 0.2)) == "eagle3 [conf=0.2]"
