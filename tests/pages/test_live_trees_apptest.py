"""Token trees on the Live page (AppTest against a real tiny-model worker): the tree budget is offered
for drafters that build trees only, a tree run shows each tree step's fan in the output and draws a
chosen step's whole tree, and a stored tree run opened from History draws the same trees."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from backend.drafters import REGISTRY, TREE_DRAFTERS
from backend.serving.client import WorkerClient
from tests.helpers.apptest import html_of, page

BRANCHING = "w5 w9 w13 w5 w9 w14 w5 w9 w13 w5 w9 w14 w5 w9"


def tree_run(budget: int) -> AppTest:
    at = page("pages/live.py").run()
    at.text_area(key="live_prompt").set_value(BRANCHING)
    at.selectbox(key="live_drafter").set_value("ngram").run()
    at.select_slider(key="live_d").set_value(4)
    at.select_slider(key="live_tree").set_value(budget)
    at.number_input(key="live_max_new").set_value(40)
    at.button(key="live_run").click().run()
    assert not at.exception
    return at


def test_the_tree_budget_is_offered_for_the_drafters_that_build_trees(worker_env):
    """The slider follows each choice's `trees` flag, at 0; plain decoding ("none") builds no trees and is
    offered none."""
    at = page("pages/live.py").run()
    names = at.selectbox(key="live_drafter").options
    assert "none" in names and len([name for name in names if name in REGISTRY]) >= 2
    for name in names:
        at.selectbox(key="live_drafter").set_value(name).run()
        offered = "live_tree" in [slider.key for slider in at.select_slider]
        assert offered == (name in TREE_DRAFTERS), name
        if offered:
            assert at.select_slider(key="live_tree").value == 0


def test_a_tree_run_shows_fans_and_draws_a_steps_tree(worker_env):
    at = tree_run(8)
    html = html_of(at)
    assert 'class="ss-fan" title=' in html and "token tree:" in html  # the fan's hover lists the branches
    assert "token tree ≤ 8 drafts" in "\n".join(c.value for c in at.caption)
    assert [header.value for header in at.subheader] == ["Token trees"]
    assert at.select_slider(key="live_tree_step").value.startswith("turn 1 · step ")
    assert len(at.get("plotly_chart")) == 3  # step times, histogram, the tree


def test_a_chain_run_draws_no_tree(worker_env):
    at = tree_run(0)
    assert [header.value for header in at.subheader] == []
    assert 'class="ss-fan" title=' not in html_of(at)


def test_a_stored_tree_run_draws_its_trees(worker_env):
    tree_run(8)
    client = WorkerClient(worker_env.url)
    stored = next(run for run in client.runs(kind="generate", status="complete") if run.get("tree_budget") == 8)
    at = page("pages/live.py")
    at.session_state["live_replay"] = client.run(stored["run_id"])
    at.run()
    assert not at.exception
    assert [header.value for header in at.subheader] == ["Token trees"]
