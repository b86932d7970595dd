"""How numbers look in the dashboard's tables: floats to a readable precision, counts with thousands
separators. The data itself (and every CSV or Parquet export) keeps full precision; only the display rounds."""

from __future__ import annotations

import pandas as pd
import streamlit as st


def number_formats(table: pd.DataFrame) -> dict:
    """Column settings showing each number column readably: whole numbers (counts, ids; a float column when
    missing values made it one) with thousands separators, other floats to three decimals where every value
    is below 1 (probabilities, ρ) and to two otherwise."""
    formats = {}
    for column in table.columns:
        values = table[column]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            continue
        present = values.dropna()
        if pd.api.types.is_integer_dtype(values) or (len(present) and (present == present.round()).all()):
            formats[column] = st.column_config.NumberColumn(format="localized")
        else:
            formats[column] = st.column_config.NumberColumn(format="%.3f" if present.abs().max() < 1 else "%.2f")
    return formats
