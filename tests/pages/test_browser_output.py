"""The output views in a real browser (Debian's chromium, the embedded default model): "answer only"
is the run's decoded output exactly; in "with drafts" a draft that was not kept never breaks a line
(its newlines are ↵), bonus tokens and corrections have their own styles and legend entries; and a
Max new tokens out of range is a message that keeps Run off. Every expectation is counted from the
run's stored steps, not assumed."""

from __future__ import annotations

from backend.serving.client import WorkerClient
from tests.helpers.browser import BROWSER_TEST, SHOTS
from tests.pages.test_browser_e2e import (
    FIRST_TOKEN_OF_A_NEW_RUN,
    PROMPT,
    set_draft_len,
    speedup_shown,
    type_prompt,
)
from ui.tokens import is_special

pytestmark = BROWSER_TEST

DRAWN = """() => {
    const out = document.querySelector('.ss-out[data-run]');
    const notKept = [...out.querySelectorAll('span.ss-rej, span.ss-skip')];
    const colour = (root, css) => {
        const span = root.querySelector(css);
        return span ? getComputedStyle(span).backgroundColor : null;
    };
    const legend = document.querySelector('.ss-legend');
    return {
        notKept: notKept.length,
        breaking: notKept.filter(s => s.querySelector('br') || /[\\n\\r]/.test(s.textContent)).length,
        arrows: notKept.filter(s => s.textContent.includes('↵')).length,
        bonus: out.querySelectorAll('span.ss-tgt.ss-bonus').length,
        fix: out.querySelectorAll('span.ss-tgt.ss-fix').length,
        legendBonus: legend.querySelectorAll('span.ss-tgt.ss-bonus').length,
        legendFix: legend.querySelectorAll('span.ss-tgt.ss-fix').length,
        bonusColour: colour(out, 'span.ss-bonus:not(.ss-special)'),
        fixColour: colour(out, 'span.ss-fix:not(.ss-special)'),
        legendColours: ['span.ss-bonus', 'span.ss-fix', 'span.ss-tgt:not(.ss-bonus):not(.ss-fix)'].map(
            css => colour(legend, css)),
    };
}"""


def expected_from(steps: list[dict]) -> dict:
    """What the drafts view must draw, counted from the stored steps."""
    not_kept = [t for s in steps for i, t in enumerate(s["drafted_text"] or []) if i >= s["accepted"]]
    targets = [s for s in steps if len(s["emitted"]) > s["accepted"] and s["drafted_text"]]
    return {
        "notKept": len(not_kept),
        "arrows": sum("\n" in t and not is_special(t) for t in not_kept),
        "bonus": sum(s["accepted"] == len(s["drafted_text"]) for s in targets),
        "fix": sum(s["accepted"] < len(s["drafted_text"]) for s in targets),
    }


def test_answer_only_is_the_decoded_output_and_drafts_never_break_lines(browser_page, e2e_worker):  # noqa: F811
    page = browser_page
    type_prompt(page, PROMPT)
    set_draft_len(page, 8)  # a fixed D: what auto drafts follows the step times measured on a loaded machine
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(FIRST_TOKEN_OF_A_NEW_RUN, arg="", polling=50)
    speedup_shown(page).wait_for()
    run_id = page.locator(".ss-out[data-run]").first.get_attribute("data-run")
    stored = WorkerClient(e2e_worker.url).run(run_id)
    expected = expected_from(stored["steps"])
    drawn = page.evaluate(DRAWN)
    page.screenshot(path=str(SHOTS / "output_with_drafts.png"), full_page=True)
    assert {k: drawn[k] for k in expected} == expected
    assert drawn["breaking"] == 0 and expected["arrows"] > 0  # the run has newlines in drafts not kept
    assert expected["bonus"] > 0 and expected["fix"] > 0 and drawn["legendBonus"] == drawn["legendFix"] == 1
    assert len(set(drawn["legendColours"])) == 3  # bonus, correction and a step's token without drafts differ
    assert [drawn["bonusColour"], drawn["fixColour"]] == drawn["legendColours"][:2]

    page.get_by_text("answer only", exact=True).click()
    answer = page.locator(f'.ss-out.ss-answer[data-run="{run_id}"]')
    answer.wait_for()
    assert answer.evaluate("node => node.textContent") == stored["output_text"]
    # the with-drafts spans and legend go once the rerun has finished (until then they are stale, not gone)
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for()
    assert page.locator(".ss-out span, .ss-legend").count() == 0
    page.screenshot(path=str(SHOTS / "output_answer_only.png"), full_page=True)
    page.get_by_text("with drafts", exact=True).click()
    page.locator(".ss-legend").wait_for()


def test_max_new_tokens_out_of_range_is_a_message_and_no_run_starts(browser_page, e2e_worker):  # noqa: F811
    page = browser_page
    client = WorkerClient(e2e_worker.url)
    before = len(client.runs(limit=100_000))
    box = page.get_by_label("Max new tokens", exact=True)  # not its help button
    box.fill("5000")
    box.press("Enter")
    message = page.get_by_text("Max new tokens must be between 1 and 2,048 (it is 5,000): change it to run.")
    message.wait_for()
    run = page.get_by_role("button", name="Run", exact=True)
    assert run.is_disabled()
    run.click(force=True, timeout=5_000)
    page.wait_for_timeout(1500)
    assert len(client.runs(limit=100_000)) == before and client.health()["queue_length"] == 0
    box.fill("128")
    box.press("Enter")
    message.wait_for(state="detached")
    assert run.is_enabled()
