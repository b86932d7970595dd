"""Pareto: the measured throughput-interactivity trade-off from stored sweeps, every drafter and D
across batch sizes, with the Pareto frontier highlighted, and speculation on vs off compared at
matched interactivity (both frontiers interpolated), as serving dashboards compare them. The shipped
reference sweep is overlaid (open diamonds, its own legend group) and never mixed into the user's
points, and so are sweeps measured on serving engines (`bench sweep --engine`: open squares, labelled by
engine, version and hardware); with no sweep of the user's own, the page shows the others and says so."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.lab.analysis import matched_interactivity, newest_per_config, pareto_frontier
from backend.lab.hints import SWEEP_HINT
from backend.serving.client import WorkerError
from ui import charts, connection, forms

worker = connection.client()
st.title("Throughput vs interactivity")
st.caption(
    "Throughput: generated tokens/s across the batch (prefill included). Interactivity: tokens/s per user "
    "= 1 / mean time per output token. Each point is one (drafter, D, batch size) of a sweep."
)

top = st.columns([2, 2])
target, sweeps = forms.analysis_target("par", worker, top[0])
mine = [s for s in sweeps if not s.get("reference") and not s.get("engine")]  # SpecScope's engine, here
try:
    stored = worker.sweep_points(target=target)
except WorkerError as error:
    st.error(str(error))
    st.stop()


def overall(points: list[dict]) -> list[dict]:
    """The configurations' overall points (not per category or split) that have both figures, newest
    first per configuration, each named by its drafter and what the sweep varied ('ngram [T=0.7]')."""
    kept = newest_per_config(
        [
            p
            for p in points
            if p["category"] == "all" and p["split"] == "all" and p["throughput_tps"] and p["interactivity_tps"]
        ]
    )
    return [{**p, "drafter": p["drafter"] + (f" [{p['variant']}]" if p.get("variant") else "")} for p in kept]


reference = overall([p for p in stored if p.get("reference")])
labels = sorted({p["reference"] for p in stored if p.get("reference")})
served = [p for p in stored if p.get("engine") and not p.get("reference")]
engines = overall(served)  # one point per configuration and deployment
if not mine and not reference and not engines:
    st.info(
        f"No complete sweep stored for this target yet: run `{SWEEP_HINT}` (it writes through the running "
        "worker), or start one on the Sweep page."
    )
    st.stop()
if mine:
    NEWEST = "(newest result per configuration)"
    choices = [NEWEST] + [f"{str(s['created_at'])[:19]} · {s['sweep_id'][:8]}" for s in mine]
    choice = top[1].selectbox("Sweep", choices, key="par_sweep")
    try:
        if choice == NEWEST:
            points = [p for p in stored if not p.get("reference") and not p.get("engine")]
        else:
            points = worker.sweep_points(sweep_id=mine[choices.index(choice) - 1]["sweep_id"])
    except WorkerError as error:
        st.error(str(error))
        st.stop()
    points = overall(points)
else:
    points = []
    shown = f"the {labels[0]}, measured there, not here" if labels else "the serving engines' points only"
    st.info(
        f"No sweep of your own for this target yet, so the chart shows {shown}. Run "
        f"`{SWEEP_HINT}` or start a sweep on the Sweep page to measure this machine."
    )
if reference and mine:
    st.caption(f"Open diamonds: the {'; '.join(labels)} (shipped, for comparison; not part of your frontier).")
if engines:
    st.caption(
        "Open squares: serving engines measured with `bench sweep --engine` (D and concurrency C per point; "
        "AL as the engine reports it), beside SpecScope's own engine; not part of its frontier."
    )

drafters = sorted({p["drafter"] for p in points + reference + engines})
chosen = st.multiselect("Drafters", drafters, default=drafters, key="par_drafters")
points = [p for p in points if p["drafter"] in chosen]
reference = [p for p in reference if p["drafter"] in chosen]
engines = [p for p in engines if p["drafter"] in chosen]
if not points and not reference and not engines:
    st.info("Pick at least one drafter.")
    st.stop()

measured = points or reference  # the frontier and the comparison below are of the user's own points, if any
frontier = pareto_frontier(measured)
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
table = pd.DataFrame(
    [
        {
            **{key: p.get(key) for key in columns},
            "source": p.get("reference") or (charts.engine_label(p) if p.get("engine") else "yours"),
            "on_frontier": p in measured and (p["drafter"], str(p["draft_len"]), p["batch_size"]) in on_frontier,
        }
        for p in points + reference + engines
    ]
)
charts.chart_with_table(charts.pareto_figure(points, frontier, reference, engines), table, "pareto")

st.subheader("Speculation on vs off at matched interactivity")
if not measured:
    st.info("No points of SpecScope's engine to compare: the comparison is drawn from its sweeps.")
    st.stop()
if not points:
    st.caption(f"From the {labels[0]}.")
baseline = [p for p in measured if p["drafter"] == "none"]
rows = [
    {"drafter": name, **row}
    for name in chosen
    if name != "none"
    for row in matched_interactivity(baseline, [p for p in measured if p["drafter"] == name])
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
