"""Sweeps over temperature and drafter options besides D and B: every configuration measured once,
labelled with what it varied, stored so the pages tell the configurations apart, and bad option
values refused with a clear message."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from backend.core.cpu_features import cpu_features
from backend.core.drafter import confident_length
from backend.core.errors import SpecScopeError
from backend.drafters import DrafterOptions
from backend.lab.analysis import acceptance_groups
from backend.lab.labels import variant_label
from backend.lab.store import RunStore
from backend.lab.sweep import check_option_values, option_grid, run_sweep
from tests.helpers.reference import QUESTIONS


@pytest.fixture(scope="module")
def swept(tiny, tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("dims") / "runs.duckdb")
    report = run_sweep(
        tiny,
        QUESTIONS,
        ["ngram", "suffix"],
        [0, 3],
        [2],
        12,
        DrafterOptions(),
        store,
        temperatures=[0.0, 0.8],
        option_values={"ngram_max": ["2", "3"]},
    )
    return store, report


def test_every_temperature_and_option_value_is_its_own_configuration(swept):
    _, report = swept
    configs = {(p["drafter"], p["variant"], p["draft_len"]) for p in report["points"]}
    assert configs == {
        ("none", None, 0),
        ("none", "T=0.8", 0),
        ("ngram", "ngram_max=2", 3),
        ("ngram", "ngram_max=3", 3),
        ("ngram", "T=0.8, ngram_max=2", 3),
        ("ngram", "T=0.8, ngram_max=3", 3),
        ("suffix", None, 3),
        ("suffix", "T=0.8", 3),
    }
    greedy = [p for p in report["points"] if not (p["variant"] or "").startswith("T=")]
    sampled = [p for p in report["points"] if (p["variant"] or "").startswith("T=")]
    assert all(p["lossless"] is True for p in greedy)  # reproduces plain greedy decoding
    assert all(p["lossless"] is None for p in sampled)  # sampled: no single output to compare with


def test_the_store_keeps_the_configurations_apart(swept):
    store, report = swept
    points = store.sweep_points(sweep_id=report["sweep_id"])
    overall = points[(points["category"] == "all") & (points["split"] == "all")]
    assert len(overall) == 8
    row = overall[overall["variant"] == "T=0.8, ngram_max=2"].iloc[0]
    assert row["temperature"] == 0.8 and '"ngram_max": 2' in row["drafter_options"]
    runs = store.runs(kind="sweep")
    assert set(runs[runs["drafter"] == "ngram"]["temperature"]) == {0.0, 0.8}
    tables = [t.to_dict(orient="records") for t in store.acceptance_tables(target=runs["target"][0]).values()]
    names = {g["drafter"] for g in acceptance_groups(*tables, pool_categories=True)}
    assert names == {
        "ngram [ngram_max=2]",
        "ngram [ngram_max=3]",
        "ngram [T=0.8, ngram_max=2]",
        "ngram [T=0.8, ngram_max=3]",
        "suffix",
        "suffix [T=0.8]",
    }


def test_option_values_are_checked_against_the_registry():
    assert check_option_values(["ngram"], {"ngram-max": ["2", "4"]}) == {"ngram_max": [2, 4]}
    with pytest.raises(SpecScopeError, match="unknown drafter option 'window'"):
        check_option_values(["ngram"], {"window": ["2"]})
    with pytest.raises(SpecScopeError, match="no drafter swept has option 'suffix_max_depth'"):
        check_option_values(["ngram"], {"suffix_max_depth": ["8"]})
    with pytest.raises(SpecScopeError, match="ngram_max must be >= 1 and <= 16"):
        check_option_values(["ngram"], {"ngram_max": ["99"]})
    with pytest.raises(SpecScopeError, match="must be an int"):
        check_option_values(["ngram"], {"ngram_max": ["two"]})
    folders = {"drafter_path": ["data/drafters/eagle3-smollm2", "runs/eagle3-smollm2"]}
    with pytest.raises(SpecScopeError, match="both named 'eagle3-smollm2', the name that labels their results"):
        check_option_values(["eagle3"], folders)  # their labels would merge
    assert check_option_values(["eagle3"], {"drafter_path": ["a/eagle3-r1", "a/eagle3-r2"]})["drafter_path"] == [
        "a/eagle3-r1",
        "a/eagle3-r2",
    ]


def test_grid_and_labels():
    values = {"ngram_max": [2, 3], "suffix_max_depth": [8]}
    assert option_grid("ngram", values) == [{"ngram_max": 2}, {"ngram_max": 3}]
    assert option_grid("suffix", values) == [{"suffix_max_depth": 8}]
    assert option_grid("none", values) == [{}]
    assert variant_label(0.0, {}) is None
    assert variant_label(0.7, {"drafter_path": "/x/y/eagle3-run2"}) == "T=0.7, drafter_path=eagle3-run2"


@pytest.mark.slow
def test_tree_budgets_are_a_dimension_for_drafters_that_build_trees(tiny, tmp_path, monkeypatch):
    """ngram at each budget, a drafter without trees (layerskip, made one here) at chains only; every greedy
    point lossless at batch size 2 (ragged trees in one pass); the whole sweep on the compiled passes of a
    target that compiles; runs and points say their budget."""
    monkeypatch.setattr("backend.lab.sweep.TREE_DRAFTERS", ("ngram",))
    store = RunStore(tmp_path / "trees.duckdb")
    compiled = replace(tiny, compile="on")
    drafters = ["ngram", "layerskip"]
    report = run_sweep(
        compiled, QUESTIONS, drafters, [3], [2], 12, DrafterOptions(layerskip_exit_layer=1), store, tree_budgets=[0, 8]
    )
    configs = {(p["drafter"], p["variant"]) for p in report["points"]}
    assert configs == {("none", None), ("ngram", None), ("ngram", "tree=8"), ("layerskip", None)}
    assert all(p["lossless"] is True for p in report["points"])
    details = {(p["drafter"], p["variant"]): p for p in report["details"]}
    assert {p["compile"] for p in details.values()} == {"on"}
    assert details[("ngram", "tree=8")]["tree_budget"] == 8
    runs = store.runs(kind="sweep")
    trees = runs[runs["variant"] == "tree=8"]
    assert len(trees) == len(QUESTIONS) and set(trees["tree_budget"]) == {8} and set(runs["compile"]) == {"on"}
    branched = [store.steps(run_id)["parents"].notna().any() for run_id in trees["run_id"]]
    assert any(branched), "no batched tree step branched"
    points = store.sweep_points(sweep_id=report["sweep_id"])
    assert set(points[points["variant"] == "tree=8"]["tree_budget"]) == {8}
    assert variant_label(0.7, {"ngram_max": 2}, 16) == "T=0.7, ngram_max=2, tree=16"


def test_confidence_stops_are_a_dimension_for_chains(tiny, tmp_path):
    """suffix at each stop (its drafts carry path probabilities), plain decoding once; every greedy point
    lossless at batch size 2; runs and points say their stop, and the stopped configuration's verified
    chains all passed it."""
    store = RunStore(tmp_path / "confidence.duckdb")
    report = run_sweep(tiny, QUESTIONS, ["suffix"], [4], [2], 16, DrafterOptions(), store, min_confidences=[0, 0.5])
    configs = {(p["drafter"], p["variant"]) for p in report["points"]}
    assert configs == {("none", None), ("suffix", None), ("suffix", "conf=0.5")}
    assert all(p["lossless"] is True for p in report["points"])
    runs = store.runs(kind="sweep")
    stopped = runs[runs["variant"] == "conf=0.5"]
    assert len(stopped) == len(QUESTIONS) and set(stopped["min_confidence"]) == {0.5}
    steps = [store.steps(run_id) for run_id in stopped["run_id"]]
    probs = [list(p) for frame in steps for p in frame["draft_probs"].dropna() if len(p)]
    assert probs and all(confident_length(p, 0.5) == len(p) for p in probs)
    assert any((frame["stop_reason"] == "low-confidence").any() for frame in steps)  # the stop did cut
    points = store.sweep_points(sweep_id=report["sweep_id"])
    assert set(points[points["variant"] == "conf=0.5"]["min_confidence"]) == {0.5}


def test_precision_is_a_sweep_dimension_each_checked_against_its_own_plain_decoding(tiny, tmp_path):
    store = RunStore(tmp_path / "runs.duckdb")
    bf16 = replace(tiny, model=copy.deepcopy(tiny.model).to(torch.bfloat16), dtype=torch.bfloat16)
    report = run_sweep(
        tiny, QUESTIONS[:2], ["ngram"], [0, 3], [1], 12, DrafterOptions(), store, other_precisions=[bf16]
    )
    configs = {(p["drafter"], p["variant"]) for p in report["points"]}
    assert configs == {("none", "float32"), ("ngram", "float32"), ("none", "bfloat16"), ("ngram", "bfloat16")}
    assert all(p["lossless"] is True for p in report["points"])
    points = store.sweep_points(sweep_id=report["sweep_id"])
    assert set(points["dtype"]) == {"float32", "bfloat16"}
    assert all(list(features) == list(cpu_features()) for features in points["cpu_features"])
    runs = store.runs(kind="sweep")
    assert set(runs["dtype"]) == {"float32", "bfloat16"}
