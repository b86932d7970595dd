"""Prompt suites and conversations."""

import json

import pytest

from backend.core.errors import SpecScopeError
from backend.lab.prompts import DEFAULT_SUITE, encode_conversation, load_suite
from tests.helpers.tiny import tiny_tokenizer

REQUIRED = {"coding", "code_editing", "summarization", "rag", "translation", "qa", "math", "writing", "multi_turn"}


def test_shipped_suite_has_ten_prompts_in_every_required_category():
    questions = load_suite(DEFAULT_SUITE)
    counts = {c: sum(q.category == c for q in questions) for c in REQUIRED}
    assert all(n >= 10 for n in counts.values()), counts
    assert len({q.question_id for q in questions}) == len(questions)
    assert all(len(q.turns) == 2 for q in questions if q.category == "multi_turn")


def test_filters_and_limit():
    math = load_suite(DEFAULT_SUITE, categories=["math"], limit=3)
    assert len(math) == 3 and {q.category for q in math} == {"math"}
    two_each = load_suite(DEFAULT_SUITE, per_category=2)
    assert all(sum(q.category == c for q in two_each) == 2 for c in REQUIRED)
    with pytest.raises(SpecScopeError, match="no prompts in categories"):
        load_suite(DEFAULT_SUITE, categories=["astrology"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"category": "x", "turns": ["a"]}), "question_id"),
        (json.dumps({"question_id": 1, "turns": []}), "non-empty list"),
        (json.dumps({"question_id": 1, "turns": ["ok", "  "]}), "non-empty"),
    ],
)
def test_bad_lines_name_the_file_and_line(tmp_path, line, message):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"question_id": 0, "category": "qa", "turns": ["fine"]}) + "\n" + line + "\n")
    with pytest.raises(SpecScopeError, match=f"suite.jsonl:2: .*{message}"):
        load_suite(suite)


def test_missing_suite():
    with pytest.raises(SpecScopeError, match="no such prompt suite"):
        load_suite("/nowhere/suite.jsonl")


def test_any_file_in_the_format_loads(tmp_path):
    suite = tmp_path / "question.jsonl"
    suite.write_text(json.dumps({"question_id": 81, "category": "writing", "turns": ["a", "b"]}) + "\n\n")
    [question] = load_suite(suite)
    assert (question.question_id, question.category, question.turns) == (81, "writing", ("a", "b"))


def test_second_turn_sees_the_first_answer():
    tokenizer = tiny_tokenizer()
    first = encode_conversation(tokenizer, ["w5 w6"], [])
    second = encode_conversation(tokenizer, ["w5 w6", "w9"], ["w7 w8"])
    assert tokenizer.decode(first) == "<user> w5 w6 <bot>"
    assert tokenizer.decode(second) == "<user> w5 w6 <bot> w7 w8 <user> w9 <bot>"


def test_without_a_chat_template_the_prompt_is_raw():
    tokenizer = tiny_tokenizer()
    assert tokenizer.decode(encode_conversation(tokenizer, ["w5 w6"], [], use_chat_template=False)) == "w5 w6"
