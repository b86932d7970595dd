"""`bench speed`'s configurations beside the plain chains, each under its own label and lossless: tree budgets
(`drafter@D/tree=N`, on the passes that score trees), confidence stops (`/conf=C`) and swept drafter option
values (`/ngram_max=3`)."""

from __future__ import annotations

import argparse

import pytest

import backend.lab.bench
from backend.cli.arg_types import confidences, tree_budgets
from backend.cli.speed_table import format_speed_table
from backend.core.cpu_features import cpu_features
from backend.core.errors import SpecScopeError
from backend.drafters import DrafterOptions
from backend.lab.bench import Config, configs_of, speed_benchmark
from backend.lab.prompts import Question

QUESTIONS = [
    Question(1, "copy", ("w5 w9 w13 w5 w9 w14 w5 w9 w13 w5 w9 w14 w5 w9",)),
    Question(2, "chat", ("w20 w21 w22 w20 w21 w23 w20 w21",)),
]


def test_labels_name_the_tree_budget_and_keep_chains_as_they_were(monkeypatch):
    monkeypatch.setattr("backend.lab.bench.TREE_DRAFTERS", ("ngram", "suffix"))  # draft-model made chain-only
    configs = configs_of(["ngram", "suffix"], [4, "auto"], [0, 8])
    assert [config.label for config in configs] == [
        "ngram@4",
        "ngram@4/tree=8",
        "ngram@auto",
        "ngram@auto/tree=8",
        "suffix@4",
        "suffix@4/tree=8",
        "suffix@auto",
        "suffix@auto/tree=8",
    ]
    assert Config("ngram", 2).label == "ngram@2"
    assert [c.label for c in configs_of(["draft-model"], [4], [0, 8])] == ["draft-model@4"]  # chains only


def test_tree_budgets_are_parsed_and_one_out_of_range_is_refused():
    assert tree_budgets("0,8, 16") == [0, 8, 16]
    for bad in ("8,-1", "8,65"):
        with pytest.raises(argparse.ArgumentTypeError, match="between 0 and 64"):
            tree_budgets(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="tree budgets"):
        tree_budgets("eight")


def test_trees_are_measured_beside_chains_losslessly(tiny):
    report = speed_benchmark(tiny, QUESTIONS, ["ngram"], [4], 24, DrafterOptions(), tree_budgets=(0, 8), tree_topk=3)
    assert report["dtype"] == "float32" and report["cpu_features"] == list(cpu_features())
    assert report["lossless_disagreements"] == []
    summary = report["summary"]
    assert {"ngram@4", "ngram@4/tree=8", "hf-assisted@4", "plain@0"} == set(summary)
    tree = summary["ngram@4/tree=8"]
    assert tree["lossless"] == "2/2" and summary["ngram@4"]["lossless"] == "2/2"
    assert 0 < tree["branched_steps"] <= 1  # the repeated prompt leaves two continuations of "w5 w9"
    assert "branched_steps" not in summary["ngram@4"]
    rows = [row for row in report["results"] if row["config"] == "ngram@4/tree=8"]
    assert [row["category"] for row in rows] == ["chat", "copy"]
    assert all(row["tree_budget"] == 8 and row["draft_len"] == 4 and row["drafter"] == "ngram" for row in rows)
    table = format_speed_table(report)
    assert "ngram@4/tree=8" in table and "tree steps that branched: ngram@4/tree=8" in table


def test_trees_on_passes_that_cannot_score_them_are_refused_before_measuring(tiny, monkeypatch):
    monkeypatch.setattr(tiny.model.config, "_attn_implementation", "flash_attention_2")
    with pytest.raises(SpecScopeError, match="tree drafts need sdpa or eager attention"):
        speed_benchmark(tiny, QUESTIONS, ["ngram"], [4], 8, DrafterOptions(), tree_budgets=(0, 8))


def test_confidence_stops_are_configurations_of_chains_only(monkeypatch):
    monkeypatch.setattr("backend.lab.bench.TREE_DRAFTERS", ("ngram",))
    configs = configs_of(["ngram", "suffix"], [4], [0, 8], [0.0, 0.35])
    assert [config.label for config in configs] == [
        "ngram@4",
        "ngram@4/conf=0.35",
        "ngram@4/tree=8",
        "suffix@4",
        "suffix@4/conf=0.35",
    ]
    assert confidences("0, 0.35") == [0.0, 0.35]
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \[0, 1\)"):
        confidences("0.2,1")
    with pytest.raises(argparse.ArgumentTypeError, match="expected a probability"):
        confidences("high")


def test_confidence_stops_are_measured_beside_plain_chains_losslessly(tiny):
    report = speed_benchmark(tiny, QUESTIONS, ["suffix"], [4], 24, DrafterOptions(), min_confidences=(0.0, 0.5))
    summary = report["summary"]
    assert {"suffix@4", "suffix@4/conf=0.5", "hf-assisted@4", "plain@0"} == set(summary)
    assert summary["suffix@4/conf=0.5"]["lossless"] == "2/2" and summary["suffix@4"]["lossless"] == "2/2"


def test_swept_option_values_are_configurations_of_the_drafters_that_have_them(tiny, monkeypatch):
    """`bench speed --option ngram_max=2,3`: ngram at each value (built with it), suffix once; a weights folder
    is named by its folder."""
    configs = configs_of(["ngram", "suffix"], [4], [0], None, {"ngram_max": [2, 3]})
    assert [config.label for config in configs] == ["ngram@4/ngram_max=2", "ngram@4/ngram_max=3", "suffix@4"]
    assert (
        Config("eagle3", 4, options=(("drafter_path", "/runs/eagle3-r2"),)).label == "eagle3@4/drafter_path=eagle3-r2"
    )
    built: list[tuple[str, DrafterOptions]] = []
    real_build = backend.lab.bench.build_drafter

    def spy(name, target, options):
        built.append((name, options))
        return real_build(name, target, options)

    monkeypatch.setattr(backend.lab.bench, "build_drafter", spy)
    report = speed_benchmark(
        tiny, QUESTIONS, ["ngram", "suffix"], [4], 24, DrafterOptions(), option_values={"ngram_max": [2, 3]}
    )
    assert [(name, options.ngram_max) for name, options in built] == [("ngram", 2), ("ngram", 3), ("suffix", 4)]
    summary = report["summary"]
    assert {"ngram@4/ngram_max=2", "ngram@4/ngram_max=3", "suffix@4"} <= set(summary)
    assert all(summary[label]["lossless"] == "2/2" for label in ("ngram@4/ngram_max=2", "ngram@4/ngram_max=3"))
    rows = [row for row in report["results"] if row["config"] == "ngram@4/ngram_max=3"]
    assert rows and all(row["options"] == {"ngram_max": 3} for row in rows)
