"""Plotly figures for the pages: per-step draft vs verify time, and acceptance histograms."""

from __future__ import annotations

from types import SimpleNamespace

import plotly.graph_objects as go

from backend.metrics import acceptance_stats


def step_times_figure(steps: list[dict]) -> go.Figure:
    index = [s["index"] for s in steps]
    figure = go.Figure([
        go.Bar(name="draft", x=index, y=[1000 * s["draft_s"] for s in steps], marker_color="#f2a541"),
        go.Bar(name="verify", x=index, y=[1000 * s["verify_s"] for s in steps], marker_color="#4c78a8"),
    ])
    figure.update_layout(barmode="stack", height=260, margin=dict(l=10, r=10, t=30, b=10),
                         title="time per step (ms)", xaxis_title="step", legend=dict(orientation="h"))
    return figure


def as_steps(records: list[dict]) -> list[SimpleNamespace]:
    """Step records (dicts from the worker) as objects backend.metrics can read."""
    return [SimpleNamespace(**record) for record in records]


def accepted_histogram(records: list[dict]) -> list[int]:
    """Drafting steps by drafts accepted (vLLM's acceptance histogram: bonus excluded)."""
    return acceptance_stats(as_steps(records)).histogram


def histogram_figure(histograms: dict[str, list[int]]) -> go.Figure:
    """One bar series per label, overlaid: drafting steps that accepted exactly j drafts."""
    figure = go.Figure()
    for label, counts in histograms.items():
        figure.add_trace(go.Bar(name=label, x=list(range(len(counts))), y=counts, opacity=0.65))
    figure.update_layout(barmode="overlay", height=260, margin=dict(l=10, r=10, t=30, b=10),
                         title="accepted drafts per step (AL = this + 1)", xaxis_title="drafts accepted",
                         yaxis_title="steps", legend=dict(orientation="h"))
    return figure
