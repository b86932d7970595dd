"""Readings for the prefill-only teacher: instructions that come with an existing answer (`reference`), so
the target is run once over prompt + answer instead of generating the answer token by token.

The answers are text every Python installation carries, under the PSF license: the language reference
topics (`pydoc_data.topics`), the standard library's docstrings (modules, classes, functions) and its
functions' source. Each is posed as the answer to a question a user could ask about it, so the target
reads it in the assistant's turn, where drafting happens. Deterministic for a given Python version; the
evaluation suites are held out (corpus.py checks it).

Knows nothing about models or tokens.
"""

from __future__ import annotations

import ast
import importlib.util
import random
import sys
from pathlib import Path

from backend.training.corpus import Instruction, check_held_out, doc_chunks, stdlib_functions

DOC_QUESTIONS = (
    "What does the Python language reference say about {name}?",
    "Explain {name} in Python.",
    "Show me the Python documentation on {name}.",
)
NAME_QUESTIONS = (
    "What does `{name}` in Python's standard library do?",
    "Describe `{name}` from the Python standard library.",
)
CODE_QUESTIONS = (
    "Show me how `{name}` is implemented in Python's standard library.",
    "Write a Python function like `{name}` from the standard library.",
)
MIN_DOCSTRING_CHARS = 300


def docstrings() -> list[tuple[str, str]]:
    """(name, docstring) of the pure-Python standard-library modules and of their classes and functions, where
    the docstring has some length, read from their source without importing them."""
    found = []
    for module in sorted(sys.stdlib_module_names):
        spec = None if module.startswith("_") else importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        try:
            tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef):
                docstring = ast.get_docstring(node)
                name = module if isinstance(node, ast.Module) else f"{module}.{node.name}"
                if docstring and len(docstring) >= MIN_DOCSTRING_CHARS and not name.split(".")[-1].startswith("_"):
                    found.append((name, docstring.strip()))
    return found


def build_readings(seed: int = 0) -> list[Instruction]:
    """Every reading, one question form per piece (chosen with a fixed seed), shuffled; none contains an
    evaluation prompt."""
    rng = random.Random(seed)
    pieces = [(DOC_QUESTIONS, f"doc:{topic}", topic, text) for topic, text in doc_chunks()]
    pieces += [(NAME_QUESTIONS, f"docstring:{name}", name, text) for name, text in docstrings()]
    pieces += [(CODE_QUESTIONS, f"code:{name}", name, f"```python\n{text}\n```") for name, text in stdlib_functions()]
    items = [(source, rng.choice(forms).format(name=name), answer) for forms, source, name, answer in pieces]
    rng.shuffle(items)
    readings = [
        Instruction(f"r{n:05d}", source, text, reference=answer) for n, (source, text, answer) in enumerate(items)
    ]
    check_held_out(readings)
    return readings
