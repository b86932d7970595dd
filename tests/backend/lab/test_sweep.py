"""Sweeps: the grid into the store, CIs, the frontier, the CLI's JSON, and the co-design analysis."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.drafters import DrafterOptions
from backend.lab.codesign import codesign_report
from backend.lab.prompts import Question
from backend.lab.store import RunStore
from backend.lab.sweep import run_sweep, split_of, sweep_grid
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import ROOT

QUESTIONS = [
    Question(i, "copy" if i % 2 else "chat", (" ".join(f"w{(i * 7 + j) % 50 + 5}" for j in range(12)),))
    for i in range(6)
]
POINT_KEYS = {
    "drafter",
    "draft_len",
    "batch_size",
    "throughput_tps",
    "interactivity_tps",
    "al",
    "al_ci_low",
    "al_ci_high",
    "lossless",
}


@pytest.fixture(scope="module")
def swept(tiny, tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("sweep") / "runs.duckdb")
    seen = []
    report = run_sweep(
        tiny,
        QUESTIONS,
        ["ngram"],
        [0, 3, "auto"],
        [1, 3],
        16,
        DrafterOptions(),
        store,
        lambda label, done, total: seen.append((done, total)),
    )
    return store, report, seen


def test_grid_points_are_complete_and_lossless(swept):
    _, report, seen = swept
    configs = {(p["drafter"], str(p["draft_len"]), p["batch_size"]) for p in report["points"]}
    assert configs == {(d, str(n), b) for b in (1, 3) for d, n in (("none", 0), ("ngram", 3), ("ngram", "auto"))}
    for point in report["points"]:
        assert point.keys() >= POINT_KEYS and point["lossless"]
        assert point["al_ci_low"] <= point["al"] <= point["al_ci_high"]
        assert point["throughput_tps"] > 0 and point["interactivity_tps"] > 0
    assert all(p in report["points"] for p in report["frontier"]) and report["frontier"]
    assert seen[-1][0] == seen[-1][1]  # progress reached its total


def test_points_per_category_and_split_and_runs_are_stored(swept):
    store, report, _ = swept
    points = store.sweep_points(report["sweep_id"])
    assert set(points["category"]) == {"all", "chat", "copy"} and set(points["split"]) == {"all", "short"}
    assert store.sweeps().iloc[0]["status"] == "complete"
    runs = store.runs(kind="sweep")
    assert len(runs) == 6 * 6 and set(runs["batch_size"]) == {1, 3} and set(runs["split"]) == {"short"}
    assert len(store.steps(runs.iloc[0]["run_id"])) > 0
    detail = next(p for p in report["details"] if p["drafter"] == "ngram" and p["draft_len"] == 3)
    assert len(detail["survival"]) == 3 and sum(detail["histogram"]) > 0


def test_split_boundaries():
    assert (split_of(10), split_of(511), split_of(512), split_of(2047), split_of(3000)) == (
        "short",
        "short",
        "medium",
        "medium",
        "long",
    )


def test_the_grid_measures_plain_once_per_temperature_and_trees_only_for_tree_drafters():
    grid = sweep_grid(["none", "ngram", "none"], [0, 2], [0.0, 0.7], {}, [0, 8], [0.0])
    plain = [config for config in grid if config[1] == "none"]
    assert [(t, d, budget) for t, _, d, _, budget, _ in plain] == [(0.0, 0, 0), (0.7, 0, 0)]
    assert sorted((t, d, budget) for t, name, d, _, budget, _ in grid if name == "ngram") == [
        (0.0, 2, 0),
        (0.0, 2, 8),
        (0.7, 2, 0),
        (0.7, 2, 8),
    ]


def test_codesign_from_points(swept):
    store, report, _ = swept
    points = store.sweep_points(report["sweep_id"]).to_dict(orient="records")
    analysis = codesign_report({"num_attention_heads": 4, "num_key_value_heads": 2}, points)
    assert analysis["G"] == 2 and analysis["d_start"] == 63 and analysis["d_ladder"] == [63]
    assert set(analysis["measured"]) == {"3"} and set(analysis["predicted"]) == {"3"}
    assert set(analysis["recommended_d"]) == {"1", "3"}


def test_codesign_without_measurements_gives_the_rules():
    analysis = codesign_report({"num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}, [])
    assert analysis["G"] == 3 and analysis["d_ladder"] == [] and "measured" not in analysis
    assert analysis["d_suggested"] == 41 and "127" in analysis["ladder_note"]
    assert analysis["head_dim"] == 64 and not analysis["head_dim_from_config"]  # 576 / 9
    given = codesign_report({"num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128}, [])
    assert given["head_dim"] == 128 and given["head_dim_from_config"] and given["d_ladder"] == [15, 31, 47, 63]


@pytest.mark.slow
def test_sweep_and_codesign_command_lines(tiny, tmp_path):
    folder = save_tiny(tiny, tmp_path / "tiny")
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        "".join(
            json.dumps({"question_id": q.question_id, "category": q.category, "turns": list(q.turns)}) + "\n"
            for q in QUESTIONS
        )
    )
    env_free = {"SPECSCOPE_WORKER_URL": "http://127.0.0.1:9"}
    common = ["--target", str(folder), "--db", str(tmp_path / "runs.duckdb")]
    sweep = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend",
            "bench",
            "sweep",
            "--suite",
            str(suite),
            "--drafters",
            "ngram",
            "--draft-lens",
            "0,2",
            "--batch-sizes",
            "1,2",
            "--max-new-tokens",
            "8",
            "--json",
            *common,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env_free},
    )
    assert sweep.returncode == 0, sweep.stderr
    report = json.loads(sweep.stdout.splitlines()[-1])
    assert {"points", "frontier"} <= report.keys() and all(p.keys() >= POINT_KEYS for p in report["points"])
    design = subprocess.run(
        [sys.executable, "-m", "backend", "codesign", "--json", *common],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env_free},
    )
    assert design.returncode == 0, design.stderr
    analysis = json.loads(design.stdout.splitlines()[-1])
    assert {
        "num_attention_heads",
        "num_key_value_heads",
        "G",
        "d_start",
        "d_ladder",
        "predicted",
        "measured",
        "recommended_d",
    } <= analysis.keys()
