"""The chat part of the training corpus: every suite category, deterministic, held out from the
evaluation suites (and refused when a suite prompt leaks in), multi-turn instructions whose prompt holds
every turn, and the `training-data` command that writes and counts it. No model is loaded."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import Counter

import pytest

from backend.core.errors import SpecScopeError
from backend.lab.prompts import DEFAULT_SUITE, SUITE_DIR, encode_conversation, load_suite
from backend.training import corpus
from backend.training.chat_corpus import chat_lists, fill
from backend.training.corpus import Instruction, build_instructions, held_out
from tests.helpers.tiny import tiny_tokenizer

SUITE_CATEGORIES = sorted({question.category for question in load_suite(DEFAULT_SUITE)})


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return build_instructions()


def test_every_suite_category_has_many_distinct_instructions(instructions):
    counts = Counter(i.category for i in instructions)
    assert len(SUITE_CATEGORIES) == 9 and set(counts) == {*SUITE_CATEGORIES, "python-docs"}
    assert all(counts[category] >= 150 for category in SUITE_CATEGORIES), counts
    assert 2000 <= sum(counts[c] for c in SUITE_CATEGORIES) <= 6000
    chat = [i for i in instructions if i.category != "python-docs"]
    assert len({(i.history, i.text) for i in chat}) == len(chat)
    assert len({i.instruction_id for i in instructions}) == len(instructions)
    for category in SUITE_CATEGORIES:  # each category is validated on some of its own prompts
        assert any(i.split == "validation" for i in instructions if i.category == category), category


def test_chat_instructions_have_the_forms_of_their_category(instructions):
    by_category: dict[str, list[Instruction]] = {}
    for instruction in instructions:
        by_category.setdefault(instruction.category, []).append(instruction)
    assert all(i.source.startswith(("doc:", "code:")) and not i.history for i in by_category["python-docs"])
    for category in SUITE_CATEGORIES:
        chat = by_category[category]
        assert all(i.source.startswith(f"chat:{category}.") for i in chat)
        assert all(bool(i.history) == (category == "multi_turn") for i in chat)
    assert all(i.text.startswith(("Write ", "Please write ")) for i in by_category["coding"])
    assert all("```python\n" in i.text and "```\n\n" in i.text for i in by_category["code_editing"])
    assert all(i.text.startswith("Context:\n[1] ") and "\n\nQuestion: " in i.text for i in by_category["rag"])
    languages = chat_lists()["languages"]
    assert all(any(f" {language}" in i.text for language in languages) for i in by_category["translation"])
    assert all("ummar" in i.text.rsplit("\n\n", 1)[-1] or "TL;DR" in i.text for i in by_category["summarization"])
    assert all(any(ch.isdigit() for ch in i.text) for i in by_category["math"])
    built_on_python = ("chat:translation.doc:", "chat:summarization.doc:", "chat:rag.doc:", "chat:multi_turn.code:")
    assert all(any(i.source.startswith(prefix) for i in instructions) for prefix in built_on_python)


def test_the_corpus_is_deterministic_and_the_seed_only_shuffles(instructions):
    again = build_instructions()
    assert again == instructions
    reshuffled = build_instructions(seed=1)
    assert reshuffled != instructions
    assert Counter((i.source, i.history, i.text) for i in reshuffled) == Counter(
        (i.source, i.history, i.text) for i in instructions
    )


def test_no_instruction_contains_an_evaluation_prompt(instructions):
    haystack = "\x00".join(turn for i in instructions for turn in (i.text, *(t for pair in i.history for t in pair)))
    for suite in sorted(SUITE_DIR.glob("*.jsonl")):
        for question in load_suite(suite):
            assert not any(turn[:120] in haystack for turn in question.turns), question.question_id


@pytest.mark.parametrize("where", ["text", "history question", "history answer"])
def test_a_leaked_suite_prompt_is_refused(monkeypatch, where):
    leaked = [q for q in load_suite(DEFAULT_SUITE) if q.category == "multi_turn"][0].turns[1]
    history = {"text": (), "history question": ((leaked, "An answer."),), "history answer": (("Hi.", leaked),)}
    text = leaked if where == "text" else "Make it shorter."
    monkeypatch.setattr(
        corpus, "chat_items", lambda docs, functions: [("multi_turn", "chat:leak", history[where], text)]
    )
    with pytest.raises(ValueError, match="leaked into the corpus"):
        build_instructions()


def test_multi_turn_prompts_hold_every_turn(instructions):
    tokenizer = tiny_tokenizer()
    two_turns = Instruction("t0", "test", "w5 w6", "multi_turn", (("w7 w8", "w9 w10"),))
    assert two_turns.prompt_ids(tokenizer) == [2, 7, 8, 3, 9, 10, 2, 5, 6, 3]  # <user> .. <bot> .. <user> .. <bot>
    single = Instruction("t1", "test", "w11 w12")
    assert single.prompt_ids(tokenizer) == encode_conversation(tokenizer, ["w11 w12"], [])

    class Characters:
        """A tokenizer with a chat template whose ids are the characters of the conversation."""

        chat_template = "characters"

        def apply_chat_template(self, messages, add_generation_prompt, return_dict):
            text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>" * add_generation_prompt
            return {"input_ids": [ord(character) for character in text]}

    multi_turn = [i for i in instructions if i.category == "multi_turn"]
    for instruction in multi_turn[:40]:
        (question, answer), follow_up = instruction.history[0], instruction.text
        prompt = "".join(map(chr, instruction.prompt_ids(Characters())))
        assert prompt == f"<user>{question}<assistant>{answer}<user>{follow_up}<assistant>"
        assert len(answer) > 100  # a real answer (a function, a documentation piece, a passage), not a stub


def test_splits_of_single_turn_instructions_hash_only_the_text_and_history_counts():
    text = "Write a haiku about a kettle."
    expected = "validation" if int(hashlib.sha256(text.encode()).hexdigest(), 16) % 12 == 0 else "train"
    assert Instruction("a", "test", text).split == expected
    splits = {Instruction("b", "test", text, "multi_turn", ((f"Question {n}?", "Answer."),)).split for n in range(60)}
    assert splits == {"train", "validation"}  # the history moves a follow-up between splits


def test_template_slots_are_drawn_consistently():
    rng = random.Random(3)
    pattern = re.compile(r"(\w+) and (\w+) meet in ([A-Z ]+); (\w+) pays (\d)\. (.+)")
    for _ in range(50):
        text = fill("{names} and {names.2} meet in {TOWNS}; {names} pays {#3-5}. {Events}", rng)
        first, second, _, payer, amount, event = pattern.fullmatch(text).groups()
        assert first != second and payer == first and amount in "345" and event[0].isupper()
    assert fill("{x} {names}", rng, x="{towns}").startswith("{towns} ")  # given values go in verbatim


def test_training_data_command_writes_the_counted_corpus(tmp_path, capsys):
    from backend.cli.main import build_parser

    out = tmp_path / "corpus.jsonl"
    args = build_parser().parse_args(["training-data", "--out", str(out)])
    assert args.handler(args) == 0
    printed = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert printed[-1] == f"sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}"
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in printed[1:-1]}
    for category in [*SUITE_CATEGORIES, "python-docs"]:
        train = sum(1 for r in records if r["category"] == category and r["split"] == "train")
        validation = sum(1 for r in records if r["category"] == category and r["split"] == "validation")
        assert rows[category] == [train, validation, train + validation]
    assert rows["all"][2] == len(records) == len(build_instructions())
    assert set(records[0]) == {"id", "category", "source", "split", "history", "text"}
    assert all(len(r["history"]) == 1 and len(r["history"][0]) == 2 for r in records if r["category"] == "multi_turn")
    with pytest.raises(SpecScopeError, match="does not exist"):
        args.handler(argparse.Namespace(out=tmp_path / "missing" / "corpus.jsonl", seed=0))


def test_validation_is_taken_a_category_at_a_time():
    instructions = build_instructions()
    validation = held_out(instructions)
    categories = {i.category for i in instructions}
    assert {i.category for i in validation[: len(categories)]} == categories
    assert sorted(i.instruction_id for i in validation) == sorted(
        i.instruction_id for i in instructions if i.split == "validation"
    )
