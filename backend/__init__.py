"""SpecScope backend: models, the speculative-decoding engine, drafters, metrics and the CLI.

Nothing in this package imports Streamlit; the dashboard talks to it through the worker.
"""
