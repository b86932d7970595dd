"""Pareto: the measured throughput-interactivity trade-off from stored sweeps, every drafter and D
across batch sizes, with the Pareto frontier highlighted, and speculation on vs off compared at
matched interactivity (both frontiers interpolated), as serving dashboards compare them."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.lab.analysis import matched_interactivity, newest_per_config, pareto_frontier
from backend.serving.client import WorkerError
from ui import charts, connection, forms

worker = connection.client()
st.title("Throughput vs interactivity")
st.caption(
    "Throughput: generated tokens/s across the batch (prefill included). Interactivity: tokens/s per user "
    "= 1 / mean time per output token. Each point is one (drafter, D, batch size) of a sweep."
)

top = st.columns([2, 2])
target, mine = forms.analysis_target("par", worker, top[0])
if not mine:
    st.info(
        "No complete sweep stored for this target yet: run `python -m backend bench sweep --drafters "
        "ngram,suffix --draft-lens 0,4,8 --batch-sizes 1,4,16` (it writes through the running worker)."
    )
    st.stop()
NEWEST = "(newest result per configuration)"
labels = [NEWEST] + [f"{str(s['created_at'])[:19]} · {s['sweep_id'][:8]}" for s in mine]
choice = top[1].selectbox("Sweep", labels, key="par_sweep")
try:
    if choice == NEWEST:
        points = worker.sweep_points(target=target)
    else:
        points = worker.sweep_points(sweep_id=mine[labels.index(choice) - 1]["sweep_id"])
except WorkerError as error:
    st.error(str(error))
    st.stop()
points = newest_per_config(
    [
        p
        for p in points
        if p["category"] == "all" and p["split"] == "all" and p["throughput_tps"] and p["interactivity_tps"]
    ]
)
drafters = sorted({p["drafter"] for p in points})
chosen = st.multiselect("Drafters", drafters, default=drafters, key="par_drafters")
points = [p for p in points if p["drafter"] in chosen]
if not points:
    st.info("Pick at least one drafter.")
    st.stop()

frontier = pareto_frontier(points)
on_frontier = {(p["drafter"], str(p["draft_len"]), p["batch_size"]) for p in frontier}
columns = [
    "drafter",
    "draft_len",
    "batch_size",
    "throughput_tps",
    "interactivity_tps",
    "ttft_s",
    "al",
    "al_ci_low",
    "al_ci_high",
    "rho",
    "lossless",
]
table = pd.DataFrame(points)[columns].assign(
    on_frontier=[(p["drafter"], str(p["draft_len"]), p["batch_size"]) in on_frontier for p in points]
)
charts.chart_with_table(charts.pareto_figure(points, frontier), table, "pareto")

st.subheader("Speculation on vs off at matched interactivity")
baseline = [p for p in points if p["drafter"] == "none"]
rows = [
    {"drafter": name, **row}
    for name in chosen
    if name != "none"
    for row in matched_interactivity(baseline, [p for p in points if p["drafter"] == name])
]
if not baseline:
    st.info("Include plain decoding (drafter 'none', D = 0) to compare against it.")
elif not rows:
    st.info("The speculative and plain frontiers share no interactivity range to compare on.")
else:
    st.caption(
        "Each drafter's frontier (all its D and batch sizes) and plain decoding's frontier, interpolated "
        "linearly at the same tokens/s per user."
    )
    charts.chart_with_table(charts.matched_figure(rows), pd.DataFrame(rows), "matched_interactivity")
