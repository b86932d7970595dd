"""Chat-style training instructions for every category of the evaluation suite (writing, qa, math,
translation, summarization, rag, coding, code_editing, multi_turn), so drafters trained by
self-distillation see the requests people actually make, not only questions about Python.

Sources, all offline: the templates, topics, names, places, products and short foreign-language
sentences in `chat_lists.json` (written for SpecScope, our own words), and the pieces of Python's
documentation (`pydoc_data.topics`) and standard-library source that `corpus.py` extracts (text of the
Python Software Foundation, PSF License). Every generator draws from its own `random.Random` seeded
with the category's name, so the result is the same on every run for a given Python version and
changing one category's lists leaves the others as they were.

Templates name their slots in braces: `{towns}` draws from the list `towns` (`{Towns}` capitalised,
`{TOWNS}` upper case), `{towns.2}` a second, different draw, `{#3-9}` a whole number in 3..9; a slot
repeated in one template keeps its value. Knows nothing about models, tokens or the evaluation suite
(corpus.py checks that none of its prompts leaks in).
"""

from __future__ import annotations

import ast
import json
import random
import re
from functools import cache
from itertools import combinations
from pathlib import Path

from backend.training.chat_math import math_problems

LISTS_FILE = Path(__file__).parent / "chat_lists.json"
SLOT = re.compile(r"\{(#\d+-\d+|[A-Za-z]\w*)(?:\.(\d))?\}")
History = tuple[tuple[str, str], ...]
ChatItem = tuple[str, str, History, str]  # (category, source, history, text)
EDIT_GROUP_CHARS = 1600  # code_editing shows up to this much of one module at once
CONTEXT_PIECE_CHARS = 700  # a documentation passage inside a RAG context is cut near this size


@cache
def chat_lists() -> dict:
    return json.loads(LISTS_FILE.read_text(encoding="utf-8"))


def fill(template: str, rng: random.Random, memo: dict | None = None, **given: str) -> str:
    """The template with every slot drawn (see the module docstring); `given` values go in verbatim.

    Pass the same `memo` to several templates to keep their slots consistent (a request and its answer)."""
    memo = {} if memo is None else memo
    lists = chat_lists()

    def draw(match: re.Match) -> str:
        name, index = match.group(1), match.group(2) or "1"
        if name in given:
            return given[name]
        key = (name.lower(), index)
        if key not in memo:
            if name.startswith("#"):
                low, high = map(int, name[1:].split("-"))
                memo[key] = (None, str(rng.randint(low, high)))
            else:
                taken = {raw for (list_name, _), (raw, _) in memo.items() if list_name == key[0]}
                raw = rng.choice([option for option in lists[key[0]] if option not in taken])
                memo[key] = (raw, fill(raw, rng, memo))
        value = memo[key][1]
        if name.isupper():
            return value.upper()
        return value[0].upper() + value[1:] if name[0].isupper() else value

    return SLOT.sub(draw, template)


def chat_items(docs: list[tuple[str, str]], functions: list[tuple[str, str]]) -> list[ChatItem]:
    """Every chat instruction, distinct, grouped by category. `docs` are (topic, piece) of the language
    reference, `functions` (module.function, source) of the standard library (corpus.py makes both)."""
    items = [
        *_writing(random.Random("writing")),
        *_qa(random.Random("qa")),
        *[("math", f"chat:math.{form}", (), text) for form, text in math_problems(random.Random("math"), chat_lists())],
        *_translation(random.Random("translation"), docs),
        *_summarization(random.Random("summarization"), _prose(docs)),
        *_rag(random.Random("rag"), _prose(docs)),
        *_coding(random.Random("coding")),
        *_code_editing(random.Random("code_editing"), functions),
        *_multi_turn(random.Random("multi_turn"), _prose(docs), functions),
    ]
    seen: set[tuple[History, str]] = set()
    distinct = []
    for item in items:
        _, _, history, text = item
        if (history, text) not in seen:
            seen.add((history, text))
            distinct.append(item)
    return distinct


def _writing(rng: random.Random) -> list[ChatItem]:
    """Twenty drafts of each writing template (the source names the template's place in the list)."""
    templates = chat_lists()["writing"]
    return [
        ("writing", f"chat:writing.template{n % len(templates)}", (), fill(templates[n % len(templates)], rng))
        for n in range(20 * len(templates))
    ]


def _qa(rng: random.Random) -> list[ChatItem]:
    """Why / how / what / difference / history questions, each subject in two of its forms."""
    lists = chat_lists()
    subjects = {"why": "why", "how": "how", "what": "science", "pair": "pairs", "history": "history"}
    items = []
    for form, list_name in subjects.items():
        for subject in lists[list_name]:
            for template in rng.sample(lists["qa_forms"][form], 2):
                items.append(("qa", f"chat:qa.{form}", (), fill(template, rng, x=subject)))
    return items


def _translation(rng: random.Random, docs: list[tuple[str, str]]) -> list[ChatItem]:
    """English passages into a language, our foreign sentences into English, documentation sentences."""
    lists = chat_lists()
    items = []
    for _ in range(320):
        memo: dict = {}
        sentences = rng.sample(lists["en_sentences"], rng.randint(2, 4))
        text = " ".join(fill(sentence, rng, memo) for sentence in sentences)
        form = rng.choice(lists["translation_forms"])
        items.append(
            ("translation", "chat:translation.en", (), fill(form, rng, lang=rng.choice(lists["languages"]), text=text))
        )
    for language, sentences in lists["foreign"].items():
        for pair in combinations(sentences, 2):
            form = rng.choice(lists["reverse_forms"])
            items.append(
                (
                    "translation",
                    f"chat:translation.{language.lower()}",
                    (),
                    fill(form, rng, lang=language, text=" ".join(pair)),
                )
            )
    for topic, piece in docs[::4]:
        sentence = _first_sentence(piece)
        if sentence:
            language = rng.choice(lists["languages"])
            text = f"Translate this sentence from the Python documentation into {language}:\n\n{sentence}"
            items.append(("translation", f"chat:translation.doc:{topic}", (), text))
    return items


def _summarization(rng: random.Random, docs: list[tuple[str, str]]) -> list[ChatItem]:
    """Composed passages (news, notes, reports, stories...) and documentation pieces, the request after the text."""
    lists = chat_lists()
    items = []
    for number in range(280):
        passage = lists["passages"][number % len(lists["passages"])]
        text = _passage(rng, passage, {})
        form = fill(rng.choice(lists["summary_forms"]), rng, kind=passage["kind"])
        items.append(("summarization", f"chat:summarization.{passage['kind']}", (), f"{text}\n\n{form}"))
    for topic, piece in docs[1::3]:
        form = fill(rng.choice(lists["doc_summary_forms"]), rng)
        items.append(("summarization", f"chat:summarization.doc:{topic}", (), f"{piece}\n\n{form}"))
    return items


def _passage(rng: random.Random, passage: dict, memo: dict) -> str:
    """The first paragraph and three or four of the others, in order, drawn with `memo`."""
    first, *rest = passage["paragraphs"]
    kept = sorted(rng.sample(range(len(rest)), rng.randint(min(3, len(rest)), len(rest))))
    return "\n\n".join(fill(paragraph, rng, memo) for paragraph in [first, *(rest[n] for n in kept)])


def _rag(rng: random.Random, docs: list[tuple[str, str]]) -> list[ChatItem]:
    """Numbered passages (sometimes one off-topic) and a question one of them answers."""
    lists = chat_lists()
    items = []
    for number in range(280):
        entities = lists["rag_entities"]
        memo: dict = {}
        sections = rng.sample(entities[number % len(entities)]["sections"], 3)
        asked = rng.choice(sections)
        question = fill(rng.choice(asked["questions"]), rng, memo)
        passages = [(fill(s["title"], rng, memo), fill(s["body"], rng, memo)) for s in sections]
        if rng.random() < 0.5:  # a passage about something else, as retrieval brings
            other = rng.choice(entities[(number + 1) % len(entities)]["sections"])
            distractor_memo: dict = {}
            passages.append((fill(other["title"], rng, distractor_memo), fill(other["body"], rng, distractor_memo)))
        rng.shuffle(passages)
        items.append(("rag", "chat:rag.facts", (), _context(passages, question, rng.choice(lists["rag_forms"]))))
    for _ in range(140):
        chosen = rng.sample(docs, 3)
        topic = rng.choice(chosen)[0]
        question = fill(rng.choice(lists["doc_rag_questions"]), rng, topic=topic)
        passages = [(f"Python language reference - {t}", _cut(piece, CONTEXT_PIECE_CHARS)) for t, piece in chosen]
        items.append(("rag", f"chat:rag.doc:{topic}", (), _context(passages, question, rng.choice(lists["rag_forms"]))))
    return items


def _context(passages: list[tuple[str, str]], question: str, form: str) -> str:
    numbered = "\n\n".join(f"[{n}] {title}\n{body}" for n, (title, body) in enumerate(passages, start=1))
    return f"Context:\n{numbered}\n\nQuestion: {question}\n\n{form}"


def _coding(rng: random.Random) -> list[ChatItem]:
    """Python functions and classes from our specs in several forms, and a few JavaScript, SQL and Bash tasks."""
    lists = chat_lists()
    items = []
    for spec in lists["python_specs"]:
        for form in rng.sample(lists["coding_forms"], 3):
            items.append(("coding", "chat:coding.python", (), fill(form, rng, spec=spec)))
    for spec in lists["python_classes"]:
        for form in rng.sample(lists["class_forms"], 2):
            items.append(("coding", "chat:coding.python-class", (), fill(form, rng, spec=spec)))
    items += [("coding", "chat:coding.other", (), task) for task in lists["other_code"]]
    return items


def _code_editing(rng: random.Random, functions: list[tuple[str, str]]) -> list[ChatItem]:
    """One to three functions of a module at a time, each group with two edit requests."""
    lists = chat_lists()
    items = []
    for module, group in _module_groups(functions):
        fn = rng.choice(group)[0]
        args = _arguments(dict(group)[fn])
        requests = [r for r in lists["edit_requests"] if args or "{arg}" not in r]
        code = "\n\n\n".join(source for _, source in group)
        for request in rng.sample(requests, 2):
            prefix = fill(rng.choice(lists["edit_prefixes"]), rng, module=module)
            ask = fill(request, rng, fn=fn, arg=rng.choice(args) if args else "")
            items.append(
                ("code_editing", f"chat:code_editing.{module}", (), f"{prefix}\n\n```python\n{code}\n```\n\n{ask}")
            )
    return items


def _module_groups(functions: list[tuple[str, str]]) -> list[tuple[str, list[tuple[str, str]]]]:
    """Consecutive functions of one module, up to three and EDIT_GROUP_CHARS at a time: (module, [(name, source)])."""
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    for qualified, source in functions:
        module, name = qualified.rsplit(".", 1)
        last = groups[-1] if groups else None
        size = sum(len(s) for _, s in last[1]) if last else 0
        if last and last[0] == module and len(last[1]) < 3 and size + len(source) <= EDIT_GROUP_CHARS:
            last[1].append((name, source))
        else:
            groups.append((module, [(name, source)]))
    return groups


def _arguments(source: str) -> list[str]:
    """The parameter names of a function's source, without self and cls ([] if it does not parse alone)."""
    try:
        node = ast.parse(source).body[0]
    except SyntaxError:
        return []
    if not isinstance(node, ast.FunctionDef):
        return []
    names = [a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]]
    return [name for name in names if name not in ("self", "cls")]


def _multi_turn(rng: random.Random, docs: list[tuple[str, str]], functions: list[tuple[str, str]]) -> list[ChatItem]:
    """A first exchange whose answer is text we have (a standard-library function, a documentation piece,
    a composed passage), then a follow-up for the target to answer."""
    lists = chat_lists()
    items = []
    for qualified, source in functions[::3]:
        module, fn = qualified.rsplit(".", 1)
        ask = fill(rng.choice(lists["code_requests"]), rng, module=module, fn=fn)
        answer = f"Here is `{fn}` from the `{module}` module:\n\n```python\n{source}\n```"
        follow_up = fill(rng.choice(lists["code_followups"]), rng)
        items.append(("multi_turn", f"chat:multi_turn.code:{qualified}", ((ask, answer),), follow_up))
    for topic, piece in docs[2::4]:
        ask = fill(rng.choice(lists["doc_requests"]), rng, topic=topic)
        follow_up = fill(rng.choice(lists["doc_followups"]), rng)
        items.append(("multi_turn", f"chat:multi_turn.doc:{topic}", ((ask, piece),), follow_up))
    for number in range(160):
        passage = lists["passages"][number % len(lists["passages"])]
        memo: dict = {}
        ask = fill(passage["request"], rng, memo)
        answer = _passage(rng, passage, memo)
        follow_up = fill(rng.choice(lists["passage_followups"]), rng)
        items.append(("multi_turn", f"chat:multi_turn.{passage['kind']}", ((ask, answer),), follow_up))
    return items


def _prose(docs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The documentation pieces that read as text: no grammar rules or tables, not starting inside an example."""
    marks = ("::=", "+---", "+===")
    return [
        (t, piece) for t, piece in docs if not piece.startswith((" ", ">>>")) and not any(m in piece for m in marks)
    ]


def _first_sentence(piece: str) -> str:
    """The first plain sentence of a documentation piece (no code, 40..240 characters), else ''."""
    for paragraph in piece.split("\n\n"):
        line = " ".join(paragraph.split())
        sentence = line.split(". ")[0].rstrip(".") + "."
        if 40 <= len(sentence) <= 240 and not any(mark in sentence for mark in ("::=", ">>>", "*", "`")):
            return sentence
    return ""


def _cut(text: str, limit: int) -> str:
    """Whole paragraphs of `text` up to about `limit` characters (at least the first, cut at twice `limit`)."""
    kept = ""
    for paragraph in text.split("\n\n"):
        if kept and len(kept) + len(paragraph) > limit:
            break
        kept += paragraph + "\n\n"
    return kept.strip()[: limit * 2]
