"""In a real browser (Debian's chromium): the sidebar's page links carry Material icons, never emoji (which
draw as empty boxes on a machine without an emoji font), and the toolbar offers no Deploy button."""

from __future__ import annotations

import re

from tests.helpers.browser import BROWSER_TEST

# pictographs, symbols and dingbats, geometric shapes, arrows-as-emoji, variation selector 16
EMOJI = re.compile("[\U0001f000-\U0001faff\u2190-\u21ff\u2300-\u23ff\u25a0-\u27bf\u2b00-\u2bff\ufe0f]")

pytestmark = BROWSER_TEST


def test_the_sidebar_pages_have_material_icons_and_no_emoji(browser_page):
    page = browser_page
    links = page.locator('[data-testid="stSidebarNavLink"]')
    links.first.wait_for()
    assert links.count() >= 6
    for index in range(links.count()):
        link = links.nth(index)
        assert link.locator('[data-testid="stIconMaterial"]').count() == 1, link.inner_text()
        assert link.locator('[data-testid="stIconEmoji"]').count() == 0, link.inner_text()
    text = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert not EMOJI.search(text), text
    for title in ("Live", "Compare", "Acceptance", "Pareto", "Co-design", "History"):
        assert links.filter(has_text=title).count() == 1, title


def test_the_toolbar_has_no_deploy_button(browser_page):
    page = browser_page
    page.locator('[data-testid="stHeader"]').wait_for(state="attached")
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    assert page.get_by_role("button", name="Deploy").count() == 0
