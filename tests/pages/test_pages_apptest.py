"""Every page with Streamlit's AppTest against a real worker on loopback."""

from __future__ import annotations

import pytest

from tests.helpers.apptest import PROMPT, html_of, page


def test_app_router_opens_the_live_page(worker_env):
    at = page("app.py").run()
    assert not at.exception
    assert at.title[0].value == "Live speculative decoding"


def test_live_run_shows_coloured_tokens_metrics_and_speedup(worker_env):
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value(PROMPT)
    at.selectbox(key="live_drafter").set_value("ngram")
    at.select_slider(key="live_d").set_value(4)
    at.number_input(key="live_max_new").set_value(40)
    at.button(key="live_run").click().run()
    assert not at.exception
    output = html_of(at).split('<div class="ss-out"', 1)[1]  # the run's tokens, not the legend above them
    assert 'class="ss-acc"' in output and 'class="ss-tgt' in output
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["AL"]) > 1.0
    assert metrics["Speedup vs plain"].endswith("x")
    assert len(at.get("plotly_chart")) == 2


def test_live_empty_prompt_is_a_message_not_a_crash(worker_env):
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value("   ")
    at.button(key="live_run").click().run()
    assert not at.exception
    assert "prompt is empty" in at.warning[0].value


def test_live_unknown_model_is_a_message(worker_env):
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value(PROMPT)
    at.selectbox(key="live_drafter").set_value("draft-model").run()
    at.text_input(key="live_draft_model").set_value("/no/such/draft")
    at.button(key="live_run").click().run()
    assert not at.exception
    assert "no such model folder" in at.error[0].value


def test_live_draft_model_left_empty_without_a_distilled_student_is_a_message(worker_env):
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value(PROMPT)
    at.selectbox(key="live_drafter").set_value("draft-model").run()
    at.button(key="live_run").click().run()
    assert not at.exception
    assert "needs a draft model" in at.error[0].value and "--kind draft-model" in at.error[0].value


def test_live_suite_prompt_fills_the_text_area(worker_env):
    at = page("pages/live.py").run()
    label = at.selectbox(key="live_suite").options[1]
    at.selectbox(key="live_suite").set_value(label).run()
    assert at.text_area(key="live_prompt").value.strip()


def test_compare_two_lanes_gives_a_summary_table(worker_env):
    at = page("pages/compare.py").run()
    at.text_area(key="cmp_prompt").set_value(PROMPT)
    at.selectbox(key="cmp0_drafter").set_value("ngram")
    at.selectbox(key="cmp1_drafter").set_value("suffix")
    at.number_input(key="cmp_max_new").set_value(30)
    at.button(key="cmp_run").click().run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["drafter"]) == ["ngram", "suffix"] and (table["AL"].astype(float) >= 1).all()
    assert len(at.get("plotly_chart")) == 1


def test_history_lists_runs_and_offers_exports(worker_env):
    live = page("pages/live.py").run()
    live.text_area(key="live_prompt").set_value(PROMPT)
    live.number_input(key="live_max_new").set_value(10)
    live.button(key="live_run").click().run()
    at = page("pages/history.py").run()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) >= 1 and {"drafter", "al", "status"} <= set(table.columns)
    at.selectbox(key="hist_drafter").set_value("suffix").run()
    assert set(at.dataframe[0].value["drafter"]) == {"suffix"}
    assert len(at.get("download_button")) == 2


def test_a_stored_run_replays_in_the_live_view(worker_env):
    from backend.serving.client import WorkerClient

    client = WorkerClient(worker_env.url)
    run_id = client.runs(status="complete")[0]["run_id"]
    at = page("pages/live.py")
    at.session_state["live_replay"] = client.run(run_id)
    at.run()
    assert not at.exception
    assert "Replaying stored run" in at.info[0].value and 'class="ss-' in html_of(at)


@pytest.mark.parametrize("path", ["pages/live.py", "pages/compare.py", "pages/history.py"])
def test_worker_down_is_a_clear_message(path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")
    at = page(path).run()
    assert not at.exception
    assert "cannot reach the SpecScope worker" in at.error[0].value
