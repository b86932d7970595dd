"""The kinds `python -m backend train` can train, by name. Each is a module exposing the same
`TrainableKind` interface (loop.py), so the loop looks a kind up and calls it; nothing adapts them.
Knows nothing about data or about any kind's maths.
"""

from __future__ import annotations

from backend.core.errors import SpecScopeError
from backend.drafters import dflash, dspark, eagle3, mtp
from backend.training import student
from backend.training.loop import TrainableKind

KINDS: dict[str, TrainableKind] = {module.KIND: module for module in (eagle3, mtp, dflash, dspark, student)}


def kind_named(name: str) -> TrainableKind:
    """The kind called `name`, or one clear error naming the kinds there are."""
    if name not in KINDS:
        raise SpecScopeError(f"unknown drafter kind '{name}': choose one of {', '.join(KINDS)}")
    return KINDS[name]
