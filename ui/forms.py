"""The input widgets the Live and Compare pages share: prompt (typed or from the suite), target,
drafter with its options, D, a token tree's budget (for drafters that build trees) and its training
card, sampling settings, and the output view picker.
Each input returns request fields for the worker; a number out of the worker's range is a
one-sentence message under the inputs, never a silent clamp."""

from __future__ import annotations

import streamlit as st

from backend.lab.prompts import DEFAULT_SUITE, load_suite
from ui import tokens

TURN_SEPARATOR = "==="
D_CHOICES = [*range(17), "auto"]
TREE_BUDGETS = [0, 4, 8, 12, 16, 24, 32, 48, 64]  # within the engine's bound (tree_shape.MAX_TREE_BUDGET)
TREE_TOPKS = [1, 2, 3, 4, 6, 8]
CONFIDENCE_STOPS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9]  # within the worker's bound [0, 1)
MAX_NEW_TOKENS = 2048  # the worker's bound on max_new_tokens (backend/serving/bodies.py; a test checks they agree)
MAX_SEED = 2**31 - 1


@st.cache_data(show_spinner=False)
def suite_questions() -> list[dict]:
    return [
        {"question_id": str(q.question_id), "category": q.category, "turns": list(q.turns)}
        for q in load_suite(DEFAULT_SUITE)
    ]


def prompt_input(prefix: str) -> dict:
    """Prompt fields: `messages` (user turns) plus the suite question's id and category if picked."""
    questions = suite_questions()
    labels = ["(type your own)"] + [f"{q['question_id']} · {q['category']} · {q['turns'][0][:60]}" for q in questions]

    def load_question() -> None:
        choice = st.session_state[f"{prefix}_suite"]
        if choice != labels[0]:
            question = questions[labels.index(choice) - 1]
            st.session_state[f"{prefix}_prompt"] = f"\n{TURN_SEPARATOR}\n".join(question["turns"])

    choice = st.selectbox("From the prompt suite", labels, key=f"{prefix}_suite", on_change=load_question)
    text = st.text_area(
        "Prompt",
        key=f"{prefix}_prompt",
        height=160,
        help=f"A line holding only {TURN_SEPARATOR} starts a new turn; each turn sees the "
        "model's answers to the earlier ones.",
    )
    turns = [part.strip() for part in text.split(f"\n{TURN_SEPARATOR}\n")]
    fields: dict = {"messages": turns}
    if choice != labels[0]:
        question = questions[labels.index(choice) - 1]
        if f"\n{TURN_SEPARATOR}\n".join(question["turns"]) == text:
            fields |= {"question_id": question["question_id"], "category": question["category"]}
    return fields


def target_input(prefix: str, models: dict, stored: list[str] = ()) -> str:
    """The worker's targets (default first), plus `stored`: targets that only have stored results."""
    specs = list(dict.fromkeys([models["default_target"], *(t["spec"] for t in models["targets"]), *stored]))
    chosen = st.selectbox("Target model", specs, key=f"{prefix}_target")
    precision = next((t.get("precision") for t in models["targets"] if t["spec"] == chosen), None)
    if precision:
        st.caption(precision_caption(precision))
    return chosen


def precision_caption(precision: dict) -> str:
    """'bfloat16 · CPU features amx_bf16 avx512_bf16 avx2': the dtype a target runs in, and what this CPU
    multiplies natively (the worker's /models says both)."""
    features = " ".join(precision["cpu_features"])
    return f"{precision['dtype']} · " + (f"CPU features {features}" if features else "on a GPU")


def drafter_input(prefix: str, models: dict, default: str = "suffix", default_len: int | str = "auto") -> dict:
    """Drafter name (those the worker offers: trained ones where weights for the target exist), D (slider
    0-16 or auto) and the drafter's options, all as the worker's `/models` describes them."""
    offered = [d for d in models["drafters"] if d.get("available", True)]
    offered = [d for d in offered if d["name"] != "none"] + [d for d in offered if d["name"] == "none"]
    names = [d["name"] for d in offered]
    drafter = st.selectbox(
        "Drafter",
        names,
        index=names.index(default) if default in names else 0,
        key=f"{prefix}_drafter",
        help="Trained drafters (eagle3, mtp, dflash, dspark) are listed when weights trained for "
        "the target are found under data/drafters/.",
    )
    chosen = offered[names.index(drafter)]
    if chosen.get("card"):
        drafter_card(chosen["card"])
    draft_len = st.select_slider(
        "Draft length D",
        D_CHOICES,
        value=default_len,
        key=f"{prefix}_d",
        help="Tokens drafted per step; 0 is plain decoding, auto adapts D every step.",
    )
    fields = {"drafter": drafter, "draft_len": draft_len}
    if chosen.get("trees"):
        fields |= tree_input(prefix)
    with st.expander("Drafter options"):
        if drafter != "none":
            fields["min_confidence"] = confidence_input(prefix, disabled=fields.get("tree_budget", 0) > 0)
        if chosen.get("summary"):
            st.caption(chosen["summary"])
        for option in chosen.get("options", []):
            fields[option["name"]] = option_input(prefix, option)
        if not chosen.get("options"):
            st.caption("No options.")
    return fields


def tree_input(prefix: str) -> dict:
    """Tree budget (0 = one chain) and children per node, for a drafter that builds token trees."""
    budget_column, topk_column = st.columns(2)
    budget = budget_column.select_slider(
        "Tree budget",
        TREE_BUDGETS,
        value=0,
        key=f"{prefix}_tree",
        help="Drafts verified per step as a token tree (0 = one chain): the target scores every branch "
        "in one pass and keeps the longest branch that matches (greedy) or walks the tree with rejection "
        "sampling (temperature > 0); D caps the tree's depth.",
    )
    topk = topk_column.select_slider(
        "Children per node",
        TREE_TOPKS,
        value=4,
        key=f"{prefix}_tree_topk",
        help="At most this many alternatives drafted after each node of the tree.",
        disabled=budget == 0,
    )
    return {"tree_budget": budget, "tree_topk": topk}


def confidence_input(prefix: str, disabled: bool) -> float:
    """The confidence stop of a chain (0 = none): drafting stops before the first token whose running product
    of the drafter's own probabilities is below it."""
    return st.select_slider(
        "Confidence stop",
        CONFIDENCE_STOPS,
        value=0.0,
        key=f"{prefix}_confidence",
        help="Stop a chain before the first draft whose running product of the drafter's probabilities falls "
        "below this (0 = never): fewer drafts that the target would reject, and fewer draft passes. "
        "Still exact: it only shortens drafts. Drafters without probabilities (ngram) are never cut; "
        "token trees ignore it.",
        disabled=disabled,
    )


def option_input(prefix: str, option: dict):
    """One drafter option's widget, from its description in `/models` (type, default, bounds, help)."""
    key, label, help_text = f"{prefix}_{option['name']}", option["label"], option["help"]
    if option["type"] == "str":
        default = option["default"]
        text = st.text_input(f"{label} (empty: {default or 'default'})", "", key=key, help=help_text)
        return text.strip() or default
    if option["optional"]:  # an int whose default (None) is the drafter's own choice
        value = st.number_input(f"{label} (0 = default)", 0, int(option["le"] or 1024), 0, key=key, help=help_text)
        return int(value) or None
    if option["type"] == "int":
        return int(
            st.number_input(
                label,
                int(option["ge"] or 0),
                int(option["le"] or 1024),
                int(option["default"]),
                key=key,
                help=help_text,
            )
        )
    low = option["ge"] if option["ge"] is not None else (option["gt"] + 0.01 if option["gt"] is not None else None)
    high = option["le"]
    return float(
        st.number_input(
            label,
            None if low is None else float(low),
            None if high is None else float(high),
            float(option["default"]),
            key=key,
            help=help_text,
        )
    )


def card_summary(card: dict) -> str:
    """One paragraph of a trained drafter's card: its data, training budget and measured AL."""
    seconds = card["seconds"]
    took = f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
    text = (
        f"Data: {card['data']}; {card['train_sequence_tokens']:,} sequence tokens. Training: "
        f"{card['training_tokens']:,} tokens in {card['steps']:,} steps, {took} on {card['device']} "
        f"({card['hardware']}). Measured AL: "
    )
    if card.get("validation"):
        text += (
            f"{card['validation'][-1]['al']:.2f} on held-out instructions (greedy, "
            f"D = {card['validation_draft_len']}); "
        )
    suite = card.get("suite") or []
    if not suite:
        return text + "by category: not measured on the evaluation suite."
    lengths = sorted({row["draft_len"] for row in suite})
    shown = card.get("validation_draft_len") if card.get("validation_draft_len") in lengths else lengths[-1]
    categories = ", ".join(f"{row['category']} {row['al']:.2f}" for row in suite if row["draft_len"] == shown)
    return text + f"by category on the evaluation suite (D = {shown}): {categories}."


def drafter_card(card: dict) -> None:
    """Under the drafter picker: what the trained drafter's weights were trained on, and its model card."""
    if "data" in card:
        st.caption(card_summary(card))
    if card.get("model_card_text"):
        with st.popover("Model card"):
            st.caption(f"`{card['model_card']}`")
            st.markdown(card["model_card_text"])


def output_view(prefix: str) -> str:
    """The output view picker, one per page: tokens.WITH_DRAFTS (with its legend) or tokens.ANSWER_ONLY."""
    view = st.segmented_control(
        "Output",
        tokens.VIEWS,
        default=tokens.WITH_DRAFTS,
        required=True,
        key=f"{prefix}_view",
        help="With drafts: every step's drafts coloured by fate. Answer only: the committed text, "
        "exactly the run's decoded output.",
    )
    if view == tokens.WITH_DRAFTS:
        st.html(tokens.STYLE + tokens.LEGEND)
    return view


def checked_int(
    column, label: str, low: int, high: int, default: int, key: str, help_text: str
) -> tuple[int, str | None]:
    """An integer input without a hard limit in the browser (which would clamp or drop a typed value
    silently); returns the value and, when it is outside [low, high], a one-sentence problem."""
    value = int(column.number_input(label, value=default, step=1, key=key, help=help_text))
    if low <= value <= high:
        return value, None
    return value, f"{label} must be between {low:,} and {high:,} (it is {value:,}): change it to run."


def sampling_input(prefix: str) -> dict | None:
    """Temperature, max new tokens and seed; None (with a message shown) while a number is out of range."""
    columns = st.columns(3)
    temperature = columns[0].slider(
        "Temperature",
        0.0,
        2.0,
        0.0,
        0.05,
        key=f"{prefix}_temperature",
        help="0 is greedy; above 0 the acceptance is rejection sampling",
    )
    max_new, too_many = checked_int(
        columns[1],
        "Max new tokens",
        1,
        MAX_NEW_TOKENS,
        128,
        f"{prefix}_max_new",
        f"Tokens to generate per turn, 1 to {MAX_NEW_TOKENS}.",
    )
    seed, bad_seed = checked_int(columns[2], "Seed", 0, MAX_SEED, 0, f"{prefix}_seed", f"0 to {MAX_SEED}.")
    problems = [p for p in (too_many, bad_seed) if p]
    for problem in problems:
        st.error(problem)
    return None if problems else {"temperature": temperature, "max_new_tokens": max_new, "seed": seed}


def analysis_target(prefix: str, worker, column) -> tuple[str, list[dict]]:
    """The target picker of the analysis pages (the worker's targets and those with stored sweeps), drawn in
    `column`; returns (target, its complete sweeps). A worker error stops the page with its message."""
    from backend.serving.client import WorkerError

    try:
        models = worker.models()
        sweeps = [s for s in worker.sweeps() if s["status"] == "complete"]
    except WorkerError as error:
        st.error(str(error))
        st.stop()
    with column:
        target = target_input(prefix, models, sorted({s["target"] for s in sweeps}))
    return target, [s for s in sweeps if s["target"] == target]
