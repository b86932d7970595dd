"""User-facing errors.

A `SpecScopeError` carries a one-line message that says what went wrong and what to do. The CLI
prints it without a traceback; the worker returns it as a JSON error. Anything else escaping is a bug.
"""


class SpecScopeError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class ModelLoadError(SpecScopeError):
    """A model or tokenizer could not be loaded from the given spec."""


def first_line(error: BaseException) -> str:
    """An exception's message cut to its first line (its type's name when it has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
