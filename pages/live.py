"""Live: paste a prompt, pick a drafter and D, and watch each step as the target accepts or rejects
its drafts, with running AL, acceptance rate, speed and the speedup over plain decoding of the same
prompt measured in the same job (with when and how), whether the output is token-identical to that
plain run, and how warm the drafter's memory across requests was. With a tree budget, each step's
token tree can be opened and drawn whole."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import streamlit as st

from backend.core.metrics import summary
from backend.serving.client import WorkerError
from ui import charts, connection, forms, run_status, tokens, trees

worker = connection.client()
st.title("Live speculative decoding")


def show_metrics(slots, running: dict, speedup: float | None, speedup_note: str | None = None) -> None:
    slots[0].metric(
        "AL",
        f"{running['al']:.2f}",
        help="mean acceptance length: 1 + accepted drafts per drafting step (bonus token included, as vLLM counts)",
    )
    slots[1].metric("Acceptance rate", f"{100 * running['acceptance_rate']:.1f}%")
    slots[2].metric("Tokens/s", f"{running['tokens_per_s']:.1f}")
    slots[3].metric(
        "Speedup vs plain",
        run_status.speedup_text(speedup),
        help=speedup_note
        or "decode tokens/s over plain decoding (D = 0) of the same prompt and settings, measured in the same job",
    )


def show_charts(slots, steps: list[dict], drafter: str | None) -> None:
    slots[0].plotly_chart(charts.step_times_figure(steps))
    histogram = {"this run": charts.accepted_histogram(steps)}
    slots[1].plotly_chart(charts.histogram_figure(histogram, {"this run": drafter} if drafter else None))


def describe(start: dict) -> str:
    cost = start.get("cost") or {}
    memory = run_status.memory_note(start)
    tree = f" · token tree ≤ {start['tree_budget']} drafts" if start.get("tree_budget") else ""
    tree += f" · stops below confidence {start['min_confidence']:g}" if start.get("min_confidence") else ""
    return (
        f"{start['target']} · {start['drafter']} · D={start['draft_len']}{tree} · nominal ρ "
        f"{cost.get('nominal_rho', 0):.3f} · G = {start['facts']['G']}" + (f" · {memory}" if memory else "")
    )


def show_trees(steps: list[dict]) -> None:
    """For a run with token trees: pick one of its tree steps (the one that kept the most, at first)
    and see the whole tree."""
    tree_steps = [step for step in steps if trees.is_tree_step(step)]
    if not tree_steps:
        return
    labels = [f"turn {step.get('turn', 0) + 1} · step {step['index']}" for step in tree_steps]
    best = max(range(len(tree_steps)), key=lambda i: (tree_steps[i]["accepted"], -i))
    st.subheader("Token trees")
    st.caption(
        f"{len(tree_steps)} of {len(steps)} steps drafted a tree. Green: the path the target kept; red: "
        "drafts it rejected; grey: drafts below a rejected one; the diamond is the target's own token."
    )
    chosen = st.select_slider("Step", labels, value=labels[best], key="live_tree_step")
    st.plotly_chart(trees.tree_figure(tree_steps[labels.index(chosen)]))


def stored_baseline(run: dict) -> dict | None:
    """The plain run measured in the same job as a stored run (same group), if the store has one."""
    if not run.get("group_id") or not run.get("created_at"):
        return None
    started = datetime.fromisoformat(run["created_at"])
    around = {"since": (started - timedelta(days=1)).isoformat(), "until": (started + timedelta(days=1)).isoformat()}
    try:
        candidates = worker.runs(kind="baseline", target=run["target"], **around)
    except WorkerError:
        return None
    return next((r for r in candidates if r.get("group_id") == run["group_id"]), None)


def running_figures(steps: list[dict]) -> dict:
    return summary(charts.as_steps(steps))


def show_stored_run(run: dict) -> None:
    """A run opened from History, replayed step by step."""
    st.info(
        f"Replaying stored run {run['run_id'][:8]} · {run['drafter']} D={run['draft_len']} · "
        f"{run['target']} · {run['status']}"
    )
    if st.button("Back to live input"):
        del st.session_state["live_replay"]
        st.rerun()
    steps = run["steps"]
    st.caption(" / ".join(run["turns"])[:300])
    shown = st.slider("Step", 0, len(steps), len(steps), key="live_replay_step") if steps else 0
    play = st.button("Play from the start")
    view = forms.output_view("live")
    output, right = st.empty(), st.container()
    slots = right.columns(4)
    if play:
        for count in range(1, len(steps) + 1):
            output.html(tokens.output_html(steps[:count], view))
            time.sleep(0.04)
    output.html(tokens.output_html(steps[:shown], view, run.get("output_text") if shown == len(steps) else None))
    speedup = (
        run["tokens_per_s"] / run["baseline_tokens_per_s"]
        if run.get("baseline_tokens_per_s") and run.get("tokens_per_s")
        else None
    )
    note = run_status.stored_speedup_note(run, stored_baseline(run)) if speedup else None
    show_metrics(slots, running_figures(steps[:shown]), speedup, note)
    if note:
        right.caption(note)
    if steps:
        show_charts(st.columns(2), steps[:shown], run.get("drafter"))
        show_trees(steps[:shown])


ended_before = run_status.previous_stream_end("live")  # how the last stream ended, if cut short

if "live_replay" in st.session_state:
    show_stored_run(st.session_state["live_replay"])
    st.stop()

try:
    models = worker.models()
except WorkerError as error:
    st.error(str(error))
    st.stop()

left, right = st.columns([3, 2], gap="large")
with left:
    prompt = forms.prompt_input("live")
    column_a, column_b = st.columns(2)
    with column_a:
        target = forms.target_input("live", models)
    with column_b:
        drafter = forms.drafter_input("live", models)
    sampling = forms.sampling_input("live")
    run = run_status.stream_buttons("live", *st.columns(2), "Run", disabled=sampling is None)
    status = st.empty()
    described = st.empty()
    view = forms.output_view("live")
    output = st.empty()
with right:
    metric_slots = [column.empty() for column in st.columns(2) for _ in range(2)]
    checks = st.empty()
    chart_slots = [st.empty(), st.empty()]

if run:
    if not any(turn.strip() for turn in prompt["messages"]):
        st.session_state.pop("live_last", None)
        status.warning("The prompt is empty: type something or pick a prompt from the suite.")
        st.stop()
    last = {"steps": [], "summary": None, "error": None, "ended": "stopped", "start": None}
    st.session_state["live_last"] = last
    body = {**prompt, **drafter, **sampling, "target": target}
    shown_at = 0.0
    run_status.stream_started("live")
    try:
        for record in worker.generate(**body):
            kind = record["type"]
            if connection.show_progress(status, record):
                continue
            if kind == "start":
                last["start"] = record
                status.empty()
                described.caption(describe(record))
            elif kind == "step":
                last["steps"].append(record)
                if time.perf_counter() - shown_at > 0.08 or len(last["steps"]) == 1:
                    output.html(tokens.output_html(last["steps"], view))
                    show_metrics(metric_slots, record["running"], None)
                    shown_at = time.perf_counter()
            elif kind == "summary":
                last["summary"] = record
                last["ended"] = None
    except WorkerError as error:
        last["error"] = str(error)
    run_status.stream_ended("live")
elif ended_before and "live_last" in st.session_state:
    st.session_state["live_last"]["ended"] = ended_before

last = st.session_state.get("live_last")
if last:
    if last["error"]:
        status.error(last["error"])
    else:
        run_status.show_end(status, last["ended"])
    if last["start"]:
        described.caption(describe(last["start"]))
    steps = last["steps"]
    if steps:
        output.html(tokens.output_html(steps, view, (last["summary"] or {}).get("text")))
        finished = last["summary"] or {}
        note = run_status.baseline_note(finished) if finished else None
        show_metrics(metric_slots, running_figures(steps), finished.get("speedup"), note)
        show_charts(chart_slots, steps, (last["start"] or {}).get("drafter"))
    if last["summary"]:
        finished = last["summary"]
        status.caption(
            f"{finished['new_tokens']} tokens · {finished['target_forwards']} target forwards · "
            f"measured ρ {finished['rho'] or 0:.3f} · finish: {finished['finish_reason']}"
        )
        with checks.container():
            st.caption(run_status.baseline_note(finished))
            verdict = run_status.identity_note(finished.get("identity"))
            if verdict:
                getattr(st, verdict[0])(verdict[1])
    show_trees(steps)
else:
    output.html(tokens.output_html([], view, empty="Press Run to decode."))
