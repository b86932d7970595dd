"""History: every stored run, filtered by target, drafter, D, category, status and date, with the first
line of its prompt; open one to replay it in the Live view; export the selection as CSV or Parquet."""

from __future__ import annotations

import io
from datetime import datetime, time, timedelta

import pandas as pd
import streamlit as st

from backend.serving.client import WorkerError
from ui import connection, tables

worker = connection.client()
st.title("Run history")

COLUMNS = [
    "created_at",
    "prompt",
    "status",
    "kind",
    "target",
    "drafter",
    "draft_len",
    "category",
    "question_id",
    "al",
    "acceptance_rate",
    "tokens_per_s",
    "baseline_tokens_per_s",
    "new_tokens",
    "temperature",
    "device",
    "run_id",
]

try:
    everything = pd.DataFrame(worker.runs(limit=100_000))
except WorkerError as error:
    st.error(str(error))
    st.stop()
if everything.empty:
    st.info("No runs yet: run something on the Live or Compare page.")
    st.stop()


def options(column: str) -> list[str]:
    return ["(any)"] + sorted({str(v) for v in everything[column].dropna()})


def first_line(turns: list[str] | None) -> str:
    """The prompt as one short line: its first turn's first non-empty line, cut at 80 characters."""
    lines = [line.strip() for line in (turns or [""])[0].splitlines() if line.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= 80 else line[:79] + "…"


columns = st.columns([3, 2, 1, 2, 2, 3])  # the date range needs room for two dates
chosen = {
    "target": columns[0].selectbox("Target", options("target"), key="hist_target"),
    "drafter": columns[1].selectbox("Drafter", options("drafter"), key="hist_drafter"),
    "draft_len": columns[2].selectbox("D", options("draft_len"), key="hist_d"),
    "category": columns[3].selectbox("Category", options("category"), key="hist_category"),
    "status": columns[4].selectbox("Status", options("status"), key="hist_status"),
}
today = datetime.now().date()
dates = columns[5].date_input(
    "Dates",
    (today - timedelta(days=30), today),
    format="YYYY-MM-DD",
    key="hist_dates",
    help="Runs created from the first day to the last, both included.",
)
filters = {name: value for name, value in chosen.items() if value != "(any)"}
if isinstance(dates, tuple) and len(dates) == 2:
    filters["since"] = datetime.combine(dates[0], time.min).isoformat()
    filters["until"] = datetime.combine(dates[1], time.max).isoformat()

try:
    runs = pd.DataFrame(worker.runs(**filters))
except WorkerError as error:
    st.error(str(error))
    st.stop()
if runs.empty:
    st.info("No run matches these filters.")
    st.stop()

runs["prompt"] = runs["turns"].map(first_line)
runs["created_at"] = pd.to_datetime(runs["created_at"], format="ISO8601")
table = runs[[c for c in COLUMNS if c in runs.columns]]
picked = st.dataframe(
    table,
    hide_index=True,
    on_select="rerun",
    selection_mode="multi-row",
    key="hist_table",
    column_config={
        **tables.number_formats(table),
        "created_at": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm:ss"),
        "prompt": st.column_config.TextColumn(width="large", help="The first line of the prompt's first turn"),
        "acceptance_rate": st.column_config.NumberColumn(format="percent"),
        "al": st.column_config.NumberColumn(format="%.2f"),
        "tokens_per_s": st.column_config.NumberColumn(format="%.1f"),
        "baseline_tokens_per_s": st.column_config.NumberColumn(format="%.1f"),
        "temperature": st.column_config.NumberColumn(format="%.2f"),
    },
)
rows = picked.selection.rows if picked is not None else []
selection = table.iloc[rows] if rows else table
st.caption(f"{len(table)} runs match; {len(rows)} selected (exports take the selection, or every match).")

labels = [
    f"{str(r.created_at)[:19]} · {r.drafter} D={r.draft_len} · {r.category or '-'} · {r.run_id[:8]}"
    for r in selection.itertuples()
]
buttons = st.columns([3, 1, 1, 1])
choice = buttons[0].selectbox("Run to open", labels, key="hist_choice", label_visibility="collapsed")
if buttons[1].button("Open in Live", key="hist_open", help="Replay this run's steps in the Live view."):
    try:
        st.session_state["live_replay"] = worker.run(selection.iloc[labels.index(choice)]["run_id"])
    except WorkerError as error:
        st.error(str(error))
        st.stop()
    st.switch_page("pages/live.py")
buttons[2].download_button(
    "Export CSV", selection.to_csv(index=False).encode(), "specscope_runs.csv", "text/csv", key="hist_csv"
)
parquet = io.BytesIO()
selection.to_parquet(parquet, index=False)
buttons[3].download_button(
    "Export Parquet", parquet.getvalue(), "specscope_runs.parquet", "application/octet-stream", key="hist_parquet"
)
