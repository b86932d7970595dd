"""Steps as coloured tokens: accepted drafts green, the first rejected draft red, the rest of that
draft grey (both struck through: they are not part of the output), the target's own token blue.
Hovering a token shows its draft and target probabilities. A draft a confidence head cut short
(DSpark) is marked with a small scissors after it. All text is HTML-escaped."""

from __future__ import annotations

from html import escape

STYLE = """<style>
.ss-out { white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.9rem;
          line-height: 1.7; padding: 0.5rem; border: 1px solid #e3e3e3; border-radius: 0.4rem; }
.ss-out span { border-radius: 0.2rem; }
.ss-acc { background: #c9f2c7; color: #0b5d0b; }
.ss-rej { background: #ffd2d2; color: #9b1111; text-decoration: line-through; }
.ss-skip { color: #9aa0a6; text-decoration: line-through; }
.ss-tgt { background: #d3e4ff; color: #0b3d91; }
.ss-cut { color: #b26b00; font-size: 0.75rem; vertical-align: super; }
.ss-turn { display: block; color: #666; font-style: italic; margin: 0.4rem 0; }
.ss-legend span { padding: 0 0.4rem; margin-right: 0.4rem; }
</style>"""

LEGEND = (
    '<div class="ss-legend"><span class="ss-acc">accepted draft</span><span class="ss-rej">rejected draft'
    '</span><span class="ss-skip">discarded after a rejection</span><span class="ss-tgt">target\'s own '
    'token</span><span class="ss-cut">✂</span>draft cut short by the drafter\'s confidence</div>'
)


def _prob(values: list | None, i: int) -> str:
    return f"{values[i]:.3f}" if values is not None and i < len(values) and values[i] is not None else "n/a"


def _span(css: str, text: str, title: str) -> str:
    return f'<span class="{css}" title="{escape(title, quote=True)}">{escape(text)}</span>'


def step_html(step: dict) -> str:
    """One engine step: its drafts (coloured by fate) then the target's token."""
    drafted_text, accepted = step.get("drafted_text") or [], step["accepted"]
    emitted = len(step["emitted"])
    parts = []
    for i, text in enumerate(drafted_text):
        title = (
            f"step {step['index']} · draft {i + 1}: draft q={_prob(step.get('draft_probs'), i)} · "
            f"target p={_prob(step.get('target_probs'), i)}"
        )
        if i < accepted:
            if i < emitted:
                parts.append(_span("ss-acc", text, title))
        elif i == accepted:
            parts.append(_span("ss-rej", text, title + " · rejected"))
        else:
            parts.append(_span("ss-skip", text, title + " · discarded"))
    if step.get("stop_reason") == "low-confidence":
        parts.append(
            _span(
                "ss-cut",
                "✂",
                f"step {step['index']} · the drafter's confidence head stopped the draft "
                f"after {len(drafted_text)} tokens (D = {step.get('draft_len')})",
            )
        )
    if emitted > accepted:
        kind = "bonus (all drafts accepted)" if accepted == len(drafted_text) and drafted_text else "target's token"
        title = f"step {step['index']} · {kind}: target p={step.get('target_token_prob', 0):.3f}"
        parts.append(_span("ss-tgt", step.get("target_text", ""), title))
    return "".join(parts)


def steps_html(steps: list[dict]) -> str:
    """The whole output so far; the container carries the run id (data-run) of its steps."""
    body, turn = [], None
    for step in steps:
        if step.get("turn", 0) != turn:
            turn = step.get("turn", 0)
            if turn:
                body.append(f'<span class="ss-turn">— turn {turn + 1} —</span>')
        body.append(step_html(step))
    run = escape(str(steps[0].get("run_id", "")), quote=True) if steps else ""
    return f'{STYLE}<div class="ss-out" data-run="{run}">{"".join(body)}</div>'
