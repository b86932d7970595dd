"""What every request must satisfy before it reaches a job or the store, beyond each field's own
bounds: text that is valid UTF-8 without NUL characters, integers that fit in 64 bits, finite
numbers, model or folder names the file system can look up, and times the store can compare.
Each failure is one sentence that names the field (DuckDB, torch and the file system would each
fail with an internal error instead).

Knows nothing about models, jobs or the store.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, model_validator

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_NAME_PART_BYTES = 255  # a file or folder name (most file systems)
MAX_NAME_BYTES = 4096  # a whole path (Linux's PATH_MAX)


def text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "text must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "text must be valid UTF-8 (it holds a lone surrogate)"
    return None


def value_problem(value: Any) -> str | None:
    """The first problem of a decoded JSON value (walked without recursion), as 'where: what'."""
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        where, item = pending.pop()
        problem = None
        if isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, bool):
            pass
        elif isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            problem = "integers must fit in 64 bits (between -2**63 and 2**63 - 1)"
        elif isinstance(item, float) and not math.isfinite(item):
            problem = "numbers must be finite"
        elif isinstance(item, dict):
            for key, child in item.items():
                key_problem = text_problem(key) if isinstance(key, str) else None
                if key_problem:
                    return f"{where or 'a key'}: {key_problem}"
                pending.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            pending.extend((f"{where}.{i}" if where else str(i), child) for i, child in enumerate(item))
        if problem:
            return f"{where}: {problem}" if where else problem
    return None


def name_problem(name: str) -> str | None:
    """Why a model spec or folder name cannot be looked up, or None."""
    problem = text_problem(name)
    if problem:
        return problem
    encoded = name.encode("utf-8")
    if len(encoded) > MAX_NAME_BYTES or any(len(part) > MAX_NAME_PART_BYTES for part in encoded.split(b"/")):
        return f"names must be at most {MAX_NAME_BYTES} bytes, each part between slashes at most {MAX_NAME_PART_BYTES}"
    return None


class CheckedBody(BaseModel):
    """A request body whose every value (nested ones included) is checked by value_problem first."""

    @model_validator(mode="before")
    @classmethod
    def storable_values(cls, data: Any) -> Any:
        problem = value_problem(data)
        if problem:
            raise ValueError(problem)
        return data


def _checked_name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def _naive_utc(moment: datetime) -> datetime:
    """A time as the store keeps it: UTC without a zone (a time without a zone is taken as UTC)."""
    if moment.tzinfo is None:
        return moment
    try:
        return moment.astimezone(UTC).replace(tzinfo=None)
    except OverflowError as error:
        raise ValueError("the time must fall between the years 1 and 9999 in UTC") from error


ModelName = Annotated[str, AfterValidator(_checked_name)]
Moment = Annotated[datetime, AfterValidator(_naive_utc)]
