"""The input widgets the Live and Compare pages share: prompt (typed or from the suite), target,
drafter with its options and D, and sampling settings. Each returns request fields for the worker."""

from __future__ import annotations

import streamlit as st

from backend.lab.prompts import DEFAULT_SUITE, load_suite

TURN_SEPARATOR = "==="
D_CHOICES = [*range(17), "auto"]
DRAFTERS = ["suffix", "ngram", "draft-model", "layerskip", "eagle3", "mtp", "dflash", "dspark", "none"]


@st.cache_data(show_spinner=False)
def suite_questions() -> list[dict]:
    return [{"question_id": str(q.question_id), "category": q.category, "turns": list(q.turns)}
            for q in load_suite(DEFAULT_SUITE)]


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
    text = st.text_area("Prompt", key=f"{prefix}_prompt", height=160,
                        help=f"A line holding only {TURN_SEPARATOR} starts a new turn; each turn sees the "
                             "model's answers to the earlier ones.")
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
    return st.selectbox("Target model", specs, key=f"{prefix}_target")


def drafter_input(prefix: str, models: dict, default: str = "suffix", default_len: int | str = "auto") -> dict:
    """Drafter name (those the worker has weights for), D (slider 0-16 or auto) and the drafter's options."""
    available = {d["name"] for d in models["drafters"] if d.get("available", True)}
    names = [name for name in DRAFTERS if name in available]
    drafter = st.selectbox("Drafter", names, index=names.index(default), key=f"{prefix}_drafter",
                           help="Trained drafters (eagle3, mtp, dflash, dspark) are listed when weights trained for "
                                "the target are found under data/drafters/.")
    draft_len = st.select_slider("Draft length D", D_CHOICES, value=default_len, key=f"{prefix}_d",
                                 help="Tokens drafted per step; 0 is plain decoding, auto adapts D every step.")
    fields = {"drafter": drafter, "draft_len": draft_len}
    with st.expander("Drafter options"):
        if drafter == "ngram":
            fields["ngram_min"] = st.number_input("shortest n-gram", 1, 16, 1, key=f"{prefix}_nmin")
            fields["ngram_max"] = st.number_input("longest n-gram", 1, 16, 4, key=f"{prefix}_nmax")
        elif drafter == "suffix":
            fields["suffix_max_spec_factor"] = st.number_input("max_spec_factor", 0.1, 64.0, 1.0,
                                                               key=f"{prefix}_factor")
            fields["suffix_min_token_prob"] = st.number_input("min_token_prob", 0.0, 1.0, 0.1, key=f"{prefix}_minp")
            fields["suffix_max_depth"] = st.number_input("tree depth", 2, 128, 24, key=f"{prefix}_depth")
        elif drafter == "layerskip":
            exit_layer = st.number_input("exit after layer (0 = half the layers)", 0, 256, 0, key=f"{prefix}_exit")
            fields["layerskip_exit_layer"] = exit_layer or None
        elif drafter in ("eagle3", "mtp", "dflash", "dspark"):
            path = st.text_input("weights folder (empty: the shipped one)", "", key=f"{prefix}_drafter_path")
            fields["drafter_path"] = path.strip() or None
        elif drafter == "draft-model":
            spec = st.text_input("draft model (HF id, folder or .gguf; empty: the student distilled for this "
                                 "target)", "", key=f"{prefix}_draft_model")
            fields["draft_model"] = spec.strip() or None
        else:
            st.caption("No options.")
    return fields


def sampling_input(prefix: str) -> dict:
    columns = st.columns(3)
    temperature = columns[0].slider("Temperature", 0.0, 2.0, 0.0, 0.05, key=f"{prefix}_temperature",
                                    help="0 is greedy; above 0 the acceptance is rejection sampling")
    max_new = columns[1].number_input("Max new tokens", 1, 2048, 128, key=f"{prefix}_max_new")
    seed = columns[2].number_input("Seed", 0, 2**31 - 1, 0, key=f"{prefix}_seed")
    return {"temperature": temperature, "max_new_tokens": int(max_new), "seed": int(seed)}


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
