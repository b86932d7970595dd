"""Table number formats: whole numbers with separators, small floats to three decimals, others to two."""

from __future__ import annotations

import pandas as pd

from ui.tables import number_formats


def test_each_number_column_gets_a_readable_format():
    table = pd.DataFrame(
        {
            "drafter": ["ngram", "suffix"],
            "steps": [1200, 35],
            "question_id": [7.0, None],  # a whole-number column made float by a missing value
            "acceptance": [0.4295, 0.731],
            "al": [3.6667, 1.1304],
            "nothing": [float("nan"), float("nan")],
        }
    )
    formats = {column: config["type_config"].get("format") for column, config in number_formats(table).items()}
    assert formats == {
        "steps": "localized",
        "question_id": "localized",
        "acceptance": "%.3f",
        "al": "%.2f",
        "nothing": "%.2f",
    }
