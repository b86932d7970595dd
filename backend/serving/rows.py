"""Stored rows (DataFrame records) as the JSON the worker's routes answer with. Knows nothing about
routes or the store's queries."""

from __future__ import annotations

import json
import math


def json_row(row: dict) -> dict:
    """A DataFrame row as JSON-friendly values (NaN -> None, arrays -> lists, JSON text -> objects)."""
    cleaned = {}
    for key, value in row.items():
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, list):
            value = [None if isinstance(v, float) and math.isnan(v) else v for v in value]
        elif isinstance(value, float) and math.isnan(value):
            value = None
        elif key in ("turns", "drafter_options") and isinstance(value, str):
            value = json.loads(value)
        elif value is not None and hasattr(value, "isoformat"):
            value = value.isoformat()
        cleaned[key] = value
    return cleaned
