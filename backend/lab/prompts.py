"""Prompt suites and conversations: from text turns to the token ids the engine decodes.

Suites use the MT-Bench / Spec-Bench `question.jsonl` format: one JSON object per line with
`question_id`, `category` and `turns` (a list of user messages). Multi-turn prompts are answered
turn by turn: turn 2 is sent with the model's own answer to turn 1 in the conversation.

Instruct models get their chat template; a model without one (a base model) gets the turns and
answers joined by blank lines. This module knows nothing about drafting or acceptance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.errors import SpecScopeError
from backend.core.paths import shipped_data

if TYPE_CHECKING:  # the dashboard imports this module; it must not pull in transformers
    from transformers import PreTrainedTokenizerBase

SUITE_DIR = shipped_data() / "prompts"
DEFAULT_SUITE = SUITE_DIR / "specscope_suite.jsonl"


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]


def load_suite(
    path: str | Path, categories: list[str] | None = None, limit: int | None = None, per_category: int | None = None
) -> list[Question]:
    """Read a question.jsonl file; keep the given categories (all if None), the first `per_category`
    prompts of each category, then the first `limit` prompts."""
    path = Path(path)
    if not path.is_file():
        raise SpecScopeError(f"no such prompt suite: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SpecScopeError(f"{path} is not UTF-8 text: a suite is a question.jsonl file") from error
    questions = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        questions.append(_parse_question(line, f"{path}:{number}"))
    if categories:
        unknown = set(categories) - {q.category for q in questions}
        if unknown:
            raise SpecScopeError(
                f"{path} has no prompts in categories {sorted(unknown)}; it has "
                f"{sorted({q.category for q in questions})}"
            )
        questions = [q for q in questions if q.category in categories]
    if per_category is not None:
        seen: dict[str, int] = {}
        kept = []
        for question in questions:
            seen[question.category] = seen.get(question.category, 0) + 1
            if seen[question.category] <= per_category:
                kept.append(question)
        questions = kept
    questions = questions[:limit] if limit is not None else questions
    if not questions:
        raise SpecScopeError(f"{path} has no prompts to run")
    return questions


def _parse_question(line: str, where: str) -> Question:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise SpecScopeError(f"{where}: not valid JSON ({error.msg})") from error
    if not isinstance(record, dict) or not {"question_id", "turns"} <= record.keys():
        raise SpecScopeError(f"{where}: each line needs `question_id` and `turns` (and usually `category`)")
    turns = record["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise SpecScopeError(f"{where}: `turns` must be a non-empty list of non-empty strings")
    return Question(record["question_id"], str(record.get("category", "uncategorized")), tuple(turns))


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase, turns: list[str], answers: list[str], use_chat_template: bool = True
) -> list[int]:
    """Token ids for the conversation so far, ending where the model's next answer begins.

    `turns` are the user messages up to the current one; `answers` the model's answers to all but
    the last of them."""
    if len(answers) != len(turns) - 1:
        raise ValueError("need exactly one answer for every turn but the last")
    if use_chat_template and tokenizer.chat_template:
        messages = []
        for turn, answer in zip(turns, [*answers, None], strict=True):
            messages.append({"role": "user", "content": turn})
            if answer is not None:
                messages.append({"role": "assistant", "content": answer})
        encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
        return list(encoded["input_ids"])
    if len(turns) == 1:
        return tokenizer(turns[0])["input_ids"]  # a raw prompt, continued as it is
    pieces = [piece for pair in zip(turns, [*answers, ""], strict=True) for piece in pair if piece]
    return tokenizer("\n\n".join(pieces) + "\n\n")["input_ids"]


def first_turn_ids(tokenizer: PreTrainedTokenizerBase, question: Question) -> list[int]:
    """Token ids of a question's first turn asked alone: the single-turn prompt sweeps and cards use."""
    return encode_conversation(tokenizer, [question.turns[0]], [])
