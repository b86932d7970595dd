"""The training instructions, built offline from what every Python installation carries: the language
reference topics (`pydoc_data.topics`, the text behind `help("for")`) and the standard library's own
source, plus the chat instructions of chat_corpus.py (writing, QA, math, translation, summaries, RAG,
coding, code editing and multi-turn requests, some built on the same documentation and source). Drafters
learn from the target's answers to these (self-distillation), never from the evaluation prompt suites,
which `build_instructions` checks.

Every documentation piece and function gets every task of its kind (category "python-docs"): summarise /
explain / ask questions about a documentation section, explain / annotate / refactor / test a
standard-library function. Chat instructions carry the suite category they train for, and multi-turn ones
the earlier turns (`history`). Deterministic for a given Python version; the split into training and
validation is by a hash of the text (and history), so it is stable as the corpus grows.

Knows nothing about models; `Instruction.prompt_ids` only asks the tokenizer for the conversation's ids.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.lab.prompts import DEFAULT_SUITE, SUITE_DIR, encode_conversation, load_suite
from backend.training.chat_corpus import chat_items

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DOC_TASKS = (
    "Summarize this section of the Python documentation in a few sentences:\n\n{text}",
    "Explain the following part of the Python language reference to a beginner, with a short example:\n\n{text}",
    "Read this documentation and answer: what are the two most important rules it states?\n\n{text}",
    "Write three questions a student could answer from this text, each followed by its answer.\n\n{text}",
)
CODE_TASKS = (
    "Explain what this Python function does, step by step:\n\n```python\n{text}\n```",
    "Add type hints and a docstring to this function. Return the whole function.\n\n```python\n{text}\n```",
    "Rewrite this function so it is easier to read, keeping its behaviour. Return the code.\n\n```python\n{text}\n```",
    "Write two pytest tests for this function.\n\n```python\n{text}\n```",
)
# pure-Python standard-library modules with short, self-contained functions
CODE_MODULES = (
    "textwrap",
    "heapq",
    "bisect",
    "string",
    "fractions",
    "statistics",
    "shlex",
    "fnmatch",
    "glob",
    "posixpath",
    "colorsys",
    "difflib",
    "calendar",
    "base64",
    "quopri",
    "json.encoder",
    "json.decoder",
    "html",
    "ipaddress",
    "graphlib",
    "tokenize",
    "copy",
    "functools",
    "operator",
    "random",
    "pprint",
    "csv",
    "configparser",
    "gettext",
    "locale",
    "netrc",
    "plistlib",
    "sched",
    "secrets",
    "stat",
    "tempfile",
    "uuid",
    "zipfile",
    "email.utils",
    "urllib.parse",
    "http.cookies",
    "wave",
    "keyword",
)
CHUNK_CHARS = (400, 1400)  # documentation sections are cut into pieces of about this size
MAX_FUNCTION_CHARS = 1400


@dataclass(frozen=True)
class Instruction:
    instruction_id: str
    source: str  # "doc:<topic>", "code:<module>.<function>" or "chat:<category>.<form>"
    text: str  # the user turn the target answers
    category: str = "python-docs"  # the evaluation suite's category it trains for (chat ones)
    history: tuple[tuple[str, str], ...] = ()  # earlier (user turn, assistant answer) pairs
    reference: str = ""  # an existing answer the prefill-only teacher reads instead of generating one

    @property
    def split(self) -> str:
        """'validation' for about one instruction in twelve, else 'train' (a stable hash of the text, and
        of the history before it when there is one)."""
        key = "\x1e".join([*(turn for pair in self.history for turn in pair), self.text])
        return "validation" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 12 == 0 else "train"

    def prompt_ids(self, tokenizer: PreTrainedTokenizerBase) -> list[int]:
        """The token ids of the whole conversation, ending where the target's answer to `text` begins."""
        users, answers = [user for user, _ in self.history], [answer for _, answer in self.history]
        return encode_conversation(tokenizer, [*users, self.text], answers)


def doc_chunks() -> list[tuple[str, str]]:
    """(topic, piece) from the language reference topics, cut at blank lines."""
    from pydoc_data.topics import topics

    chunks = []
    for topic in sorted(topics):
        piece = ""
        for paragraph in topics[topic].split("\n\n"):
            if piece and len(piece) + len(paragraph) > CHUNK_CHARS[1]:
                if len(piece) >= CHUNK_CHARS[0]:
                    chunks.append((topic, piece.strip()))
                piece = ""
            piece += paragraph + "\n\n"
        if len(piece) >= CHUNK_CHARS[0]:
            chunks.append((topic, piece.strip()[: CHUNK_CHARS[1] * 2]))
    return chunks


def stdlib_functions() -> list[tuple[str, str]]:
    """(module.function, source) of top-level functions and methods short enough to ask about."""
    found = []
    for module in CODE_MODULES:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        source = Path(spec.origin).read_text(encoding="utf-8")
        lines = [line + "\n" for line in source.split("\n")]  # read_text leaves only \n line ends
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("__"):
                text = _segment(lines, node)
                if 200 <= len(text) <= MAX_FUNCTION_CHARS and "\t" not in text:
                    found.append((f"{module}.{node.name}", _dedent(text)))
    return found


def build_instructions(seed: int = 0) -> list[Instruction]:
    """Every instruction of the corpus, shuffled with a fixed seed; none contains an evaluation prompt."""
    rng = random.Random(seed)
    docs, functions = doc_chunks(), stdlib_functions()
    items = [("python-docs", f"doc:{topic}", (), task.format(text=text)) for topic, text in docs for task in DOC_TASKS]
    items += [
        ("python-docs", f"code:{name}", (), task.format(text=text)) for name, text in functions for task in CODE_TASKS
    ]
    items += chat_items(docs, functions)
    rng.shuffle(items)
    instructions = [
        Instruction(f"i{number:05d}", source, text, category, history)
        for number, (category, source, history, text) in enumerate(items)
    ]
    check_held_out(instructions)
    return instructions


def held_out(instructions: list[Instruction]) -> list[Instruction]:
    """The validation split taken a category at a time (one of each category, then the next of each, ...), so
    validating on its first few instructions covers every category."""
    by_category: dict[str, list[Instruction]] = {}
    for instruction in instructions:
        if instruction.split == "validation":
            by_category.setdefault(instruction.category, []).append(instruction)
    queues = [by_category[category] for category in sorted(by_category)]
    return [queue[rank] for rank in range(max(map(len, queues), default=0)) for queue in queues if rank < len(queue)]


def suite_probes() -> list[tuple[str, str]]:
    """(where, probe) for every turn of every evaluation suite prompt: its first 120 characters, which no
    training text may contain; `where` names the prompt and its suite."""
    return [
        (f"evaluation prompt {question.question_id} of {suite.name}", turn[:120])
        for suite in sorted(SUITE_DIR.glob("*.jsonl")) or [DEFAULT_SUITE]
        for question in load_suite(suite)
        for turn in question.turns
    ]


def check_held_out(instructions: list[Instruction]) -> None:
    """The evaluation suites must not leak into training data: no suite probe may appear in an instruction, in
    any turn of its history or in its reference answer."""
    turns = (
        turn for i in instructions for turn in (i.text, *(text for pair in i.history for text in pair), i.reference)
    )
    corpus = "\x00".join(turns)  # one search per probe
    for where, probe in suite_probes():
        if probe in corpus:
            raise ValueError(f"{where} leaked into the corpus")


def _segment(lines: list[str], node: ast.stmt) -> str:
    """The node's source text, as `ast.get_source_segment` gives it, from the module's lines split once
    (offsets are in UTF-8 bytes)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset : node.end_col_offset].decode()
    head = lines[first].encode()[node.col_offset :].decode()
    return head + "".join(lines[first + 1 : last]) + lines[last].encode()[: node.end_col_offset].decode()


def _dedent(text: str) -> str:
    """Methods come indented from the second line on: ast gives the first line without its indent."""
    lines = text.splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    cut = min(indents, default=0) - 4 if lines and lines[0].lstrip().startswith(("def ", "async def ")) else 0
    if cut <= 0:
        return text
    return "\n".join([lines[0]] + [line[cut:] if line[:cut].isspace() else line for line in lines[1:]])
