"""Token rendering: fates of drafts, bonus vs correction, whitespace and special tokens in drafts that
were not kept, the confidence cut marker, the answer-only view, escaping."""

from __future__ import annotations

import re

from ui.tokens import (
    ANSWER_ONLY,
    LEGEND,
    WITH_DRAFTS,
    answer_html,
    committed_text,
    is_special,
    output_html,
    step_html,
    steps_html,
)

STEP = {
    "index": 3,
    "draft_len": 6,
    "drafted_text": ["a", "<b>", "c"],
    "accepted": 1,
    "emitted": [1, 2],
    "emitted_text": ["a", "d"],
    "target_text": "d",
    "target_token_prob": 0.5,
    "draft_probs": [0.9, 0.8, 0.7],
    "target_probs": [0.9, 0.1, 0.2],
}


def spans(html: str) -> list[tuple[str, str]]:
    """(class, text) of each token span."""
    return re.findall(r'<span class="([^"]+)" title="[^"]*">([^<]*)</span>', html)


def test_drafts_are_coloured_by_fate_and_escaped():
    html = step_html(STEP)
    assert html.index('class="ss-acc"') < html.index('class="ss-rej"') < html.index('class="ss-skip"')
    assert "&lt;b&gt;" in html and "<b>" not in html and "ss-cut" not in html


def test_the_target_token_is_a_correction_a_bonus_or_a_plain_token():
    assert spans(step_html(STEP))[-1] == ("ss-tgt ss-fix", "d")
    bonus = {**STEP, "accepted": 3, "emitted": [1, 2, 3, 4], "emitted_text": ["a", "<b>", "c", "d"]}
    assert spans(step_html(bonus)) == [
        ("ss-acc", "a"),
        ("ss-acc", "&lt;b&gt;"),
        ("ss-acc", "c"),
        ("ss-tgt ss-bonus", "d"),
    ]
    assert "after all 3 drafts were accepted" in step_html(bonus)
    plain = {**STEP, "drafted_text": [], "accepted": 0, "emitted": [4], "emitted_text": ["d"]}
    assert spans(step_html(plain)) == [("ss-tgt", "d")]
    assert "no drafts this step)" in step_html(plain)
    overflowed = step_html({**plain, "stop_reason": "overflow"})
    assert "no drafts this step: a float16 pass of the drafter overflowed)" in overflowed
    assert 'class="ss-tgt ss-bonus"' in LEGEND and 'class="ss-tgt ss-fix"' in LEGEND


def test_newlines_and_tabs_in_drafts_not_kept_are_symbols_and_kept_text_keeps_them():
    step = {**STEP, "drafted_text": ["x\n", "\n\tif", "y\r\n"], "emitted_text": ["x\n", "d\n"], "target_text": "d\n"}
    drawn = dict((css, text) for css, text in spans(step_html(step)))
    assert drawn == {"ss-acc": "x\n", "ss-rej": "↵→if", "ss-skip": "y␍↵", "ss-tgt ss-fix": "d\n"}


def test_special_tokens_are_chips_wherever_they_are():
    step = {
        **STEP,
        "drafted_text": ["<|im_end|>", "</s>", "<|im_start|>"],
        "emitted_text": ["<|im_end|>", "<eos>"],
        "target_text": "<eos>",
    }
    assert spans(step_html(step)) == [
        ("ss-acc ss-special", "&lt;|im_end|&gt;"),
        ("ss-rej ss-special", "&lt;/s&gt;"),
        ("ss-skip ss-special", "&lt;|im_start|&gt;"),
        ("ss-tgt ss-fix ss-special", "&lt;eos&gt;"),
    ]
    assert is_special("<|endoftext|>") and not is_special("<b>") and not is_special("a <|im_end|>")


def test_a_draft_cut_by_the_confidence_head_is_marked():
    html = step_html({**STEP, "stop_reason": "low-confidence"})
    assert 'class="ss-cut"' in html and "stopped the draft after 3 tokens (D = 6)" in html


def test_committed_text_leaves_special_tokens_out_and_joins_turns_like_the_decoded_output():
    steps = [
        {**STEP, "turn": 0, "emitted_text": ["Hi", " there"]},
        {**STEP, "turn": 0, "emitted_text": ["<|im_end|>"]},
        {**STEP, "turn": 1, "emitted_text": ["\n", "Bye"]},
    ]
    assert committed_text(steps) == "Hi there\n\n\nBye"


def test_answer_only_shows_the_decoded_output_when_known_escaped():
    steps = [{**STEP, "run_id": "r1", "emitted_text": ["w5", "w9"]}]
    assert answer_html(steps).endswith('<div class="ss-out ss-answer" data-run="r1">w5w9</div>')
    decoded = answer_html(steps, "w5 w9 <img src=x onerror=alert(1)>\n")
    assert decoded.endswith(">w5 w9 &lt;img src=x onerror=alert(1)&gt;\n</div>") and "<img" not in decoded


def test_output_html_picks_the_view():
    steps = [{**STEP, "run_id": "r2"}]
    assert output_html(steps, WITH_DRAFTS) == steps_html(steps)
    assert output_html(steps, ANSWER_ONLY, "ad") == answer_html(steps, "ad")
    assert output_html([], ANSWER_ONLY, empty="Press Run <now>").endswith(
        '<div class="ss-out">Press Run &lt;now&gt;</div>'
    )
