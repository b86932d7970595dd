"""A run's output as HTML, in two views. "answer only": the committed text, exactly the run's decoded
output once its summary is known. "with drafts": every step coloured by fate. Accepted drafts green;
the first rejected draft red and the rest of that draft grey (both struck through: they are not part
of the output, and a newline or tab inside them is drawn as ↵ or → so it cannot break the line); the
target's own token amber when it corrects a rejection, violet when it is the bonus after every draft
was accepted, blue on a step without drafts. Special tokens (`<|im_end|>`, `</s>`, ...) are small
chips. Hovering a token shows its draft and target probabilities; a draft a confidence head cut short
(DSpark) is marked with a small scissors. A token-tree step shows its kept path, the alternatives
rejected where the path stopped, the target's token, and a small fan (⋔ and the node count) whose
hover lists every branch of the tree. All text is HTML-escaped.

Knows only the step records' fields (token texts, counts of accepted and emitted tokens), not the
tokenizer: a special token is recognised by its text.
"""

from __future__ import annotations

import re
from html import escape

from backend.core.tree_shape import children
from ui.trees import branches_text, is_tree_step

WITH_DRAFTS, ANSWER_ONLY = "with drafts", "answer only"
VIEWS = (WITH_DRAFTS, ANSWER_ONLY)
TURN_JOIN = "\n\n"  # how a run's decoded output joins its turns' answers

# a token whose whole text is a chat-template or sentence marker: <|im_end|>, <|endoftext|>, </s>, <eos> ...
SPECIAL = re.compile(r"<\|[^<>|\s]{1,48}\|>|</?s>|<(?:unk|pad|bos|eos|start_of_turn|end_of_turn)>")
VISIBLE_WHITESPACE = str.maketrans({"\n": "↵", "\r": "␍", "\t": "→"})

STYLE = """<style>
.ss-out { white-space: pre-wrap; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.9rem;
          line-height: 1.7; padding: 0.5rem; border: 1px solid #e3e3e3; border-radius: 0.4rem; }
.ss-out span { border-radius: 0.2rem; }
.ss-acc { background: #c9f2c7; color: #0b5d0b; }
.ss-rej { background: #ffd2d2; color: #9b1111; text-decoration: line-through; }
.ss-skip { color: #9aa0a6; text-decoration: line-through; }
.ss-tgt { background: #d3e4ff; color: #0b3d91; }
.ss-tgt.ss-fix { background: #ffe3b3; color: #7a4100; }
.ss-tgt.ss-bonus { background: #e6d8ff; color: #4a1d96; font-weight: 600; }
.ss-special { font-size: 0.7rem; padding: 0 0.3rem; border: 1px solid currentColor; border-radius: 0.6rem;
              vertical-align: 0.1rem; }
.ss-cut { color: #b26b00; font-size: 0.75rem; vertical-align: super; }
.ss-fan { color: #555; font-size: 0.7rem; vertical-align: super; padding: 0 0.15rem; cursor: help; }
.ss-turn { display: block; color: #666; font-style: italic; margin: 0.4rem 0; }
.ss-legend { line-height: 1.9; }
.ss-legend span { padding: 0 0.4rem; margin-right: 0.4rem; }
</style>"""

LEGEND = (
    '<div class="ss-legend"><span class="ss-acc">accepted draft</span>'
    '<span class="ss-rej">rejected draft</span><span class="ss-skip">discarded after a rejection</span>'
    '<span class="ss-tgt ss-fix">correction: the target\'s token at the rejection</span>'
    '<span class="ss-tgt ss-bonus">bonus: the target\'s extra token, all drafts accepted</span>'
    '<span class="ss-tgt">target\'s token, no drafts</span>'
    '<span class="ss-special" title="a token the tokenizer marks special, e.g. &lt;|im_end|&gt;">special token</span>'
    '<span class="ss-cut">✂</span>draft cut short by the drafter\'s confidence · '
    '<span class="ss-fan">⋔8</span>a token tree of 8 drafts (hover: its branches) · ↵ and → are a newline and '
    "a tab inside a draft that was not kept</div>"
)


def is_special(text: str) -> bool:
    return SPECIAL.fullmatch(text) is not None


def _prob(values: list | None, i: int) -> str:
    return f"{values[i]:.3f}" if values is not None and i < len(values) and values[i] is not None else "n/a"


def _span(css: str, text: str, title: str, kept: bool = True) -> str:
    """One token; a token not kept shows its newlines and tabs as symbols, a special token is a chip."""
    if is_special(text):
        css += " ss-special"
    elif not kept:
        text = text.translate(VISIBLE_WHITESPACE)
    return f'<span class="{css}" title="{escape(title, quote=True)}">{escape(text)}</span>'


def step_html(step: dict) -> str:
    """One engine step: its drafts (coloured by fate) then the target's token."""
    if is_tree_step(step):
        return tree_step_html(step)
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
            parts.append(_span("ss-rej", text, title + " · rejected", kept=False))
        else:
            parts.append(_span("ss-skip", text, title + " · discarded", kept=False))
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
        if not drafted_text:
            why = ": a float16 pass of the drafter overflowed" if step.get("stop_reason") == "overflow" else ""
            css, kind = "ss-tgt", f"target's token (no drafts this step{why})"
        elif accepted == len(drafted_text):
            css, kind = "ss-tgt ss-bonus", f"bonus: the target's extra token after all {accepted} drafts were accepted"
        else:
            css, kind = "ss-tgt ss-fix", f"correction: the target's token at rejected draft {accepted + 1}"
        title = f"step {step['index']} · {kind}: target p={step.get('target_token_prob', 0):.3f}"
        parts.append(_span(css, step.get("target_text", ""), title))
    return "".join(parts)


def tree_step_html(step: dict) -> str:
    """A token-tree step: the kept path, the rejected children of its last node, the target's token
    (the bonus when that node had no children), then the fan whose hover lists every branch."""
    texts, parents = step.get("drafted_text") or [], list(step["parents"])
    path, emitted = list(step.get("accepted_path") or []), len(step["emitted"])
    where = f"step {step['index']} · tree of {len(parents)} drafts"
    parts = []
    for position, node in enumerate(path[:emitted]):
        title = f"{where} · node {node + 1}, kept at depth {position + 1}: {_probs(step, node)}"
        parts.append(_span("ss-acc", texts[node], title))
    last = path[-1] if path else -1
    rejected = children(parents)[last + 1]  # the path stopped here: every child of its last node was rejected
    if emitted > len(path):
        for node in rejected:
            title = f"{where} · node {node + 1}, rejected: {_probs(step, node)}"
            parts.append(_span("ss-rej", texts[node], title, kept=False))
        css, kind = ("ss-tgt ss-fix", "correction") if rejected else ("ss-tgt ss-bonus", "bonus")
        title = f"{where} · the target's {kind} after the kept path: target p={step.get('target_token_prob', 0):.3f}"
        parts.append(_span(css, step.get("target_text", ""), title))
    fan = f'<span class="ss-fan" title="{escape(branches_text(step), quote=True)}">⋔{len(parents)}</span>'
    return "".join(parts) + fan


def _probs(step: dict, node: int) -> str:
    return f"draft q={_prob(step.get('draft_probs'), node)} · target p={_prob(step.get('target_probs'), node)}"


def _run_id(steps: list[dict]) -> str:
    return escape(str(steps[0].get("run_id", "")), quote=True) if steps else ""


def steps_html(steps: list[dict]) -> str:
    """The "with drafts" view; the container carries the run id (data-run) of its steps."""
    body, turn = [], None
    for step in steps:
        if step.get("turn", 0) != turn:
            turn = step.get("turn", 0)
            if turn:
                body.append(f'<span class="ss-turn">— turn {turn + 1} —</span>')
        body.append(step_html(step))
    return f'{STYLE}<div class="ss-out" data-run="{_run_id(steps)}">{"".join(body)}</div>'


def committed_text(steps: list[dict]) -> str:
    """The committed tokens' texts joined, special tokens left out, turns joined as the decoded output
    joins them. Each token was decoded alone, so this can differ from decoding the ids at once (a
    character split over two tokens, a tokenizer that joins words with spaces): the stand-in while a
    run streams, replaced by the run's decoded output when it ends."""
    turns: dict[int, list[str]] = {}
    for step in steps:
        texts = step.get("emitted_text") or []
        turns.setdefault(step.get("turn", 0), []).extend(t for t in texts if not is_special(t))
    return TURN_JOIN.join("".join(pieces) for _, pieces in sorted(turns.items()))


def answer_html(steps: list[dict], text: str | None = None) -> str:
    """The "answer only" view: `text` (the run's decoded output) when known, else the committed text."""
    shown = committed_text(steps) if text is None else text
    return f'{STYLE}<div class="ss-out ss-answer" data-run="{_run_id(steps)}">{escape(shown)}</div>'


def output_html(steps: list[dict], view: str, text: str | None = None, empty: str = "") -> str:
    """The output in `view` (WITH_DRAFTS or ANSWER_ONLY); `text` is the run's decoded output once it has
    ended (None while it streams); `empty` is shown while there are no steps."""
    if not steps and empty:
        return f'{STYLE}<div class="ss-out">{escape(empty)}</div>'
    return answer_html(steps, text) if view == ANSWER_ONLY else steps_html(steps)
