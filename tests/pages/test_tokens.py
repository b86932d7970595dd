"""Token rendering: fates of drafts, the confidence cut marker, escaping."""

from __future__ import annotations

from ui.tokens import step_html

STEP = {
    "index": 3,
    "draft_len": 6,
    "drafted_text": ["a", "<b>", "c"],
    "accepted": 1,
    "emitted": [1, 2],
    "target_text": "d",
    "target_token_prob": 0.5,
    "draft_probs": [0.9, 0.8, 0.7],
    "target_probs": [0.9, 0.1, 0.2],
}


def test_drafts_are_coloured_by_fate_and_escaped():
    html = step_html(STEP)
    assert html.index('class="ss-acc"') < html.index('class="ss-rej"') < html.index('class="ss-skip"')
    assert "&lt;b&gt;" in html and "<b>" not in html and 'class="ss-tgt"' in html and "ss-cut" not in html


def test_a_draft_cut_by_the_confidence_head_is_marked():
    html = step_html({**STEP, "stop_reason": "low-confidence"})
    assert 'class="ss-cut"' in html and "stopped the draft after 3 tokens (D = 6)" in html
