"""argparse types for the command line: comma-separated lists of names, draft lengths, temperatures,
batch sizes, tree budgets, counts, seeds, drafter option values and JSON settings objects, each refusing bad
text with one sentence. Knows nothing about what the commands do with them."""

from __future__ import annotations

import argparse
import json

from backend.core.tree_shape import MAX_TREE_BUDGET
from backend.core.verify import MAX_TEMPERATURE
from backend.serving.validation import INT64_MAX, INT64_MIN


def names(text: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return parts


def draft_len(text: str) -> int | str:
    if text == "auto" or text.startswith("schedule:"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


def draft_lens(text: str) -> list[int | str]:
    return [draft_len(part) for part in names(text)]


def temperatures(text: str) -> list[float]:
    try:
        values = [float(part) for part in names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated temperatures, got {text!r}") from None
    if any(not 0 <= value <= MAX_TEMPERATURE for value in values):
        raise argparse.ArgumentTypeError(f"temperatures must be between 0 and {MAX_TEMPERATURE:g} (0 = greedy)")
    return values


def option_values(text: str) -> tuple[str, list[str]]:
    """NAME=V1,V2,... -> (name, values as text); the values are checked against the option's bounds later."""
    name, equals, values = text.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=V1,V2 (e.g. ngram_max=2,3,4), got {text!r}")
    return name.strip().replace("-", "_"), names(values)


def sizes(text: str) -> list[int]:
    try:
        found = [int(part) for part in names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated batch sizes, got {text!r}") from None
    if any(size < 1 for size in found):
        raise argparse.ArgumentTypeError("batch sizes must be at least 1")
    return found


def tree_topk(text: str) -> int:
    """Children per tree node: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"tree top-k must be at least 1, got {value}")
    return value


def confidence(text: str) -> float:
    """A confidence stop: a probability in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"a confidence stop must be in [0, 1), got {value}")
    return value


def confidences(text: str) -> list[float]:
    """0,0.1,0.3 -> [0.0, 0.1, 0.3]: confidence stops, 0 = none."""
    return [confidence(part) for part in names(text)]


def tree_budgets(text: str) -> list[int]:
    """0,8,16 -> [0, 8, 16]: nodes of a tree draft per step, 0 = a chain."""
    try:
        budgets = [int(part) for part in names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated tree budgets (0 = a chain), got {text!r}") from None
    if any(not 0 <= budget <= MAX_TREE_BUDGET for budget in budgets):
        raise argparse.ArgumentTypeError(f"tree budgets must be between 0 and {MAX_TREE_BUDGET} (0 = a chain)")
    return budgets


def tree_budget(text: str) -> int:
    """Nodes of a tree draft per step, 0 = a chain."""
    (budget,) = tree_budgets(text)
    return budget


def count(text: str) -> int:
    """How many of something to take: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def seed(text: str) -> int:
    """A random seed: any 64-bit integer, as the worker takes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not INT64_MIN <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError("a seed must fit in 64 bits (between -2**63 and 2**63 - 1)")
    return value


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({error.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object such as '{{\"draft_vocab_size\": 6144}}', got {text!r}"
        )
    return value


PRECISIONS = ("float32", "bfloat16", "float16")


def dtypes(text: str) -> list[str]:
    found = list(dict.fromkeys(names(text)))
    unknown = [name for name in found if name not in PRECISIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown dtype '{unknown[0]}': use {', '.join(PRECISIONS)}")
    return found
