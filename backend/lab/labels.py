"""How a measured configuration is named wherever it is shown: its variant (what it varied besides
drafter and D: temperature, drafter options, a tree budget) and its drafter named with that variant,
'ngram [tree=16]', as the store's acceptance query names its groups. Plain strings only, so the
dashboard can name lanes and groups without importing the sweep runner or the engine."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def variant_label(temperature: float, combo: Mapping, tree_budget: int = 0, min_confidence: float = 0.0) -> str | None:
    """What a configuration varies besides drafter, D and B: 'T=0.7, ngram_max=2, tree=16, conf=0.2' (a weights
    folder by its name); None for greedy chains with the drafter's default options and no confidence stop."""
    return ", ".join(variant_parts(temperature, combo, tree_budget, min_confidence)) or None


def variant_parts(temperature: float, combo: Mapping, tree_budget: int = 0, min_confidence: float = 0.0) -> list[str]:
    """The pieces of a variant, in order: 'T=0.7', each swept option as 'name=value' (a weights folder by its
    name), 'tree=16', 'conf=0.2'; each only where it differs from a greedy plain chain."""
    parts = [f"T={temperature:g}"] if temperature else []
    parts += [f"{key}={Path(str(value)).name if key == 'drafter_path' else value}" for key, value in combo.items()]
    parts += [f"tree={tree_budget}"] if tree_budget else []
    parts += [f"conf={min_confidence:g}"] if min_confidence else []
    return parts


def drafter_label(drafter: str, variant: str | None) -> str:
    """A drafter named with its variant: 'ngram [tree=16]', or just 'ngram' without one (the store's
    acceptance groups are named so: RunStore.acceptance_tables)."""
    return f"{drafter} [{variant}]" if variant else drafter
