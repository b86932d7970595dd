"""The Co-design page in a real browser (the browser fixtures of tests/pages/conftest.py: Debian's chromium, the
dashboard and a worker serving the embedded default model): the default target's empty ladder is
explained, and a what-if with 64 query heads and 8 KV heads typed by hand gives D = 15 and the ladder
15, 31, 47, 63, with its KV-cache cost and no speedup curve."""

from __future__ import annotations

from tests.helpers.browser import BROWSER_TEST, SHOTS

pytestmark = BROWSER_TEST


def open_codesign(page) -> None:
    page.get_by_role("link", name="Co-design").click()
    page.get_by_text("Co-design: choosing D for a target").wait_for()


def ladder_text(page) -> str:
    """The whole "D ladder: ..." paragraph (its first words are bold: a text match alone finds only them)."""
    return page.locator('[data-testid="stMarkdownContainer"] p', has_text="D ladder").first.text_content()


def type_number(page, label: str, value: int) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")


def test_default_target_explains_its_empty_ladder(browser_page):
    page = browser_page
    open_codesign(page)
    page.get_by_text("Suggested D = 41", exact=False).wait_for()  # SmolLM2-135M: 9 query heads, 3 KV heads
    ladder = ladder_text(page)
    assert "none." in ladder and "127" in ladder, ladder


def test_what_if_with_typed_heads(browser_page):
    page = browser_page
    open_codesign(page)
    page.get_by_text("Heads typed by hand", exact=True).click()
    type_number(page, "Query heads", 64)
    type_number(page, "KV heads", 8)
    page.get_by_text("Suggested D = 15", exact=False).wait_for()
    ladder = ladder_text(page)
    assert ladder.endswith("15, 31, 47, 63"), ladder
    page.get_by_text("Nothing is measured for a what-if architecture", exact=False).wait_for()
    assert page.locator(".js-plotly-plot").count() == 0
    page.get_by_text("KV-cache cost of D", exact=True).wait_for()
    page.screenshot(path=str(SHOTS / "codesign_what_if.png"), full_page=True)
