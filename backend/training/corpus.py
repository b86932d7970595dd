"""The training instructions, built offline from what every Python installation carries: the language
reference topics (`pydoc_data.topics`, the text behind `help("for")`) and the standard library's own
source. Drafters learn from the target's answers to these (self-distillation), never from the
evaluation prompt suite, which `build_instructions` checks.

Every piece gets every task of its kind. Tasks mirror what the suite measures without reusing it:
summarise / explain / ask questions about a documentation section (summarization, QA, RAG-like
grounding), explain / annotate / refactor / test a standard-library function (coding, code editing).
Deterministic for a given Python version; the split into training and validation is by a hash of the
text, so it is stable as the corpus grows.

Knows nothing about models or tokens.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path

from backend.lab.prompts import DEFAULT_SUITE, SUITE_DIR, load_suite

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
    source: str  # "doc:<topic>" or "code:<module>.<function>"
    text: str
    reference: str = ""  # an existing answer the prefill-only teacher reads instead of generating one

    @property
    def split(self) -> str:
        """'validation' for about one instruction in twelve, else 'train' (a stable hash of the text)."""
        return "validation" if int(hashlib.sha256(self.text.encode()).hexdigest(), 16) % 12 == 0 else "train"


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
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("__"):
                # the def line from its column on, then the body as written (ast.get_source_segment is quadratic)
                first, last = node.lineno - 1, node.end_lineno - 1
                text = "\n".join([lines[first][node.col_offset :], *lines[first + 1 : last + 1]])
                text = text[: len(text) - len(lines[last]) + node.end_col_offset] if last > first else text
                if 200 <= len(text) <= MAX_FUNCTION_CHARS and "\t" not in text:
                    found.append((f"{module}.{node.name}", _dedent(text)))
    return found


def build_instructions(seed: int = 0) -> list[Instruction]:
    """Every instruction of the corpus, shuffled with a fixed seed; none contains an evaluation prompt."""
    rng = random.Random(seed)
    items = [(f"doc:{topic}", task.format(text=text)) for topic, text in doc_chunks() for task in DOC_TASKS]
    items += [(f"code:{name}", task.format(text=text)) for name, text in stdlib_functions() for task in CODE_TASKS]
    rng.shuffle(items)
    instructions = [Instruction(f"i{number:05d}", source, text) for number, (source, text) in enumerate(items)]
    check_held_out(instructions)
    return instructions


def check_held_out(instructions: list[Instruction]) -> None:
    """The evaluation suites must not leak into training data."""
    for suite in sorted(SUITE_DIR.glob("*.jsonl")) or [DEFAULT_SUITE]:
        for question in load_suite(suite):
            probe = question.turns[0][:120]
            if any(probe in instruction.text for instruction in instructions):
                raise ValueError(f"evaluation prompt {question.question_id} of {suite.name} leaked into the corpus")


def _dedent(text: str) -> str:
    """Methods come indented from the second line on: ast gives the first line without its indent."""
    lines = text.splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    cut = min(indents, default=0) - 4 if lines and lines[0].lstrip().startswith(("def ", "async def ")) else 0
    if cut <= 0:
        return text
    return "\n".join([lines[0]] + [line[cut:] if line[:cut].isspace() else line for line in lines[1:]])
