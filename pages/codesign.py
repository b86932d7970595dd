"""Co-design: the draft-length rules (G, D = 128/G - 1 as a whole D, the ladder where
G x (1 + D) fills 128-wide tiles, and why the ladder is empty when it is), the KV-cache cost of D, and,
for a target with stored sweeps, the predicted speedup AL(D)/(1 + ρD) drawn with the measured one, the
best D per batch size and the choice exported as vLLM, SGLang and TensorRT-LLM settings.

A target here is analysed by the worker (backend/lab/codesign.py, which carries its measurements); a
what-if (a well-known architecture or heads typed by hand) is worked out on the page with the same pure
rules (backend/lab/draft_rules.py). Nothing is measured for a what-if, so no curve is drawn for it."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from backend.lab.analysis import plain_of
from backend.lab.architectures import ARCHITECTURES
from backend.lab.draft_rules import DTYPE_BYTES, draft_rules, heads_problem, kv_cost, kv_lengths
from backend.lab.hints import CODESIGN_HINT
from backend.serving.client import WorkerError
from ui import charts, connection, forms

LOADED, KNOWN, TYPED = "A target here (measured)", "A well-known architecture", "Heads typed by hand"
BEST = "(fastest measured)"


def loaded_target() -> dict:
    """The worker's report on a target: its config facts, the rules and what was measured for it."""
    worker = connection.client()
    top = st.columns([2, 1])
    target, _ = forms.analysis_target("cd", worker, top[0])
    try:
        stored = {p["drafter"] for p in worker.sweep_points(target=target)}
        drafters = sorted(d for d in stored if d != plain_of(d))  # plain decoding is the baseline
        choice = top[1].selectbox("Drafter", [BEST, *drafters], key="cd_drafter")
        report = worker.codesign(target, None if choice == BEST else choice)
    except WorkerError as error:
        st.error(str(error))
        st.stop()
    return report


def known_architecture() -> dict:
    name = st.selectbox("Architecture", list(ARCHITECTURES), key="cd_arch")
    arch = ARCHITECTURES[name]
    sliding = (
        f", {arch.sliding_layers} of them with a {arch.sliding_window}-token sliding window"
        if arch.sliding_layers
        else ""
    )
    st.caption(
        f"{arch.num_layers} layers{sliding}; hidden size {arch.hidden_size}; head size {arch.head_dim}. "
        f"Config facts from {arch.source}."
    )
    return arch.facts()


def typed_architecture() -> dict:
    cells = st.columns(4)
    facts = {
        "num_attention_heads": int(cells[0].number_input("Query heads", value=32, step=1, key="cd_heads")),
        "num_key_value_heads": int(cells[1].number_input("KV heads", value=8, step=1, key="cd_kv_heads")),
        "num_layers": int(cells[2].number_input("Layers", value=32, step=1, key="cd_layers")),
        "head_dim": int(cells[3].number_input("Head size", value=128, step=1, key="cd_head_dim")),
    }
    problem = heads_problem(facts["num_attention_heads"], facts["num_key_value_heads"])
    if not problem and min(facts["num_layers"], facts["head_dim"]) < 1:
        problem = "Layers and head size must both be at least 1."
    if problem:
        st.error(problem)
        st.stop()
    return facts


def show_rules(facts: dict, rules: dict, rho: float | None) -> None:
    cells = st.columns(5)
    cells[0].metric("Query heads", facts["num_attention_heads"])
    cells[1].metric("KV heads", facts["num_key_value_heads"])
    cells[2].metric("G (query heads per KV head)", f"{rules['G']:g}")
    cells[3].metric("Suggested D", rules["d_suggested"])
    cells[4].metric("Measured ρ (draft / verify time)", "–" if rho is None else f"{rho:.3f}")
    st.markdown(f"**Suggested D = {rules['d_suggested']}**: 128/G − 1 = {rules['d_start']:.2f}, {rules['rounding']}.")
    ladder = ", ".join(str(d) for d in rules["d_ladder"])
    st.markdown(
        f"**D ladder** (G × (1 + D) a multiple of 128, D ≤ {rules['ladder_cap']}): "
        + (ladder if ladder else f"none. {rules['ladder_note']}")
    )
    rungs = pd.DataFrame(rules["rungs"]).rename(
        columns={"rows": "attention rows G × (1 + D)", "tiles": "128-row tiles", "fill": "tile rows used"}
    )
    st.dataframe(
        rungs,
        hide_index=True,
        key="cd_rungs",
        column_config={"tile rows used": st.column_config.NumberColumn(format="percent")},
    )
    st.caption(
        "Each row is the largest D whose verify pass fits that many tiles; 100 % rows are the ladder. "
        "The rules come from attention kernels that process 128 query rows per tile: with G query heads "
        "sharing a KV head, a verify pass of 1 + D tokens fills G × (1 + D) rows, so D = 128/G − 1 costs about "
        "what one token costs where attention dominates (long contexts, large batches). On a small model or a "
        "CPU the matmuls dominate instead, and a measured curve says where the rule holds."
    )


def show_kv_cost(facts: dict, rules: dict, head_dim_note: str) -> None:
    st.subheader("KV-cache cost of D")
    cells = st.columns(3)
    context = int(cells[0].number_input("Context length (tokens)", value=8192, step=1024, key="cd_context"))
    dtype = cells[1].selectbox("KV-cache dtype", list(DTYPE_BYTES), key="cd_dtype")
    budget = float(cells[2].number_input("KV-cache memory (GiB)", value=40.0, step=1.0, key="cd_budget"))
    if context < 1 or budget <= 0:
        st.error("Context length must be at least 1 token and the memory more than 0 GiB.")
        return
    rows = kv_cost(facts, context, dtype, budget, kv_lengths(rules))
    table = pd.DataFrame(
        {
            "D": [r["D"] for r in rows],
            "KV per sequence (MiB)": [r["bytes_per_sequence"] / 2**20 for r in rows],
            "sequences that fit": [r["sequences"] for r in rows],
            "vs D = 0": [r["vs_plain"] for r in rows],
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        key="cd_kv",
        column_config={
            "KV per sequence (MiB)": st.column_config.NumberColumn(format="%.1f"),
            "sequences that fit": st.column_config.NumberColumn(format="%d"),
            "vs D = 0": st.column_config.NumberColumn(format="percent"),
        },
    )
    sliding = facts.get("sliding_layers") or 0
    window = (
        f" Of the {facts['num_layers']} layers, {sliding} keep only a {facts['sliding_window']}-token window: "
        "they hold min(context, window) + D tokens."
        if sliding
        else ""
    )
    st.caption(
        f"Per sequence: 2 (K and V) × {facts['num_layers']} layers × {facts['num_key_value_heads']} KV heads × "
        f"{facts['head_dim']} head size × {DTYPE_BYTES[dtype]} bytes × (context + D) tokens: the D drafts' keys "
        f"and values are written by the verify pass and kept until the rejected ones are dropped.{window}"
        f"{head_dim_note} Sequences that fit = whole sequences in the memory given. Not included: the drafter's "
        "own cache, paging block rounding, activations and weights."
    )


st.title("Co-design: choosing D for a target")
source = st.radio("Architecture", [LOADED, KNOWN, TYPED], horizontal=True, key="cd_source")
report = None
if source == LOADED:
    facts = rules = report = loaded_target()
elif source == KNOWN:
    facts = known_architecture()
    rules = draft_rules(facts["num_attention_heads"], facts["num_key_value_heads"])
else:
    facts = typed_architecture()
    rules = draft_rules(facts["num_attention_heads"], facts["num_key_value_heads"])
show_rules(facts, rules, None if report is None else report.get("rho"))
head_dim_note = ""
if report is not None and not report["head_dim_from_config"]:
    head_dim_note = (
        f" Head size taken as hidden size / query heads ({report['hidden_size']} / {report['num_attention_heads']})"
        "; any sliding-window layers of this target are counted as full ones."
    )
show_kv_cost(facts, rules, head_dim_note)

if report is None:
    st.info(
        "Nothing is measured for a what-if architecture, so no speedup curve is drawn: the rules and the "
        "KV-cache cost above follow from its config facts alone."
    )
    st.stop()
if "predicted" not in report:
    st.info(
        "No sweep with plain decoding and this drafter at batch size 1 is stored for this target, so only "
        f"the rules are shown: run `{CODESIGN_HINT}`."
    )
    st.stop()
if report.get("reference"):
    st.caption(f"Measured curve from the shipped {report['reference']} (nothing of your own is stored for it yet).")

st.subheader("Predicted vs measured speedup")
lengths = sorted(report["predicted"], key=int)
speedups = pd.DataFrame(
    {
        "draft_len": [int(d) for d in lengths],
        "al": [report["al"][d] for d in lengths],
        "predicted": [report["predicted"][d] for d in lengths],
        "measured": [report["measured"][d] for d in lengths],
    }
)
charts.chart_with_table(charts.codesign_figure(report), speedups, "codesign_speedup")
st.caption(
    f"Batch size 1, drafter {report['drafter']}; "
    + (
        f"ρ = {report['rho']:.3f} is the mean measured draft / verify time over these D."
        if report["rho"] is not None
        else "a serving engine reports no draft / verify times, so only the measured curve is drawn."
    )
    + " Grey lines mark the suggested D and the ladder where they fall inside the measured range."
)

st.subheader("Recommended D per batch size")
recommended = pd.DataFrame(
    {
        "batch_size": [int(b) for b in report["recommended_d"]],
        "best_measured_d": list(report["recommended_d"].values()),
        "best_fixed_d": [report["recommended_fixed_d"].get(b) for b in report["recommended_d"]],
    }
)
st.dataframe(recommended, hide_index=True, key="cd_recommended")
st.caption(
    "The D (fixed or dynamic) of highest measured throughput at each batch size, D = 0 included; engines "
    "take a fixed D, so the best fixed one is what the snippets export."
)

st.subheader("Export")
if report.get("snippets"):
    for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang"), ("tensorrt_llm", "TensorRT-LLM")):
        if engine in report["snippets"]:
            st.markdown(f"**{label}**")
            st.code(report["snippets"][engine], language="bash" if engine != "tensorrt_llm" else "python")
    st.download_button(
        "Download the analysis (JSON)",
        json.dumps(report, indent=2).encode(),
        "specscope_codesign.json",
        "application/json",
        key="cd_json",
    )
else:
    st.info(report.get("snippets_note", "Nothing to export for this drafter."))
