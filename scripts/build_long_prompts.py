"""Build `data/prompts/specscope_long.jsonl`, the prompt suite's "long" input-length split.

Speculative decoding behaves differently on long inputs (SPEED-Bench splits prompts into short, < 512
tokens, and long, 2-4k tokens), so the short suite gets a long companion. Its prompts are built from
the passages already in `specscope_suite.jsonl`, under the short suite's category names so results
compare per category across splits:
  - rag: all the suite's RAG documents as one numbered context, then one of its questions, with the
    evidence at the start, a third of the way in, two thirds in or at the end;
  - summarization: six to nine of the suite's articles to summarise together;
  - code_editing: several of the suite's Python snippets as sections of one file, then one snippet's edit.

Every prompt is single-turn and must encode (chat template of the embedded default, SmolLM2-135M-Instruct)
to between 2048 and 4000 tokens; the build fails otherwise. No randomness: the same suite gives the same
file. Run from the repository root:

    python scripts/build_long_prompts.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: make `backend` importable

from transformers import AutoTokenizer, PreTrainedTokenizerBase  # noqa: E402

from backend.core.models import embedded_default_path  # noqa: E402
from backend.lab.prompts import DEFAULT_SUITE, SUITE_DIR, Question, encode_conversation, load_suite  # noqa: E402
from backend.lab.sweep import LONG_FROM  # noqa: E402

LONG_SUITE = SUITE_DIR / "specscope_long.jsonl"
MAX_TOKENS = 4000
FIRST_ID = 1001

RAG = re.compile(r"Context:\n(?P<context>.+?)\n\nQuestion: (?P<question>.+?)\n\nAnswer .+", re.DOTALL)
DOCUMENT_START = re.compile(r"\n\n(?=\[\d+\] )")
SNIPPET = re.compile(r"Here is (?P<what>.+?):\n\n```(?P<lang>\w+)\n(?P<code>.+?)```\n\n(?P<request>.+)", re.DOTALL)
SUMMARY_TASKS = [
    "Summarise each of the documents above in one sentence, as a numbered list in the order they appear.",
    "Write a digest of the documents above: one short paragraph of no more than 3 sentences per document.",
    "Summarise each document above as 2 to 3 bullet points, under a heading with the document's number.",
    "Summarise each document above in no more than 40 words, in the order they appear.",
]
# (first snippet, sections, edited section): four different files and edits, from the first section to the last
CODE_EDITS = [(0, 6, 1), (2, 7, 3), (4, 6, 4), (5, 7, 7)]
T = TypeVar("T")


def build(suite: list[Question]) -> list[dict]:
    """The long prompts as question.jsonl records, numbered from FIRST_ID."""
    prompts = _rag(suite) + _summarization(suite) + _code_editing(suite)
    return [
        {"question_id": FIRST_ID + number, "category": category, "turns": [text]}
        for number, (category, text) in enumerate(prompts)
    ]


def render(records: list[dict]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def default_tokenizer() -> PreTrainedTokenizerBase:
    """The embedded default's tokenizer, read from its GGUF file without loading the weights."""
    path = embedded_default_path()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def prompt_tokens(records: list[dict], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Each prompt's token count as the engine encodes it; raise unless all lie in [LONG_FROM, MAX_TOKENS]."""
    counts = [len(encode_conversation(tokenizer, record["turns"], [])) for record in records]
    wrong = [
        f"{record['question_id']}: {count}"
        for record, count in zip(records, counts, strict=True)
        if not LONG_FROM <= count <= MAX_TOKENS
    ]
    if wrong:
        raise ValueError(f"prompts outside {LONG_FROM}-{MAX_TOKENS} tokens: {', '.join(wrong)}")
    return counts


def _of(suite: list[Question], category: str) -> list[str]:
    texts = [q.turns[0] for q in suite if q.category == category]
    if not texts:
        raise ValueError(f"the suite has no {category} prompts")
    return texts


def _match(pattern: re.Pattern[str], text: str) -> re.Match[str]:
    match = pattern.fullmatch(text)
    if match is None:
        raise ValueError(f"unexpected prompt layout: {text[:80]!r}...")
    return match


def _window(items: list[T], start: int, count: int) -> list[T]:
    """`count` items from `start` on, wrapping around."""
    return [items[(start + i) % len(items)] for i in range(count)]


def _rag(suite: list[Question]) -> list[tuple[str, str]]:
    """Every RAG document, renumbered in one context (in suite order); four questions whose evidence
    sits ever deeper in it."""
    matches = [_match(RAG, text) for text in _of(suite, "rag")]
    groups = [[re.sub(r"^\[\d+\] ", "", doc) for doc in DOCUMENT_START.split(m["context"])] for m in matches]
    documents = [doc for group in groups for doc in group]
    context = "\n\n".join(f"[{number}] {doc}" for number, doc in enumerate(documents, start=1))
    prompts = []
    for target in (0, 3, 6, len(matches) - 1):
        text = (
            f"Context:\n{context}\n\nQuestion: {matches[target]['question']}\n\nAnswer using only the context "
            "above, quote the relevant sentence and give the number of the document it comes from."
        )
        prompts.append(("rag", text))
    return prompts


def _summarization(suite: list[Question]) -> list[tuple[str, str]]:
    """Six to nine articles at a time, each with a different summary task."""
    articles = [text.rsplit("\n\n", 1)[0] for text in _of(suite, "summarization")]
    prompts = []
    for number, task in enumerate(SUMMARY_TASKS):
        chosen = _window(articles, 3 * number, 6 + number)
        documents = "\n\n".join(f"Document {i}:\n{article}" for i, article in enumerate(chosen, start=1))
        prompts.append(("summarization", f"{documents}\n\n{task}"))
    return prompts


def _code_editing(suite: list[Question]) -> list[tuple[str, str]]:
    """Six or seven Python snippets as the sections of one file; the edit asked of one of them."""
    snippets = [m for m in (_match(SNIPPET, text) for text in _of(suite, "code_editing")) if m["lang"] == "python"]
    prompts = []
    for first, count, section in CODE_EDITS:
        chosen = _window(snippets, first, count)
        target = chosen[section - 1]
        code = "\n\n".join(
            f"# ---- Section {i}: {m['what']} ----\n\n{m['code'].rstrip()}" for i, m in enumerate(chosen, start=1)
        )
        text = (
            f"Here is a Python file made of {len(chosen)} sections:\n\n```python\n{code}\n```\n\n"
            f"Edit only section {section} ({target['what']}) and leave the other sections exactly as they "
            f"are. {target['request']}"
        )
        prompts.append(("code_editing", text))
    return prompts


def main() -> None:
    records = build(load_suite(DEFAULT_SUITE))
    counts = prompt_tokens(records, default_tokenizer())
    LONG_SUITE.write_text(render(records), encoding="utf-8")
    for record, count in zip(records, counts, strict=True):
        print(f"{record['question_id']}  {record['category']:<14} {count:>5} tokens")
    print(f"wrote {len(records)} prompts to {LONG_SUITE}")


if __name__ == "__main__":
    main()
