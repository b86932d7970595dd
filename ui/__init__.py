"""Streamlit helpers shared by the pages: the worker connection, token rendering, charts, forms."""
