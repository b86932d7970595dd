"""Requests the target writes itself: the line a completion is read as, ROUGE-L and the near-copy filter, the
loop that asks for them (every category, no copies, no suite prompt, examples from one category's templates,
a bounded number of attempts), the cache every later run reads, and `train --self-instruct` distilling
them as their own source. A scripted writer stands in for the target; the real default target writes a
handful in the slow set."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from backend.lab.prompts import DEFAULT_SUITE, load_suite
from backend.training import self_instruct
from backend.training.corpus import build_instructions
from backend.training.self_instruct import (
    ATTEMPTS_PER_REQUEST,
    EXAMPLES,
    MAX_SIMILARITY,
    SELF_CATEGORIES,
    is_near_copy,
    parse_request,
    request_prompt,
    request_words,
    rouge_l,
    seed_requests,
    write_requests,
    written_requests,
)
from tests.helpers.cli import run_main
from tests.helpers.tiny import save_tiny

LISTED = re.compile(r"^Request \d+: (.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def instructions():
    return build_instructions()


class ScriptedWriter:
    """Stands in for the target: answers each prompt with the next of a script of completions, recording the
    prompts it was shown."""

    def __init__(self, make) -> None:
        self.make, self.prompts = make, []

    def __call__(self, target, prompts: list[str]) -> list[str]:
        completions = [self.make(len(self.prompts) + rank, prompt) for rank, prompt in enumerate(prompts)]
        self.prompts += prompts
        return completions


def fresh_request(number: int, prompt: str) -> str:
    """A request no template and no earlier answer resembles (distinct invented words), or now and then one of
    the things the filters must drop."""
    words = " ".join(f"zq{number}x{k}" for k in range(6))
    examples = LISTED.findall(prompt)
    if number % 7 == 3:
        return f" Describe {words} in detail"  # cut at the token limit: no line end
    if number % 7 == 5:
        return f" {examples[0]}\n"  # a copy of an example it was shown
    return f" Tell me about {words}.\nRequest 7: and more"


def test_a_request_is_the_completions_first_finished_line():
    assert parse_request(" Write a poem about the sea.\nRequest 7: ...") == "Write a poem about the sea."
    assert parse_request(' "Translate this" into French.\n') == '"Translate this" into French.'
    assert parse_request(" Write a poem about the sea and") is None  # the token limit cut it
    assert parse_request(" Hi there\n") is None  # under three words
    assert parse_request(" " + "word " * 121 + "\n") is None
    assert parse_request(" Write a poem. Request 7: Write a song.\n") is None  # the list runs on
    assert parse_request(" - Write a poem about rain.\n") is None
    assert parse_request("\nWrite a poem about rain.\n") is None  # an empty first line


def rouge(candidate: str, reference: str) -> float:
    return rouge_l(candidate.split(), reference.split())


def test_rouge_l_is_the_f_measure_of_the_longest_common_subsequence():
    assert rouge("a b c d", "a b c d") == 1.0
    assert rouge("a b c d", "e f g") == 0.0
    assert rouge("a b c d", "a c d e") == pytest.approx(2 * 3 / 8)  # "a c d"
    assert rouge("a b c d e f", "f e d c b a") == pytest.approx(2 * 1 / 12)  # order counts
    assert rouge("", "a") == 0.0


def test_a_near_copy_is_one_at_the_threshold_against_any_earlier_request():
    earlier = [request_words("Write a short poem about the sea at night")]
    assert is_near_copy(request_words("Write a short poem about the sea at dawn"), earlier)
    assert not is_near_copy(request_words("Explain how a bicycle stays upright"), earlier)
    shuffled = request_words("night at sea the about poem short a Write")  # the same words, another order
    assert rouge_l(shuffled[0], earlier[0][0]) < MAX_SIMILARITY and not is_near_copy(shuffled, earlier)


def test_the_pools_are_the_one_line_requests_of_the_standalone_categories(instructions):
    pools = seed_requests(instructions)
    assert set(pools) == set(SELF_CATEGORIES) and all(len(pool) >= 40 for pool in pools.values())
    assert all("\n" not in text for pool in pools.values() for text in pool)
    prompt = request_prompt(["Write a poem.", "Name a river."])
    assert prompt.endswith("Request 1: Write a poem.\nRequest 2: Name a river.\nRequest 3:")


def test_requests_cover_every_category_without_copies_or_suite_prompts(instructions, monkeypatch):
    probe = load_suite(DEFAULT_SUITE)[0].turns[0][:120]
    assert parse_request(f" {probe} and more\n"), "the leaked line passes every other filter"

    def make(number: int, prompt: str) -> str:
        return f" {probe} and more\n" if number == 1 else fresh_request(number, prompt)

    writer = ScriptedWriter(make)
    monkeypatch.setattr(self_instruct, "target_completions", writer)
    requests = write_requests(None, instructions, 23, batch_size=6)
    counts = Counter(r.category for r in requests)
    assert len(requests) == 23 and sorted(counts.values()) == [4, 4, 5, 5, 5]
    assert {r.source for r in requests} == {f"self:{category}" for category in SELF_CATEGORIES}
    assert all(r.text.startswith("Tell me about zq") for r in requests), "cut, copied and leaked lines are dropped"
    assert len({r.text for r in requests}) == 23 and len({r.instruction_id for r in requests}) == 23
    pools = seed_requests(instructions)
    shown = [LISTED.findall(prompt) for prompt in writer.prompts]
    assert all(len(examples) == EXAMPLES for examples in shown)
    assert all(any(set(examples) <= set(pool) for pool in pools.values()) for examples in shown), "templates only"


def test_the_same_corpus_gives_the_same_prompts_and_requests(instructions, monkeypatch):
    writers = [ScriptedWriter(fresh_request), ScriptedWriter(fresh_request)]
    monkeypatch.setattr(self_instruct, "target_completions", writers[0])
    first = write_requests(None, instructions, 10, batch_size=4)
    monkeypatch.setattr(self_instruct, "target_completions", writers[1])
    assert write_requests(None, instructions, 10, batch_size=4) == first
    assert writers[0].prompts == writers[1].prompts, "the examples are drawn by a seeded generator"


def test_a_target_that_writes_nothing_usable_is_asked_a_bounded_number_of_times(instructions, monkeypatch):
    writer = ScriptedWriter(lambda number, prompt: " and then the list goes on without end")
    monkeypatch.setattr(self_instruct, "target_completions", writer)
    assert write_requests(None, instructions, 5, batch_size=4) == []
    assert ATTEMPTS_PER_REQUEST * 5 <= len(writer.prompts) < ATTEMPTS_PER_REQUEST * 5 + 4


def test_a_category_the_target_cannot_write_for_stops_taking_prompts(instructions, monkeypatch):
    translation = set(seed_requests(instructions)["translation"])

    def make(number: int, prompt: str) -> str:
        if set(LISTED.findall(prompt)) <= translation:
            return " How would I say this in French? and the passage runs on"  # never a finished line
        return fresh_request(number, prompt)

    writer = ScriptedWriter(make)
    monkeypatch.setattr(self_instruct, "target_completions", writer)
    requests = write_requests(None, instructions, 10, batch_size=4)
    counts = Counter(r.category for r in requests)
    assert "translation" not in counts and all(counts[c] == 2 for c in SELF_CATEGORIES if c != "translation")
    asked = Counter(bool(set(LISTED.findall(prompt)) <= translation) for prompt in writer.prompts)
    assert asked[True] <= ATTEMPTS_PER_REQUEST * 2 + 3, "translation had its own prompts, not the others' share"


def test_written_requests_are_cached_for_the_target_and_read_back(tiny, instructions, monkeypatch, tmp_path):
    monkeypatch.setattr(self_instruct, "target_completions", ScriptedWriter(fresh_request))
    first = written_requests(tiny, instructions, 6, tmp_path)
    (cached,) = (tmp_path / "self-instruct").glob(f"{tiny.fingerprint[:16]}-*-6.jsonl")
    assert [json.loads(line)["text"] for line in cached.read_text().splitlines()] == [r.text for r in first]

    def refuse(target, prompts):
        raise AssertionError("a cached list is read, not written again")

    monkeypatch.setattr(self_instruct, "target_completions", refuse)
    assert written_requests(tiny, instructions, 6, tmp_path) == first

    changed = tmp_path / "writer.py"  # another version of the writer writes its own list
    changed.write_bytes(self_instruct.WRITER_SOURCE.read_bytes() + b"# changed\n")
    monkeypatch.setattr(self_instruct, "WRITER_SOURCE", changed)
    monkeypatch.setattr(self_instruct, "target_completions", ScriptedWriter(fresh_request))
    assert written_requests(tiny, instructions, 6, tmp_path) == first
    assert len(list((tmp_path / "self-instruct").glob("*-6.jsonl"))) == 2


def test_train_distils_the_targets_own_requests_as_a_source_of_their_own(tiny, tmp_path, monkeypatch, capsys):
    folder = save_tiny(tiny, tmp_path / "tiny")
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(self_instruct, "target_completions", ScriptedWriter(fresh_request))
    common = ["train", "--kind", "eagle3", "--target", str(folder), "--out", str(tmp_path / "unused")]
    more = ["--distil-only", "--teacher", "generate", "--data-tokens", "600", "--answer-tokens", "8"]
    ran = run_main([*common, *more, "--self-instruct", "10", "--compile", "off"], capsys)
    assert ran.status == 0, ran.stderr
    caches = ran.stdout.split(" into ")[1].split(" in ")[0].split(", ")
    assert len(caches) == 2, "the corpus's instructions and the target's own requests fill a cache each"
    (written,) = (tmp_path / "cache" / "training" / "self-instruct").glob("*-10.jsonl")
    manifest = json.loads((Path(caches[1]) / "manifest.json").read_text())
    ids = {json.loads(line)["id"] for line in written.read_text().splitlines()}
    assert set(manifest["done"]["train"]) <= ids and manifest["tokens"]["train"] > 0


def test_training_data_writes_the_targets_own_requests_with_the_corpus(
    tiny, instructions, tmp_path, monkeypatch, capsys
):
    folder = save_tiny(tiny, tmp_path / "tiny")
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(self_instruct, "target_completions", ScriptedWriter(fresh_request))
    out = tmp_path / "corpus.jsonl"
    ran = run_main(["training-data", "--self-instruct", "7", "--target", str(folder), "--out", str(out)], capsys)
    assert ran.status == 0, ran.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    own = [r for r in records if r["source"].startswith("self:")]
    assert len(records) == len(instructions) + 7 and len(own) == 7 and "7 of them written by the target" in ran.stderr
    rows = {line.split()[0]: line.split()[1:] for line in ran.stdout.splitlines()[1:-1]}
    assert int(rows["all"][2]) == len(records)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["--teacher", "prefill"], "--self-instruct adds requests without answers: use --teacher generate or mix"),
        (["--self-instruct", "0"], "expected an integer >= 1, got 0"),
    ],
)
def test_train_refuses_self_instruct_without_generated_answers(tiny, tmp_path, monkeypatch, capsys, given, message):
    folder = save_tiny(tiny, tmp_path / "tiny")
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))
    args = ["train", "--kind", "eagle3", "--target", str(folder), "--out", str(tmp_path / "out")]
    ran = run_main([*args, "--self-instruct", "4", *given], capsys)
    assert ran.status == 2 and "error:" in ran.last_error, ran.stderr
    assert message in ran.last_error, ran.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_the_default_target_continues_the_list_with_new_one_line_requests(default_model, instructions):
    pools = seed_requests(instructions)
    prompts = [request_prompt(pools[category][:EXAMPLES]) for category in SELF_CATEGORIES]
    completions = self_instruct.target_completions(default_model, prompts)
    requests = {category: parse_request(text) for category, text in zip(SELF_CATEGORIES, completions, strict=True)}
    kept = {
        c: text
        for c, text in requests.items()
        if text and not is_near_copy(request_words(text), [request_words(t) for t in pools[c]])
    }
    assert len(kept) >= 3, completions
