"""Compare: one prompt, 2-4 drafters (each with its own D, and a tree budget where it builds trees; such a
lane is named 'ngram [tree=16]' in every header, table and legend) in side-by-side lanes streaming together,
then a summary table (speedups over one plain decoding of the prompt measured in the same job, and
whether each lane's output is token-identical to it) and overlaid acceptance histograms. Every lane
drafts with its own drafter state, from the same snapshot of any memory across requests. Replay
scores every lane against one target rollout, so the lanes differ only by the drafter."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from backend.serving.client import WorkerError
from ui import charts, connection, forms, run_status, tokens

worker = connection.client()
st.title("Compare drafters")

try:
    models = worker.models()
except WorkerError as error:
    st.error(str(error))
    st.stop()

DEFAULT_LANES = [("suffix", "auto"), ("ngram", 4), ("ngram", 8), ("suffix", 8)]
# the numbers are formatted here, so the table shows what a person reads whatever the grid does
SUMMARY_COLUMNS = {
    "AL": st.column_config.TextColumn(help="mean acceptance length: accepted drafts + 1 per step"),
    "acceptance rate": st.column_config.TextColumn(help="accepted drafts / drafted tokens"),
    "speedup vs plain": st.column_config.TextColumn(
        help="tokens/s over plain decoding of the same prompt, measured in the same job"
    ),
    "draft overhead": st.column_config.TextColumn(help="drafting time / verification time"),
}

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
ended_before = run_status.previous_stream_end("cmp")  # how the last stream ended, if cut short
run = run_status.stream_buttons("cmp", *st.columns([1, 1, 4])[:2], "Run all lanes", disabled=sampling is None)
status = st.empty()
view = forms.output_view("cmp")
outputs = [column.empty() for column in st.columns(int(lane_count))]

if run:
    if not any(turn.strip() for turn in prompt["messages"]):
        status.warning("The prompt is empty: type something or pick a prompt from the suite.")
        st.stop()
    state = {
        "lanes": [{"spec": lane, "steps": [], "summary": None, "start": None} for lane in lanes],
        "error": None,
        "ended": "stopped",
    }
    st.session_state["cmp_last"] = state
    shown_at = 0.0
    run_status.stream_started("cmp")
    try:
        for record in worker.compare(**prompt, **sampling, target=target, lanes=lanes, replay=replay):
            kind = record["type"]
            if connection.show_progress(status, record):
                continue
            if kind == "start":
                state["lanes"][record["lane"]]["start"] = record
            elif kind == "step":
                state["lanes"][record["lane"]]["steps"].append(record)
                if time.perf_counter() - shown_at > 0.1:
                    for slot, lane in zip(outputs, state["lanes"], strict=False):
                        slot.html(tokens.output_html(lane["steps"], view))
                    shown_at = time.perf_counter()
            elif kind == "summary":
                state["lanes"][record["lane"]]["summary"] = record
        state["ended"] = None
    except WorkerError as error:
        state["error"] = str(error)
    run_status.stream_ended("cmp")
elif ended_before and "cmp_last" in st.session_state:
    st.session_state["cmp_last"]["ended"] = ended_before

state = st.session_state.get("cmp_last")
if state:
    if state["error"]:
        status.error(state["error"])
    else:
        run_status.show_end(status, state["ended"])
    for index, (slot, lane) in enumerate(zip(outputs, state["lanes"], strict=False)):
        spec = lane["spec"]
        slot.html(
            f"<b>Lane {index + 1}: {run_status.lane_name(spec)} · D={spec['draft_len']}</b>"
            + tokens.output_html(lane["steps"], view, (lane["summary"] or {}).get("text"))
        )
    rows = []
    for index, lane in enumerate(state["lanes"]):
        summary = lane["summary"]
        if summary:
            rows.append(
                {
                    "lane": index + 1,
                    "drafter": run_status.lane_name(lane["spec"]),
                    "D": str(lane["spec"]["draft_len"]),
                    "AL": f"{summary['al']:.2f}",
                    "acceptance rate": f"{100 * summary['acceptance_rate']:.1f}%",
                    "tokens/s": f"{summary['tokens_per_s']:.1f}",
                    "speedup vs plain": run_status.speedup_text(summary["speedup"]),
                    "draft overhead": f"{summary['draft_overhead']:.3f}",
                    "target forwards": summary["target_forwards"],
                    "same tokens as plain": run_status.identity_cell(summary.get("identity")),
                    "drafter memory at start": run_status.memory_cell(lane["start"]),
                }
            )
    if rows:
        st.subheader("Summary")
        st.dataframe(pd.DataFrame(rows), hide_index=True, column_config=SUMMARY_COLUMNS)
        first = next(lane["summary"] for lane in state["lanes"] if lane["summary"])
        st.caption(run_status.baseline_note(first))
        for index, lane in enumerate(state["lanes"]):
            verdict = run_status.identity_note((lane["summary"] or {}).get("identity"))
            if verdict:
                getattr(st, verdict[0])(f"Lane {index + 1}: {verdict[1]}")
        if any((lane["start"] or {}).get("memory") for lane in state["lanes"]):
            st.caption(run_status.MEMORY_POLICY)
        shown = [
            (f"{i + 1}: {run_status.lane_name(lane['spec'])} D={lane['spec']['draft_len']}", lane)
            for i, lane in enumerate(state["lanes"])
            if lane["steps"]
        ]
        histograms = {label: charts.accepted_histogram(lane["steps"]) for label, lane in shown}
        st.plotly_chart(charts.histogram_figure(histograms, {label: lane["spec"]["drafter"] for label, lane in shown}))
