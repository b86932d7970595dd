"""The Acceptance, Pareto and Co-design pages with Streamlit's AppTest, against a real worker whose
store holds one sweep (and, for the empty-store messages, the fresh page worker's store)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers.apptest import page
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import WorkerProcess

# the page worker's store is shared: tree runs other tests stored there add the AL-vs-tree-budget chart
CHARTS = {"chart_al_vs_d", "chart_histograms", "chart_survival", "chart_conditional"}


def chart_keys(at: AppTest) -> set[str]:
    return {chart.key for chart in at.get("plotly_chart")}


def tab_labels(at: AppTest) -> list[str]:
    return [tab.label for tab in at.tabs]


def test_acceptance_page_shows_al_vs_d_histograms_and_both_position_curves(swept_env):
    at = page("pages/acceptance.py").run()
    assert not at.exception
    assert [s.value for s in at.subheader] == [
        "AL vs D",
        "AL vs tree budget",
        "Acceptance histograms",
        "Per-position acceptance",
    ]
    assert chart_keys(at) >= CHARTS and tab_labels(at).count("Table") == len(chart_keys(at))
    assert {b.label for b in at.get("download_button")} >= {
        "Download al_vs_d (CSV)",
        "Download survival (CSV)",
        "Download conditional (CSV)",
    }
    al_table = at.dataframe[0].value
    assert set(al_table["draft_len"]) >= {"2", "4"} and (al_table["al_ci_low"] <= al_table["al"]).all()
    caption = " ".join(c.value for c in at.caption)
    assert "Survival" in caption and "Conditional" in caption and "vLLM" in caption
    at.selectbox(key="acc_hist_category").set_value("copy").run()
    assert not at.exception
    at.selectbox(key="acc_split").set_value("short (< 512 tokens)").run()  # the sweep's prompts are short
    assert not at.exception and chart_keys(at) >= CHARTS
    at.selectbox(key="acc_split").set_value("long (2k+ tokens)").run()
    assert not at.exception and "No drafting steps" in at.info[0].value


def test_pareto_page_marks_the_frontier_and_compares_at_matched_interactivity(swept_env):
    at = page("pages/pareto.py").run()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) == 6 and table["on_frontier"].any()
    assert set(table["batch_size"]) == {1, 2} and set(table["drafter"]) == {"none", "ngram"}
    assert [s.value for s in at.subheader] == ["Speculation on vs off at matched interactivity"]
    figure = at.get("plotly_chart")[0].proto.spec
    assert "Pareto frontier" in figure and "interactivity" in figure
    at.multiselect(key="par_drafters").set_value(["ngram"]).run()
    assert not at.exception and "Include plain decoding" in at.info[0].value


def test_codesign_page_reads_the_rules_and_the_measurements(swept_env):
    at = page("pages/codesign.py").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["G (query heads per KV head)"] == "2" and metrics["Suggested D"] == "63"
    assert at.markdown[1].value.endswith(": 63")  # the ladder
    speedups = at.dataframe[2].value  # after the ladder's rungs and the KV-cache cost
    assert list(speedups["draft_len"]) == [2, 4] and (speedups["predicted"] > 0).all()
    recommended = at.dataframe[3].value
    assert list(recommended["batch_size"]) == [1, 2]
    assert at.get("plotly_chart")


@pytest.mark.slow
def test_pages_explain_an_empty_store(tmp_path, tiny, monkeypatch):
    worker = WorkerProcess(tmp_path / "empty.duckdb", str(save_tiny(tiny, tmp_path / "tiny")))
    worker.wait_ready()
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", worker.url)
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")
    try:
        for path, advice in (
            ("pages/acceptance.py", "No drafting steps"),
            ("pages/pareto.py", "bench sweep"),
            ("pages/codesign.py", "bench sweep"),
        ):
            at = page(path).run()
            assert not at.exception
            assert advice in at.info[0].value
    finally:
        worker.stop()
