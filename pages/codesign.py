"""Co-design: the seed article's draft-length rules for the chosen target (G, D = 128/G - 1, the
ladder where G x (1 + D) fills 128-wide tiles), the predicted speedup AL(D)/(1 + ρD) from measured AL
and ρ drawn with the measured speedup, the best D per batch size, and the choice exported as vLLM,
SGLang and TensorRT-LLM settings. The analysis is backend/lab/codesign.py's, served by the worker."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from backend.serving.client import WorkerError
from ui import charts, connection, forms

worker = connection.client()
st.title("Co-design: choosing D for a target")

top = st.columns([2, 1])
target, _ = forms.analysis_target("cd", worker, top[0])
try:
    drafters = sorted({p["drafter"] for p in worker.sweep_points(target=target)} - {"none"})
except WorkerError as error:
    st.error(str(error))
    st.stop()
BEST = "(fastest measured)"
choice = top[1].selectbox("Drafter", [BEST, *drafters], key="cd_drafter")
try:
    report = worker.codesign(target, None if choice == BEST else choice)
except WorkerError as error:
    st.error(str(error))
    st.stop()

facts = st.columns(5)
facts[0].metric("Query heads", report["num_attention_heads"])
facts[1].metric("KV heads", report["num_key_value_heads"])
facts[2].metric("G (query heads per KV head)", f"{report['G']:g}")
facts[3].metric("Starting D = 128/G − 1", f"{report['d_start']:g}")
facts[4].metric("Measured ρ (draft / verify time)", f"{report['rho']:.3f}" if "rho" in report else "–")
ladder = ", ".join(str(d) for d in report["d_ladder"]) or "none up to 64"
st.markdown(f"**D ladder** (G × (1 + D) a multiple of 128, up to 64): {ladder}")
st.caption(
    "The rules come from attention kernels that process 128 query rows per tile: with G query heads "
    "sharing a KV head, a verify pass of 1 + D tokens fills G × (1 + D) rows, so D = 128/G − 1 costs about "
    "what one token costs where attention dominates (long contexts, large batches). On a small model or a "
    "CPU the matmuls dominate instead, and the measured curve below says where the rule holds here."
)

if "predicted" not in report:
    st.info(
        "No sweep with plain decoding and this drafter at batch size 1 is stored for this target, so only "
        "the rules are shown: run `python -m backend bench sweep --drafters ngram --draft-lens 0,2,4,8 "
        "--batch-sizes 1,4`."
    )
    st.stop()

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
