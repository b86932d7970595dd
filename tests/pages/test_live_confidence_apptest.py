"""The confidence stop on the Live page (AppTest against a real tiny-model worker): the slider reaches the
worker, the run's caption says it, and every verified chain passed it."""

from __future__ import annotations

from backend.core.drafter import confident_length
from backend.serving.client import WorkerClient
from tests.helpers.apptest import page

REPEATING = "w5 w9 w13 w5 w9 w14 w5 w9 w13 w5 w9 w14 w5 w9"


def test_a_run_with_a_confidence_stop_reaches_the_worker_and_says_so(worker_env):
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value(REPEATING)
    at.selectbox(key="live_drafter").set_value("suffix").run()
    at.select_slider(key="live_d").set_value(4)
    assert at.select_slider(key="live_confidence").value == 0.0  # off by default
    at.select_slider(key="live_confidence").set_value(0.5)
    at.number_input(key="live_max_new").set_value(30)
    at.button(key="live_run").click().run()
    assert not at.exception
    assert "stops below confidence 0.5" in "\n".join(c.value for c in at.caption)
    client = WorkerClient(worker_env.url)
    stored = next(run for run in client.runs(kind="generate", status="complete") if run.get("min_confidence"))
    assert stored["min_confidence"] == 0.5 and stored["variant"] == "conf=0.5"
    stored_steps = client.run(stored["run_id"])["steps"]
    steps = [step for step in stored_steps if step.get("draft_probs")]
    assert steps and all(confident_length(step["draft_probs"], 0.5) == len(step["drafted"]) for step in steps)
    assert any(step["stop_reason"] == "low-confidence" for step in stored_steps)  # the stop did cut


def test_the_confidence_stop_is_off_for_token_trees(worker_env):
    at = page("pages/live.py").run()
    at.selectbox(key="live_drafter").set_value("ngram").run()
    at.select_slider(key="live_tree").set_value(8).run()
    assert at.select_slider(key="live_confidence").disabled
