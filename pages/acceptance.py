"""Acceptance: how far each drafter's drafts get, from the stored drafting steps of the chosen run kinds
(Live, Compare and sweep runs by default; replays, which score a stored rollout, and the shipped
reference on request) and statuses (cancelled runs left out by default): AL vs D and AL vs tree budget
(0 = chains) with bootstrap CIs, acceptance histograms per drafter and category, and per-position
acceptance as survival and as conditional probability, side by side. With nothing of the user's own for
the target, the reference sweep's steps are shown, labelled as such. Sweeps of serving engines
(`bench sweep --engine`) have no steps of their own: their AL, acceptance rate and per-position survival,
as each engine reports them, are listed below SpecScope's."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from backend.lab.hints import SWEEP_HINT, TREE_SWEEP_HINT
from backend.serving.client import WorkerError
from ui import charts, connection, forms, tree_budget

worker = connection.client()
st.title("Acceptance")
st.caption(
    "AL = 1 + accepted drafts / drafting steps (vLLM's definition; steps that drafted nothing are left "
    "out). CIs are 95% percentile bootstraps over runs."
)

top = st.columns([2, 1, 1])
target, _ = forms.analysis_target("acc", worker, top[0])
SPLITS = {"any length": None, "short (< 512 tokens)": "short", "medium": "medium", "long (2k+ tokens)": "long"}
split = top[2].selectbox(
    "Prompt length", list(SPLITS), key="acc_split", help="Input-length split of the prompt (recorded for sweep runs)"
)
KINDS = {"live": "generate", "compare": "compare", "replay": "replay", "sweep": "sweep", "reference": "reference"}
STATUSES = ["complete", "incomplete", "cancelled", "failed"]
filters = st.columns(2)
kinds = filters[0].multiselect(
    "Run kinds",
    list(KINDS),
    default=["live", "compare", "sweep"],
    key="acc_kinds",
    help="Replays score a stored plain rollout, so they are left out by default; reference is the shipped "
    "reference sweep, measured on another machine.",
)
statuses = filters[1].multiselect(
    "Run status",
    STATUSES,
    default=["complete", "incomplete"],
    key="acc_statuses",
    help="A cancelled run stopped where the user chose; an incomplete one was cut off by a worker restart.",
)
if not kinds or not statuses:
    st.info("Pick at least one run kind and one status.")
    st.stop()
try:
    groups = worker.acceptance(target=target, split=SPLITS[split], kind=[KINDS[k] for k in kinds], status=statuses)
    if not groups["pooled"] and "reference" not in kinds and groups["reference"]:
        groups = worker.acceptance(target=target, split=SPLITS[split], kind=["reference"], status=statuses)
        st.info(
            f"No drafting steps of your own for this target with these filters, so these charts show the "
            f"{groups['reference'][0]}, measured there, not here. Run something on the Live or Compare page, "
            f"start a sweep on the Sweep page, or run `{SWEEP_HINT}`."
        )
    elif "reference" in kinds and groups["reference"]:
        st.caption(f"Reference runs: the {'; '.join(groups['reference'])}.")
    pooled, per_category = groups["pooled"], groups["by_category"]
except WorkerError as error:
    st.error(str(error))
    st.stop()


def serving_engines() -> None:
    """The acceptance serving engines reported in their sweeps of this target (nothing when there are none)."""
    try:
        served = [p for p in worker.sweep_points(target=target) if p.get("engine") and p.get("status") != "failed"]
    except WorkerError as error:
        st.error(str(error))
        return
    if not served:
        return
    st.subheader("Serving engines")
    st.caption(
        "As each engine reports it (`bench sweep --engine`): AL from its server counters (vLLM, TensorRT-LLM) "
        "or from each reply's draft counts (SGLang, llama.cpp); per-position survival where the engine "
        "counts it (vLLM). Measured under load at the concurrency shown, not step by step."
    )
    rows = [
        {
            "engine": charts.engine_label(p),
            "draft_len": p["draft_len"],
            "concurrency": p["batch_size"],
            "al": p["al"],
            "acceptance_rate": p["acceptance_rate"],
            "al_from": p["al_from"],
            "survival": ", ".join(f"{s:.2f}" for s in p.get("survival") or []) or None,
            "measured_at": str(p["created_at"])[:19],
        }
        for p in served
    ]
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="acc_engines")


if not pooled:
    st.info(
        "No drafting steps stored for this target with these filters: run something on the Live or Compare "
        f"page, start a sweep on the Sweep page, or run `{SWEEP_HINT}`."
    )
    serving_engines()
    st.stop()

drafters = sorted({g["drafter"] for g in pooled})
chosen = top[1].multiselect("Drafters", drafters, default=drafters, key="acc_drafters")
pooled = [g for g in pooled if g["drafter"] in chosen]
per_category = [g for g in per_category if g["drafter"] in chosen]
if not pooled:
    st.info("Pick at least one drafter.")
    st.stop()


def table(groups: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(groups)[columns]


st.subheader("AL vs D")
fixed = [g for g in pooled if str(g["draft_len"]).isdigit()]
dynamic = [g for g in pooled if not str(g["draft_len"]).isdigit()]
al_columns = ["drafter", "draft_len", "runs", "drafting_steps", "al", "al_ci_low", "al_ci_high"]
if fixed:
    charts.chart_with_table(charts.al_vs_d_figure(fixed), table(fixed, al_columns), "al_vs_d")
if dynamic:
    st.caption("Dynamic draft lengths (one AL each, no D axis):")
    st.dataframe(table(dynamic, al_columns), hide_index=True, key="acc_dynamic")

st.subheader("AL vs tree budget")
by_budget = tree_budget.groups_by_budget(pooled)
if by_budget:
    budget_columns = ["drafter", "draft_len", "tree_budget", "runs", "drafting_steps", "al", "al_ci_low", "al_ci_high"]
    charts.chart_with_table(tree_budget.al_figure(by_budget), table(by_budget, budget_columns), "al_vs_tree_budget")
else:
    st.info(f"No run with a token tree stored for these filters: run `{TREE_SWEEP_HINT}`.")

st.subheader("Acceptance histograms")
lengths = list(dict.fromkeys(str(g["draft_len"]) for g in sorted(pooled, key=lambda g: str(g["draft_len"]))))
categories = ["(all pooled)"] + sorted({g["category"] for g in per_category})
pick = st.columns(2)
draft_len = pick[0].selectbox("D", lengths, index=len(lengths) - 1, key="acc_hist_d")
category = pick[1].selectbox("Category", categories, key="acc_hist_category")
source = pooled if category == categories[0] else [g for g in per_category if g["category"] == category]
shown = [g for g in source if str(g["draft_len"]) == draft_len]
histogram_rows = [
    {"drafter": g["drafter"], "draft_len": g["draft_len"], "category": g["category"], "accepted": j, "steps": n}
    for g in per_category + pooled
    for j, n in enumerate(g["histogram"])
]
charts.chart_with_table(
    charts.histogram_figure({g["drafter"]: g["histogram"] for g in shown}), pd.DataFrame(histogram_rows), "histograms"
)

st.subheader("Per-position acceptance")
st.caption(
    "The two curves engines both call 'per-position acceptance'. **Survival** (left): the share of "
    "drafting steps whose first k drafts were all accepted; vLLM's 'per-position acceptance rate' is "
    "this one. **Conditional** (right): of the steps that reached draft k with drafts 1..k-1 accepted, "
    "the share that accepted draft k; the DSpark paper and SPEED-Bench report this one."
)
position_rows = [
    {
        "drafter": g["drafter"],
        "draft_len": g["draft_len"],
        "category": g["category"],
        "position": k,
        "survival": s,
        "conditional": c,
    }
    for g in shown
    for k, (s, c) in enumerate(zip(g["survival"], g["conditional"], strict=True), 1)
]
sides = st.columns(2)
with sides[0]:
    charts.chart_with_table(
        charts.position_figure(shown, "survival", "Survival: P(drafts 1..k all accepted)"),
        pd.DataFrame(position_rows),
        "survival",
    )
with sides[1]:
    charts.chart_with_table(
        charts.position_figure(shown, "conditional", "Conditional: P(draft k accepted | 1..k-1 accepted)"),
        pd.DataFrame(position_rows),
        "conditional",
    )

serving_engines()
