"""Live and Compare in a real browser (the fixtures of test_browser_e2e.py: Debian's chromium, a worker
serving the embedded default model): the Compare summary's numbers as a person reads them, one Stop
button while a run streams, the queue in the sidebar after Stop, a run cut short by a settings change
said to be so, and the speedup's plain run and the output check shown after a run."""

from __future__ import annotations

import re

import pytest

from tests.helpers.browser import BROWSER_TEST, SHOTS
from tests.pages.test_browser_e2e import (
    FIRST_TOKEN_OF_A_NEW_RUN,
    PROMPT,
    speedup_shown,
    type_prompt,
)
from ui import run_status

pytestmark = BROWSER_TEST

LONG_RUN = "600"  # max new tokens for a run that is still streaming when the test acts on it
SHORT_RUN = "24"


@pytest.fixture
def page(browser_page):  # noqa: F811 - the imported fixture, by name
    return browser_page


def set_number(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True).first
    box.fill(value)
    box.press("Enter")
    page.wait_for_timeout(500)


def start_live_run(page, max_new_tokens: str) -> None:
    page.get_by_role("link", name="Live").click()
    page.get_by_text("Live speculative decoding").wait_for()
    type_prompt(page, PROMPT)
    set_number(page, "Max new tokens", max_new_tokens)
    shown = page.locator(".ss-out[data-run]")
    previous = (shown.first.get_attribute("data-run") if shown.count() else None) or ""
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(FIRST_TOKEN_OF_A_NEW_RUN, arg=previous, polling=50)


def cell(page, column: int, row: int) -> str:
    return page.get_by_test_id(f"glide-cell-{column}-{row}").first.inner_text().strip()


def test_live_shows_the_plain_run_of_the_same_job_and_the_output_check(page):
    start_live_run(page, SHORT_RUN)
    speedup_shown(page).wait_for()
    note = page.get_by_text(
        re.compile(r"Speedup over plain decoding of the same prompt and settings, decoded in this job")
    )
    note.first.wait_for()
    # the plain lane's own rate, measured in this job, is named beside the speedup
    assert re.search(r"at .+: \d+\.\d tokens/s\.", note.first.inner_text()), note.first.inner_text()
    verdict = page.get_by_text(
        re.compile(r"^(Token-identical to plain decoding|Not identical to plain decoding: it first differs)")
    )
    verdict.first.wait_for()
    # greedy speculative decoding on the default drafter is lossless: the check must say identical
    assert verdict.first.inner_text().startswith("Token-identical to plain decoding"), verdict.first.inner_text()


def test_one_stop_button_while_a_run_streams_and_the_queue_is_empty_after_stop(page):
    start_live_run(page, LONG_RUN)
    page.wait_for_timeout(1500)  # Streamlit's running indicator shows its own Stop after 0.5 s
    stops = page.get_by_role("button", name="Stop", exact=True)
    visible = [stops.nth(i).is_visible() for i in range(stops.count())]
    page.screenshot(path=str(SHOTS / "live_running.png"), full_page=True)
    assert visible.count(True) == 1, f"{visible.count(True)} Stop buttons visible during a run"
    stops.first.click()
    page.get_by_text(run_status.STOPPED).wait_for()
    sidebar = page.locator('[data-testid="stSidebar"]')
    try:
        sidebar.get_by_text(re.compile(r"queue 0$")).wait_for(timeout=15_000)
    except Exception:
        page.screenshot(path=str(SHOTS / "after_stop.png"), full_page=True)
        raise AssertionError(sidebar.inner_text()) from None


def test_a_settings_change_while_streaming_says_the_run_was_interrupted(page):
    start_live_run(page, LONG_RUN)
    set_number(page, "Seed", "7")
    page.get_by_text(run_status.INTERRUPTED).wait_for(timeout=30_000)
    assert page.locator(".ss-out span").count() > 0  # what had arrived is still shown
    set_number(page, "Seed", "0")


def test_compare_summary_numbers_are_formatted(page):
    page.get_by_role("link", name="Compare").click()
    page.get_by_text("Compare drafters").wait_for()
    type_prompt(page, PROMPT)
    set_number(page, "Max new tokens", SHORT_RUN)
    page.get_by_role("button", name="Run all lanes").click()
    page.get_by_text("Summary").wait_for()
    page.get_by_test_id("glide-cell-3-0").first.wait_for(state="attached")
    page.screenshot(path=str(SHOTS / "compare_summary.png"), full_page=True)
    for row in (0, 1):
        assert re.fullmatch(r"\d+\.\d\d", cell(page, 3, row)), cell(page, 3, row)  # AL
        assert re.fullmatch(r"\d+\.\d%", cell(page, 4, row)), cell(page, 4, row)  # acceptance rate
        assert re.fullmatch(r"\d+\.\d", cell(page, 5, row)), cell(page, 5, row)  # tokens/s
        assert re.fullmatch(r"\d+\.\d\dx", cell(page, 6, row)), cell(page, 6, row)  # speedup vs plain
        assert re.fullmatch(r"\d+\.\d{3}", cell(page, 7, row)), cell(page, 7, row)  # draft overhead
