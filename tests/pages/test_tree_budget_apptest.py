"""Token trees on the analysis side of the dashboard (AppTest against real tiny-model workers): Acceptance
draws AL against the tree budget from a store holding chain and tree runs, with the AL the counter gives
over the same steps, or says how to measure some; Compare names a lane with a tree budget by it."""

from __future__ import annotations

import json
import shlex

import httpx
import pytest
from streamlit.testing.v1 import AppTest

from backend.cli.main import build_parser
from backend.lab.hints import TREE_SWEEP_HINT
from tests.helpers.apptest import PROMPT, html_of, page
from tests.helpers.tiny import save_tiny
from tests.helpers.tree_store import BUDGETS, DRAFT_LEN, seed_tree_runs
from tests.helpers.workers import WorkerProcess


def figure_titled(at: AppTest, title: str) -> dict:
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return next(f for f in figures if f["layout"]["title"]["text"].startswith(title))


def seeded_worker(tiny, tmp_path_factory, budgets: tuple[int, ...]):
    """A worker whose store holds runs at these tree budgets (tests/helpers/tree_store.py) of its default
    target, a store of its own (the shared page worker's gains tree runs from other tests)."""
    folder = str(save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny"))
    db = tmp_path_factory.mktemp("db") / "trees.duckdb"
    counters = seed_tree_runs(db, folder, budgets=budgets)
    worker = WorkerProcess(db, folder)
    worker.wait_ready()
    yield worker, folder, counters
    worker.stop()


@pytest.fixture(scope="module")
def tree_worker(tiny, tmp_path_factory):
    yield from seeded_worker(tiny, tmp_path_factory, BUDGETS)


@pytest.fixture(scope="module")
def chain_worker(tiny, tmp_path_factory):
    yield from seeded_worker(tiny, tmp_path_factory, (0,))


def use(worker, monkeypatch) -> None:
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", worker.url)
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")


def test_acceptance_draws_al_against_the_tree_budget_as_the_counter_counts_it(tree_worker, monkeypatch):
    worker, target, counters = tree_worker
    use(worker, monkeypatch)
    pooled = httpx.get(worker.url + "/aggregates/acceptance", params={"target": target}).json()["pooled"]
    assert {(g["drafter"], g["base_drafter"], g["tree_budget"]) for g in pooled} >= {
        ("ngram", "ngram", 0),
        ("ngram [tree=6]", "ngram", 6),
        ("ngram [T=0.7, tree=6]", "ngram", 6),
    }
    at = page("pages/acceptance.py").run()
    assert not at.exception
    assert [s.value for s in at.subheader][:2] == ["AL vs D", "AL vs tree budget"]
    assert "Download al_vs_tree_budget (CSV)" in {b.label for b in at.get("download_button")}
    lines = {trace["name"]: trace for trace in figure_titled(at, "AL vs tree budget")["data"]}
    assert set(lines) == {f"ngram D={DRAFT_LEN}", f"suffix D={DRAFT_LEN}"}  # the T=0.7 run is no point of them
    for drafter in ("ngram", "suffix"):
        line = lines[f"{drafter} D={DRAFT_LEN}"]
        assert line["x"] == list(BUDGETS)
        assert line["y"] == pytest.approx([counters[(drafter, budget)].stats().al for budget in BUDGETS])
    table = next(frame.value for frame in at.dataframe if "tree_budget" in frame.value.columns)
    assert set(table["drafter"]) == {
        "ngram",
        "ngram [tree=4]",
        "ngram [tree=6]",
        "suffix",
        "suffix [tree=4]",
        "suffix [tree=6]",
    }
    assert (table["al_ci_low"] <= table["al"]).all() and (table["al"] <= table["al_ci_high"]).all()


def test_acceptance_without_tree_runs_says_how_to_measure_them(chain_worker, monkeypatch):
    use(chain_worker[0], monkeypatch)
    at = page("pages/acceptance.py").run()
    assert not at.exception
    assert "AL vs tree budget" in [s.value for s in at.subheader]
    assert f"`{TREE_SWEEP_HINT}`" in " ".join(info.value for info in at.info)


def test_the_tree_sweep_hint_parses_as_a_sweep_of_tree_budgets():
    args = build_parser().parse_args(shlex.split(TREE_SWEEP_HINT)[3:])
    assert list(args.tree_budgets) == [0, 8, 16] and args.drafters == ["ngram", "suffix"]


def test_compare_names_a_lane_by_its_tree_budget(tree_worker, monkeypatch):
    use(tree_worker[0], monkeypatch)
    at = page("pages/compare.py").run()
    at.text_area(key="cmp_prompt").set_value(PROMPT)
    for index in (0, 1):
        at.selectbox(key=f"cmp{index}_drafter").set_value("ngram").run()
        at.select_slider(key=f"cmp{index}_d").set_value(4)
    at.select_slider(key="cmp0_tree").set_value(8)
    at.number_input(key="cmp_max_new").set_value(16)
    at.button(key="cmp_run").click().run()
    assert not at.exception
    assert list(at.dataframe[0].value["drafter"]) == ["ngram [tree=8]", "ngram"]
    html = html_of(at)
    assert "Lane 1: ngram [tree=8] · D=4" in html and "Lane 2: ngram · D=4" in html
    histogram = figure_titled(at, "accepted drafts per step")
    assert [trace["name"] for trace in histogram["data"]] == ["1: ngram [tree=8] D=4", "2: ngram D=4"]
    assert histogram["data"][0]["marker"]["color"] == histogram["data"][1]["marker"]["color"]  # one drafter, one colour
