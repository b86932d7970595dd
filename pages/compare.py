"""Compare: one prompt, 2-4 drafters (each with its own D) in side-by-side lanes streaming together,
then a summary table and overlaid acceptance histograms. Replay scores every lane against one target
rollout, so the lanes differ only by the drafter."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from backend.serving.client import WorkerError
from ui import charts, connection, forms, tokens

worker = connection.client()
st.title("Compare drafters")

try:
    models = worker.models()
except WorkerError as error:
    st.error(str(error))
    st.stop()

DEFAULT_LANES = [("suffix", "auto"), ("ngram", 4), ("ngram", 8), ("suffix", 8)]

prompt = forms.prompt_input("cmp")
settings_columns = st.columns([2, 1, 1])
with settings_columns[0]:
    target = forms.target_input("cmp", models)
lane_count = settings_columns[1].number_input("Lanes", 2, 4, 2, key="cmp_lanes")
replay = settings_columns[2].checkbox(
    "Replay on one rollout",
    key="cmp_replay",
    help="Run the target once, then score every drafter against that same "
    "text (matters when sampling: otherwise each lane samples its own).",
)
sampling = forms.sampling_input("cmp")
lane_columns = st.columns(int(lane_count))
lanes = []
for index, column in enumerate(lane_columns):
    with column:
        st.markdown(f"**Lane {index + 1}**")
        name, draft_len = DEFAULT_LANES[index]
        lanes.append(forms.drafter_input(f"cmp{index}", models, default=name, default_len=draft_len))
run = st.button("Run all lanes", type="primary", key="cmp_run", disabled=sampling is None)
st.button("Stop", key="cmp_stop", help="Stops every lane: the stream closes and the worker cancels the job.")
status = st.empty()
view = forms.output_view("cmp")
outputs = [column.empty() for column in st.columns(int(lane_count))]

if run:
    if not any(turn.strip() for turn in prompt["messages"]):
        status.warning("The prompt is empty: type something or pick a prompt from the suite.")
        st.stop()
    state = {"lanes": [{"spec": lane, "steps": [], "summary": None} for lane in lanes], "error": None}
    st.session_state["cmp_last"] = state
    shown_at = 0.0
    try:
        for record in worker.compare(**prompt, **sampling, target=target, lanes=lanes, replay=replay):
            kind = record["type"]
            if connection.show_progress(status, record):
                continue
            if kind == "step":
                state["lanes"][record["lane"]]["steps"].append(record)
                if time.perf_counter() - shown_at > 0.1:
                    for slot, lane in zip(outputs, state["lanes"], strict=False):
                        slot.html(tokens.output_html(lane["steps"], view))
                    shown_at = time.perf_counter()
            elif kind == "summary":
                state["lanes"][record["lane"]]["summary"] = record
    except WorkerError as error:
        state["error"] = str(error)

state = st.session_state.get("cmp_last")
if state:
    if state["error"]:
        status.error(state["error"])
    for index, (slot, lane) in enumerate(zip(outputs, state["lanes"], strict=False)):
        spec = lane["spec"]
        slot.html(
            f"<b>Lane {index + 1}: {spec['drafter']} · D={spec['draft_len']}</b>"
            + tokens.output_html(lane["steps"], view, (lane["summary"] or {}).get("text"))
        )
    rows = []
    for index, lane in enumerate(state["lanes"]):
        summary = lane["summary"]
        if summary:
            rows.append(
                {
                    "lane": index + 1,
                    "drafter": lane["spec"]["drafter"],
                    "D": str(lane["spec"]["draft_len"]),
                    "AL": summary["al"],
                    "acceptance rate": summary["acceptance_rate"],
                    "tokens/s": summary["tokens_per_s"],
                    "speedup vs plain": summary["speedup"],
                    "draft overhead": summary["draft_overhead"],
                    "target forwards": summary["target_forwards"],
                }
            )
    if rows:
        st.subheader("Summary")
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            column_config={
                "acceptance rate": st.column_config.NumberColumn(format="percent"),
                "draft overhead": st.column_config.NumberColumn(
                    format="%.3f", help="drafting time / verification time"
                ),
            },
        )
        histograms = {
            f"{i + 1}: {lane['spec']['drafter']} D={lane['spec']['draft_len']}": charts.accepted_histogram(
                lane["steps"]
            )
            for i, lane in enumerate(state["lanes"])
            if lane["steps"]
        }
        st.plotly_chart(charts.histogram_figure(histograms))
    elif not state["error"]:
        status.warning("Stopped before the end.")
