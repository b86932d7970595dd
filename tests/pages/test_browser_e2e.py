"""End to end in a real browser: Playwright driving Debian's chromium (never a downloaded browser)
against `streamlit run app.py` and a worker serving the embedded default model (the fixtures are in
conftest.py).

Paste a prompt, run, see green and red tokens appear step by step; move the D slider and rerun;
compare two drafters; open the run in History; after a small sweep, open the Pareto page and hover
a point to read its configuration. Screenshots go to artifacts/screenshots/ (git-ignored).
"""

from __future__ import annotations

import json
import re
import time

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from backend.lab.prompts import DEFAULT_SUITE, load_suite
from backend.serving.client import WorkerClient
from tests.helpers.browser import BROWSER_TEST, SHOTS

PROMPT = next(q for q in load_suite(DEFAULT_SUITE) if q.category == "code_editing").turns[0]

# true once an output container of a run other than `arg` shows a token
FIRST_TOKEN_OF_A_NEW_RUN = """previous => [...document.querySelectorAll('.ss-out[data-run]')].some(
    out => out.dataset.run && out.dataset.run !== previous && out.querySelector('span'))"""

COMMITTED_TEXT_HOLDS = """text => [...document.querySelector('.ss-out[data-run]').querySelectorAll(
    'span.ss-acc, span.ss-tgt')].map(span => span.textContent).join('').includes(text)"""


def speedup_shown(page):
    """The speedup metric once the run's summary has arrived (it shows '…' until then)."""
    return page.locator('[data-testid="stMetricValue"]', has_text=re.compile(r"^\s*\d+\.\d\dx\s*$"))


pytestmark = BROWSER_TEST


def set_draft_len(page, draft_len: int) -> None:
    """Move the D slider (0-16, then auto) to `draft_len`: to its end (auto) first, then down."""
    slider = page.get_by_role("slider").first
    slider.focus()
    for _ in range(18):
        slider.press("ArrowRight")
    for _ in range(17 - draft_len):
        slider.press("ArrowLeft")
    page.wait_for_timeout(800)


def type_prompt(page, text: str) -> None:
    box = page.get_by_role("textbox", name="Prompt", exact=True)
    box.fill(text)
    box.press("Control+Enter")  # commit the text area before pressing Run
    page.wait_for_timeout(500)


def test_live_run_shows_tokens_step_by_step(browser_page):
    page = browser_page
    type_prompt(page, PROMPT)
    set_draft_len(page, 8)  # a fixed D: auto may decline to draft on a loaded machine, leaving no drafts to mark
    pressed = time.perf_counter()
    page.get_by_role("button", name="Run", exact=True).click()
    tokens = page.locator(".ss-out span.ss-acc, .ss-out span.ss-tgt")
    page.wait_for_function(FIRST_TOKEN_OF_A_NEW_RUN, arg="", polling=20)
    first_token_s = time.perf_counter() - pressed  # reported, not asserted: timings belong in benchmarks
    (SHOTS.parent / "e2e_timings.json").write_text(
        json.dumps({"run_to_first_token_s": first_token_s, "prompt_chars": len(PROMPT)})
    )
    print(f"Run pressed -> first token on screen: {first_token_s:.2f} s")
    seen = []
    deadline = time.time() + 180
    while speedup_shown(page).count() == 0 and time.time() < deadline:
        seen.append(tokens.count())
        page.wait_for_timeout(100)
    growth = sorted(set(seen))
    assert len(growth) >= 3, f"tokens did not appear step by step: {growth}"
    speedup_shown(page).wait_for()
    assert page.locator(".ss-out span.ss-acc").count() > 0 and page.locator(".ss-out span.ss-rej").count() > 0
    assert page.locator(".ss-out span.ss-tgt").count() > 0
    page.locator(".js-plotly-plot").nth(1).wait_for()  # the step-time chart and the histogram
    page.screenshot(path=str(SHOTS / "live.png"), full_page=True)


def test_html_in_the_output_is_drawn_as_text(browser_page):
    """The default model echoes this markup (greedy); rendered as HTML it would set window.__xss."""
    page = browser_page
    previous = page.locator(".ss-out[data-run]").first.get_attribute("data-run") or ""
    type_prompt(page, 'Repeat this HTML exactly, with nothing else: <img src=x onerror="window.__xss=1"><b>bold</b>')
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(FIRST_TOKEN_OF_A_NEW_RUN, arg=previous, polling=50)
    # the committed text (accepted drafts and the target's own tokens) holds the markup, as characters
    page.wait_for_function(COMMITTED_TEXT_HOLDS, arg='<img src=x onerror="window.__xss=1">', polling=100)
    assert page.locator(".ss-out img, .ss-out b").count() == 0
    assert page.evaluate("window.__xss === undefined")
    type_prompt(page, PROMPT)  # the next test reruns the suite prompt


def test_moving_the_d_slider_and_rerunning(browser_page):
    page = browser_page
    set_draft_len(page, 3)
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("D=3").first.wait_for()
    speedup_shown(page).wait_for()
    assert page.locator(".ss-out span.ss-acc, .ss-out span.ss-tgt").count() > 0


def test_compare_two_drafters(browser_page):
    page = browser_page
    page.get_by_role("link", name="Compare").click()
    page.get_by_text("Compare drafters").wait_for()
    type_prompt(page, PROMPT)
    max_new = page.get_by_label("Max new tokens", exact=True).first  # each lane and the job's plain run decode it
    max_new.fill("48")
    max_new.press("Enter")
    page.get_by_role("button", name="Run all lanes").click()
    page.get_by_text("Summary").wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    assert page.get_by_text("Lane 1: suffix").count() and page.get_by_text("Lane 2: ngram").count()
    page.screenshot(path=str(SHOTS / "compare.png"), full_page=True)


def test_open_the_run_in_history(browser_page):
    page = browser_page
    page.get_by_role("link", name="History").click()
    page.get_by_text("Run history").wait_for()
    page.get_by_role("button", name="Open in Live").click()
    page.get_by_text("Replaying stored run").wait_for()
    assert page.locator(".ss-out span.ss-acc, .ss-out span.ss-tgt").count() > 0
    page.screenshot(path=str(SHOTS / "history_replay.png"), full_page=True)


def test_hover_a_point_on_the_pareto_page(browser_page, e2e_worker):
    client = WorkerClient(e2e_worker.url)
    questions = [
        {"question_id": q.question_id, "category": q.category, "turns": [q.turns[0]]}
        for q in load_suite(DEFAULT_SUITE, ["code_editing", "qa"], per_category=1)
    ]
    records = list(
        client.sweep(questions=questions, drafters=["ngram"], draft_lens=[0, 4], batch_sizes=[1, 2], max_new_tokens=12)
    )
    assert records[-1]["type"] == "sweep"
    page = browser_page
    page.get_by_role("link", name="Pareto").click()
    page.get_by_text("Throughput vs interactivity", exact=True).wait_for()  # the heading, not the chart title
    chart = page.locator(".js-plotly-plot").first
    points = chart.locator(".scatterlayer .trace .points path")
    points.first.wait_for()
    assert points.count() == 4
    label = chart.locator(".hoverlayer .hovertext")
    for _ in range(6):  # a hover that lands while Streamlit redraws the chart is lost: move away and hover again
        points.first.hover(force=True)
        try:
            label.first.wait_for(timeout=10_000)
            break
        except PlaywrightTimeout:
            page.mouse.move(0, 0)
    label.first.wait_for(timeout=1_000)
    text = label.first.text_content()
    assert re.search(r"(none|ngram) D=\d+ B=[12]", text) and "tok/s" in text, text
    page.screenshot(path=str(SHOTS / "pareto.png"), full_page=True)
