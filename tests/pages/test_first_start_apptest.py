"""First start, with Streamlit's AppTest: on a fresh store holding only the reference sweep, Pareto,
Acceptance and Co-design draw it and say it is the reference; the Sweep page starts a sweep in the
worker, shows its progress and where its points are, and refuses bad input with a message."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest

from backend.serving.client import WorkerClient
from tests.helpers.apptest import page
from tests.helpers.reference import build_reference
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import WorkerProcess


@pytest.fixture(scope="module")
def first_start(tiny, tmp_path_factory):
    """A worker on a fresh store whose target has a reference sweep to import."""
    folder = str(save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny"))
    reference = tmp_path_factory.mktemp("ref") / "reference"
    build_reference(tiny, reference, name=folder)
    db = tmp_path_factory.mktemp("db") / "fresh.duckdb"
    worker = WorkerProcess(db, folder, extra=["--reference", str(reference)])
    worker.wait_ready()
    yield worker
    worker.stop()


@pytest.fixture
def env(first_start, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", first_start.url)
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")
    return first_start


def infos(at: AppTest) -> str:
    return " ".join(i.value for i in at.info)


def test_pareto_shows_the_reference_alone_and_says_so(env):
    at = page("pages/pareto.py").run()
    assert not at.exception
    assert "No sweep of your own" in infos(at) and "reference: " in infos(at)
    table = at.dataframe[0].value
    assert table["source"].str.startswith("reference: ").all() and set(table["drafter"]) == {"none", "ngram"}
    spec = at.get("plotly_chart")[0].proto.spec
    assert "diamond-open" in spec and "(reference)" in spec


def test_acceptance_falls_back_to_the_reference_and_filters_by_kind(env):
    at = page("pages/acceptance.py").run()
    assert not at.exception
    assert "No drafting steps of your own" in infos(at) and "reference: " in infos(at)
    assert len(at.get("plotly_chart")) == 4
    at.multiselect(key="acc_kinds").set_value(["replay"]).run()  # nothing of that kind, reference used
    assert not at.exception and "reference: " in infos(at)
    at.multiselect(key="acc_statuses").set_value([]).run()
    assert not at.exception and "Pick at least one run kind and one status" in infos(at)


def test_codesign_draws_the_measured_curve_from_the_reference(env):
    at = page("pages/codesign.py").run()
    assert not at.exception
    assert len(at.get("plotly_chart")) >= 1


def test_the_sweep_page_runs_a_sweep_in_the_worker(env):
    at = page("pages/sweep.py").run()
    assert not at.exception
    at.multiselect(key="sw_drafters").set_value(["ngram"])
    at.multiselect(key="sw_lens").set_value([2])
    at.multiselect(key="sw_sizes").set_value([1])
    at.multiselect(key="sw_categories").set_value(["qa"])
    at.number_input(key="sw_max_new").set_value(8)
    at.run()
    assert "2 configurations × 1 prompts = 2 decoded rows" in " ".join(c.value for c in at.caption)
    at.button(key="sw_start").click().run()
    assert not at.exception
    job_id = at.session_state["sw_job"]
    client = WorkerClient(env.url)
    deadline = time.time() + 120
    while client.sweep_job(job_id)["status"] in ("queued", "running") and time.time() < deadline:
        time.sleep(0.2)
    at.run()
    assert not at.exception
    assert any("stored" in s.value for s in at.success)
    state = client.sweep_job(job_id)
    points = client.sweep_points(sweep_id=state["sweep_id"])
    assert {(p["drafter"], p["draft_len"]) for p in points if p["category"] == "all"} == {("none", "0"), ("ngram", "2")}


def swept_variants(at: AppTest, env) -> set[tuple[str, str | None]]:
    """Start the sweep the page's form holds, wait for it, and return its (drafter, variant) configurations."""
    at.button(key="sw_start").click().run()
    assert not at.exception
    client = WorkerClient(env.url)
    job_id, deadline = at.session_state["sw_job"], time.time() + 120
    while client.sweep_job(job_id)["status"] in ("queued", "running") and time.time() < deadline:
        time.sleep(0.2)
    points = client.sweep_points(sweep_id=client.sweep_job(job_id)["sweep_id"])
    return {(p["drafter"], p["variant"]) for p in points if p["category"] == "all" and p["split"] == "all"}


def test_the_sweep_page_sweeps_confidence_stops(env):
    at = page("pages/sweep.py").run()
    assert at.multiselect(key="sw_stops").value == [0.0]  # the plain chains by default
    at.multiselect(key="sw_drafters").set_value(["suffix"])
    at.multiselect(key="sw_lens").set_value([4])
    at.multiselect(key="sw_sizes").set_value([1])
    at.multiselect(key="sw_categories").set_value(["code_editing"])
    at.multiselect(key="sw_stops").set_value([0.0, 0.3])
    at.number_input(key="sw_max_new").set_value(16)
    at.run()
    assert "3 configurations × 1 prompts = 3 decoded rows" in " ".join(c.value for c in at.caption)
    overall = swept_variants(at, env)
    assert overall == {("none", None), ("suffix", None), ("suffix", "conf=0.3")}


def test_the_sweep_page_sweeps_tree_budgets_for_drafters_that_build_trees(env):
    at = page("pages/sweep.py").run()
    assert at.multiselect(key="sw_trees").value == [0]  # chains by default
    at.multiselect(key="sw_drafters").set_value(["suffix"])
    at.multiselect(key="sw_lens").set_value([4])
    at.multiselect(key="sw_sizes").set_value([1])
    at.multiselect(key="sw_categories").set_value(["code_editing"])
    at.multiselect(key="sw_stops").set_value([0.0, 0.3])
    at.multiselect(key="sw_trees").set_value([0, 8])
    at.select_slider(key="sw_tree_topk").set_value(2)
    at.number_input(key="sw_max_new").set_value(16)
    at.run()
    # plain, then suffix's chains at each stop and its tree of 8 (a tree takes no stop)
    assert "4 configurations × 1 prompts = 4 decoded rows" in " ".join(c.value for c in at.caption)
    overall = swept_variants(at, env)
    assert overall == {("none", None), ("suffix", None), ("suffix", "conf=0.3"), ("suffix", "tree=8")}


def test_the_sweep_page_refuses_bad_values_with_a_message(env):
    at = page("pages/sweep.py").run()
    at.text_input(key="sw_temperatures").set_value("warm").run()
    assert not at.exception
    assert "Temperatures: expected comma-separated float values" in at.error[0].value
    assert at.button(key="sw_start").disabled
    at.multiselect(key="sw_drafters").set_value(["ngram"]).run()
    at.text_input(key="sw_temperatures").set_value("0").run()
    at.text_input(key="sw_opt_ngram_max").set_value("2, 99").run()
    at.button(key="sw_start").click().run()
    assert not at.exception and "ngram_max must be >= 1 and <= 16" in at.error[0].value
