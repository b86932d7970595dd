"""The long input-length split (data/prompts/specscope_long.jsonl) and the script that builds it."""

import pytest

from backend.lab.prompts import DEFAULT_SUITE, encode_conversation, load_suite
from backend.lab.sweep import split_of
from scripts.build_long_prompts import LONG_SUITE, MAX_TOKENS, build, prompt_tokens, render
from tests.helpers.tiny import tiny_tokenizer


def test_long_suite_loads_single_turn_prompts_in_the_short_suites_categories():
    questions = load_suite(LONG_SUITE)
    categories = {q.category for q in questions}
    assert len(questions) >= 12 and all(len(q.turns) == 1 for q in questions)
    assert len(categories) >= 3 and categories <= {q.category for q in load_suite(DEFAULT_SUITE)}


def test_question_ids_are_distinct_and_do_not_collide_with_the_short_suite():
    ids = [q.question_id for q in load_suite(LONG_SUITE)]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & {q.question_id for q in load_suite(DEFAULT_SUITE)}


def test_build_is_deterministic_and_equals_the_committed_file():
    first = render(build(load_suite(DEFAULT_SUITE)))
    assert first == render(build(load_suite(DEFAULT_SUITE))) == LONG_SUITE.read_text(encoding="utf-8")


def test_build_fails_loudly_on_a_prompt_outside_the_bounds():
    with pytest.raises(ValueError, match="7: 4$"):
        prompt_tokens([{"question_id": 7, "turns": ["w5 w6"]}], tiny_tokenizer())


@pytest.mark.slow
def test_every_prompt_is_in_the_long_split_for_the_default_model(default_model):
    for question in load_suite(LONG_SUITE):
        tokens = len(encode_conversation(default_model.tokenizer, list(question.turns), []))
        assert split_of(tokens) == "long" and tokens <= MAX_TOKENS, (question.question_id, tokens)
