"""Requests the target writes itself (self-instruct: Wang et al., "Self-Instruct: Aligning Language Models
with Self-Generated Instructions", arXiv:2212.10560), so drafters also learn from requests no template of
chat_corpus.py could produce.

The target is shown five requests of one suite category as a plain numbered list ("Request 1: ..."), no chat
template, and continues the list with a sixth; its greedy line is kept when it is a finished line of 3-120
words that is not a continuation of the list, shares no evaluation-suite probe, and is not a near-copy
(ROUGE-L F >= 0.7, the paper's threshold) of any template request of its category or of a request it wrote
earlier. Only the categories whose requests stand alone on one line take part (writing, qa, math, translation,
coding); the others carry a passage, code or earlier turns. The examples are always template requests: the
paper also shows the model tasks it generated, but SmolLM2-135M then copies them (on 16 prompts with two of
its own requests among the five examples, none of its lines was new; with template examples only, 7 were).

Greedy decoding with examples drawn by a seeded generator gives the same requests for a given target, corpus
and machine; `written_requests` keeps them in the distillation cache, so every later run trains on that list.
Knows nothing about drafters; the target only completes text (`target_completions`).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from backend.core.models import LoadedModel
from backend.training.corpus import Instruction, suite_probes

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SELF_CATEGORIES = ("writing", "qa", "math", "translation", "coding")
EXAMPLES = 5  # requests shown in each prompt
MAX_REQUEST_TOKENS = 64
MAX_SIMILARITY = 0.7  # ROUGE-L F of a new request against each earlier one, above which it is a near-copy
REQUEST_WORDS = (3, 120)
ATTEMPTS_PER_REQUEST = 4  # prompts a category is given per request asked of it, before it is given up
WRITER_SOURCE = Path(__file__)  # part of the cached list's key


def seed_requests(instructions: Iterable[Instruction]) -> dict[str, list[str]]:
    """The template corpus's one-line, single-turn requests of each self-instruct category."""
    pools: dict[str, list[str]] = {category: [] for category in SELF_CATEGORIES}
    for instruction in instructions:
        if instruction.category in pools and not instruction.history and "\n" not in instruction.text:
            pools[instruction.category].append(instruction.text)
    return pools


def request_prompt(examples: list[str]) -> str:
    """The numbered list the target continues with one more request."""
    listed = "".join(f"Request {number}: {text}\n" for number, text in enumerate(examples, 1))
    return f"Requests people sent to an AI assistant:\n\n{listed}Request {len(examples) + 1}:"


def parse_request(completion: str) -> str | None:
    """The request on the completion's first line, or None when that line was cut by the token limit (no line
    end), is too short or long, runs on into the next list item, or starts with punctuation."""
    line, ended, _ = completion.partition("\n")
    text = line.strip()
    if not ended or not text or not (REQUEST_WORDS[0] <= len(text.split()) <= REQUEST_WORDS[1]):
        return None
    if (not text[0].isalnum() and text[0] not in "\"'`") or "Request " in text:
        return None
    return text


def rouge_l(candidate: list[str], reference: list[str]) -> float:
    """ROUGE-L F-measure of two word lists: the longest common subsequence against both lengths."""
    if not candidate or not reference:
        return 0.0
    previous = [0] * (len(reference) + 1)
    for word in candidate:
        current = [0]
        for column, other in enumerate(reference):
            current.append(previous[column] + 1 if word == other else max(previous[column + 1], current[column]))
        previous = current
    common = previous[-1]
    return 0.0 if common == 0 else 2 * common / (len(candidate) + len(reference))


Words = tuple[list[str], Counter]  # a request's lower-case words, and their counts


def request_words(text: str) -> Words:
    words = text.lower().split()
    return words, Counter(words)


def is_near_copy(request: Words, earlier: list[Words]) -> bool:
    """Whether the request reaches MAX_SIMILARITY against any earlier one. The shared word count bounds the
    common subsequence, so most pairs are ruled out before the LCS is computed."""
    words, counts = request
    for other, other_counts in earlier:
        shared = sum((counts & other_counts).values())
        if 2 * shared / (len(words) + len(other)) >= MAX_SIMILARITY and rouge_l(words, other) >= MAX_SIMILARITY:
            return True
    return False


def target_completions(target: LoadedModel, prompts: list[str]) -> list[str]:
    """The target's greedy continuation of each prompt (batched), stopped at the first token that ends a line;
    a line end is added where it stopped on an end token, so a finished request always ends its line."""
    from backend.training.dataset import greedy_answers

    ids = [target.tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    answers = greedy_answers(target, ids, MAX_REQUEST_TOKENS, line_end_ids(target.tokenizer))
    return [
        target.tokenizer.decode(answer, skip_special_tokens=True) + ("\n" if answer[-1] in target.eos_token_ids else "")
        for answer in answers
    ]


@cache
def line_end_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """The vocabulary's tokens whose text holds a line end (decoded once per tokenizer, not once per batch)."""
    return frozenset(
        token for token in range(len(tokenizer)) if "\n" in tokenizer.decode([token], skip_special_tokens=True)
    )


def write_requests(
    target: LoadedModel,
    instructions: list[Instruction],
    count: int,
    batch_size: int = 16,
    progress: Callable[[int, int], None] = lambda written, prompts: None,
) -> list[Instruction]:
    """Up to `count` new requests, spread evenly over SELF_CATEGORIES, written `batch_size` prompts at a time;
    fewer where a category's ATTEMPTS_PER_REQUEST prompts per request asked of it did not yield them all (a
    category the target cannot write for stops taking prompts from the others)."""
    pools = seed_requests(instructions)
    wanted = {
        category: count // len(SELF_CATEGORIES) + (rank < count % len(SELF_CATEGORIES))
        for rank, category in enumerate(SELF_CATEGORIES)
    }
    earlier = {category: [request_words(text) for text in pool] for category, pool in pools.items()}
    written: dict[str, list[str]] = {category: [] for category in SELF_CATEGORIES}
    probes = [probe for _, probe in suite_probes()]
    attempts = dict.fromkeys(SELF_CATEGORIES, 0)
    rng = random.Random(0)
    while True:
        short = [
            category
            for category in SELF_CATEGORIES
            if len(written[category]) < wanted[category]
            and attempts[category] < ATTEMPTS_PER_REQUEST * wanted[category]
        ]
        if not short:
            break
        categories = [short[slot % len(short)] for slot in range(batch_size)]
        prompts = [request_prompt(rng.sample(pools[category], EXAMPLES)) for category in categories]
        for category in categories:
            attempts[category] += 1
        for category, completion in zip(categories, target_completions(target, prompts), strict=True):
            text = parse_request(completion)
            if text is None or len(written[category]) >= wanted[category] or any(probe in text for probe in probes):
                continue
            words = request_words(text)
            if not is_near_copy(words, earlier[category]):
                written[category].append(text)
                earlier[category].append(words)
        progress(sum(map(len, written.values())), sum(attempts.values()))
    requests = [(category, text) for category in SELF_CATEGORIES for text in written[category]]
    random.Random(0).shuffle(requests)
    return [Instruction(f"s{n:05d}", f"self:{category}", text, category) for n, (category, text) in enumerate(requests)]


def written_requests(
    target: LoadedModel,
    instructions: list[Instruction],
    count: int,
    cache_root: Path,
    batch_size: int = 16,
) -> list[Instruction]:
    """write_requests's list for this target, template corpus and writer, read from the cache when an earlier run
    wrote it (`<cache>/self-instruct/<target fingerprint[:16]>-<key>-<count>.jsonl`, the key a hash of the pools
    and of this module's source, so a changed writer writes a new list); a progress bar while the target writes."""
    pools = seed_requests(instructions)
    key = hashlib.sha256(json.dumps(pools, sort_keys=True).encode() + WRITER_SOURCE.read_bytes()).hexdigest()[:8]
    path = cache_root / "self-instruct" / f"{target.fingerprint[:16]}-{key}-{count}.jsonl"
    if path.is_file():
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [Instruction(r["id"], r["source"], r["text"], r["category"]) for r in records]
    with tqdm(total=count, desc="self-instruct", unit="request", file=sys.stderr, dynamic_ncols=True) as bar:

        def wrote(done: int, prompts: int) -> None:
            bar.update(done - bar.n)
            bar.set_postfix(prompts=prompts)

        requests = write_requests(target, instructions, count, batch_size, wrote)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (
        json.dumps({"id": i.instruction_id, "source": i.source, "category": i.category, "text": i.text})
        for i in requests
    )
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return requests
