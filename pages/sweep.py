"""Sweep: measure the Pareto / Acceptance / Co-design grid from the browser. A form picks drafters, D
values, batch sizes, temperatures, drafter option values, confidence stops, token-tree budgets, prompt
categories, prompts per category and max new tokens (a quick preset fills it with a grid of about three
minutes on a laptop CPU); the worker runs the sweep as a job that outlives this page, which polls it for
a progress bar with ETA and can cancel it. The command line's `bench sweep` runs the same grid."""

from __future__ import annotations

import math

import streamlit as st

from backend.serving.client import WorkerError
from ui import connection, forms

QUICK = {
    "sw_drafters": ["ngram", "suffix"],
    "sw_lens": [2, 4, "auto"],
    "sw_sizes": [1, 4],
    "sw_temperatures": "0",
    "sw_categories": ["code_editing", "summarization", "qa", "rag"],
    "sw_per_category": 1,
    "sw_max_new": 64,
    "sw_stops": [0.0],
    "sw_trees": [0],
    "sw_tree_topk": 4,
}
SMALLEST = {  # a first look at the page: plain decoding and one drafter on two prompts
    **QUICK,
    "sw_drafters": ["ngram"],
    "sw_lens": [4],
    "sw_sizes": [1],
    "sw_categories": ["code_editing", "qa"],
    "sw_max_new": 32,
}
SIZES = [1, 2, 4, 8, 16, 32]

worker = connection.client()
st.title("Sweep")
st.caption(
    "Measures every drafter × D × batch size (× temperature × option value × confidence stop × tree budget) on "
    "prompts of "
    "the suite, with "
    "plain decoding (D = 0) as the baseline at each batch size and temperature, and stores the points for "
    "the Pareto, Acceptance and Co-design pages. It runs in the worker: leaving this page does not stop it."
)
try:
    models = worker.models()
except WorkerError as error:
    st.error(str(error))
    st.stop()
questions = forms.suite_questions()
categories = list(dict.fromkeys(q["category"] for q in questions))
offered = [d for d in models["drafters"] if d.get("available", True) and d["name"] != "none"]
for key, value in QUICK.items():
    st.session_state.setdefault(key, value)


def preset(values: dict) -> None:
    for key in [key for key in st.session_state if str(key).startswith("sw_opt_")]:
        st.session_state[key] = ""  # presets sweep every drafter's default options
    for key, value in values.items():
        st.session_state[key] = value


def parse_list(text: str, kind: type, what: str) -> list:
    """Comma-separated values of `kind`; a one-sentence error (and an empty list) if one is not."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return [kind(part) for part in parts]
    except ValueError:
        st.error(f"{what}: expected comma-separated {kind.__name__} values, got '{text}'.")
        return []


presets = st.columns(2)
presets[0].button("Quick preset (about 3 minutes on a laptop CPU)", on_click=preset, args=(QUICK,), key="sw_quick")
presets[1].button("Smallest sweep (about 30 seconds)", on_click=preset, args=(SMALLEST,), key="sw_smallest")
left, right = st.columns(2)
with left:
    target = forms.target_input("sw", models)
    drafters = st.multiselect("Drafters", [d["name"] for d in offered], key="sw_drafters")
    lens = st.multiselect("Draft lengths D (0, plain decoding, is always measured)", forms.D_CHOICES, key="sw_lens")
    sizes = st.multiselect("Batch sizes", SIZES, key="sw_sizes")
    temperatures = parse_list(
        st.text_input("Temperatures (comma-separated; 0 = greedy)", key="sw_temperatures"), float, "Temperatures"
    )
with right:
    chosen_categories = st.multiselect("Prompt categories", categories, key="sw_categories")
    per_category = int(st.number_input("Prompts per category", 1, 10, key="sw_per_category"))
    max_new = int(st.number_input("Max new tokens", 1, 2048, key="sw_max_new"))
    stops = st.multiselect(
        "Confidence stops (0 = none)",
        forms.CONFIDENCE_STOPS,
        key="sw_stops",
        help="Each drafter is also measured with its chains cut before the first draft whose running product of "
        "the drafter's probabilities falls below each value (0 keeps the plain chains).",
    )
    tree_drafters = [d["name"] for d in offered if d.get("trees")]
    budget_column, topk_column = st.columns(2)
    budgets = budget_column.multiselect(
        "Tree budgets (0 = chains)",
        forms.TREE_BUDGETS,
        key="sw_trees",
        help="Drafters that build token trees are also measured drafting a tree of each budget (drafts verified "
        f"per step; D caps its depth): {', '.join(tree_drafters) or 'none offered'}. The others draft chains. "
        "Confidence stops apply to chains only.",
    )
    tree_topk = topk_column.select_slider("Children per tree node", forms.TREE_TOPKS, key="sw_tree_topk")
    options: dict[str, list] = {}
    option_infos = {option["name"]: option for d in offered if d["name"] in drafters for option in d.get("options", [])}
    with st.expander(f"Drafter options to sweep ({len(option_infos)})"):
        st.caption("Comma-separated values; empty keeps the drafter's default. A weights folder is a path.")
        for name, option in option_infos.items():
            text = st.text_input(f"{option['label']} ({name})", key=f"sw_opt_{name}", help=option["help"])
            kind = str if option["type"] == "str" else int if option["type"] == "int" else float
            values = parse_list(text, kind, option["label"]) if text.strip() else []
            if values:
                options[name] = values


def shapes(drafter: dict) -> int:
    """How many configurations `drafter` is swept over at each D: its option combinations, each drafting chains
    at every confidence stop (where budget 0 is swept or it builds no trees) and a tree at every other budget."""
    names = {option["name"] for option in drafter.get("options", [])}
    combinations = math.prod(len(values) for name, values in options.items() if name in names)
    draft_shapes = sum(len(stops) if budget == 0 else 1 for budget in budgets) if drafter.get("trees") else len(stops)
    return combinations * draft_shapes


nonzero = [d for d in lens if d != 0]
swept = sum(shapes(d) for d in offered if d["name"] in drafters)
configs = len(temperatures) * len(sizes) * (1 + swept * len(nonzero))
prompts = [q for c in chosen_categories for q in [q for q in questions if q["category"] == c][:per_category]]
st.caption(f"{configs} configurations × {len(prompts)} prompts = {configs * len(prompts)} decoded rows.")

job_id = st.session_state.get("sw_job")
job = None
if job_id:
    try:
        job = worker.sweep_job(job_id)
    except WorkerError:
        st.session_state.pop("sw_job")  # the worker restarted: the job is gone
        job = None
running = job is not None and job["status"] in ("queued", "running")
ready = drafters and nonzero and sizes and temperatures and stops and budgets and prompts
if st.button("Start sweep", type="primary", disabled=running or not ready, key="sw_start"):
    body = {
        "target": target,
        "questions": prompts,
        "drafters": drafters,
        "draft_lens": lens,
        "batch_sizes": sizes,
        "temperatures": temperatures,
        "options": options,
        "min_confidences": stops,
        "tree_budgets": budgets,
        "tree_topk": tree_topk,
        "max_new_tokens": max_new,
        "settings": {"source": "dashboard", "categories": chosen_categories, "per_category": per_category},
    }
    try:
        st.session_state["sw_job"] = worker.start_sweep(**body)["job_id"]
        st.rerun()
    except WorkerError as error:
        st.error(str(error))
if not ready and not running:
    st.caption(
        "Pick at least one drafter, one D above 0, one batch size, one temperature, one confidence stop, "
        "one tree budget and one category."
    )


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "…"
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


@st.fragment(run_every=1.0 if running else None)
def progress() -> None:
    """The job's progress bar, ETA and Cancel while it runs; where its points are once it is done."""
    try:
        state = worker.sweep_job(st.session_state["sw_job"])
    except WorkerError as error:
        st.error(str(error))
        return
    if state["status"] == "queued":
        st.info(f"Waiting for the worker: {state['position']} job(s) ahead.")
    fraction = state["done"] / state["total"] if state["total"] else 0.0
    st.progress(
        min(1.0, fraction),
        text=f"{state['label'] or 'starting'} · {state['done']}/{state['total'] or '?'} rows · elapsed "
        f"{duration(state['elapsed_s'])} · ETA {duration(state['eta_s'])}",
    )
    if state["status"] in ("queued", "running"):
        if st.button("Cancel sweep", key="sw_cancel"):
            worker.cancel_sweep(state["job_id"])
            st.rerun()
        return
    if running:  # it finished while this fragment was polling: redraw the page without polling
        st.rerun()
    where = "the Pareto, Acceptance and Co-design pages (in the sidebar)"
    if state["status"] == "complete":
        st.success(f"Sweep {(state['sweep_id'] or '')[:8]} stored: its points are on {where}.")
    elif state["status"] == "cancelled":
        st.warning(f"Sweep cancelled: the configurations it finished are stored and shown on {where}.")
    else:
        st.error(f"The sweep failed: {state['error']}")


if job is not None:
    progress()
