"""Plotly figures for the pages (per-step draft vs verify time, acceptance histograms), and the
chart-plus-table-plus-CSV block every analysis chart is shown in."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from backend.core.metrics import acceptance_stats


def step_times_figure(steps: list[dict]) -> go.Figure:
    index = [s["index"] for s in steps]
    figure = go.Figure(
        [
            go.Bar(name="draft", x=index, y=[1000 * s["draft_s"] for s in steps], marker_color="#f2a541"),
            go.Bar(name="verify", x=index, y=[1000 * s["verify_s"] for s in steps], marker_color="#4c78a8"),
        ]
    )
    figure.update_layout(
        barmode="stack",
        height=260,
        margin=dict(l=10, r=10, t=30, b=10),
        title="time per step (ms)",
        xaxis_title="step",
        legend=dict(orientation="h"),
    )
    return figure


def as_steps(records: list[dict]) -> list[SimpleNamespace]:
    """Step records (dicts from the worker) as objects backend.core.metrics can read."""
    return [SimpleNamespace(**record) for record in records]


def accepted_histogram(records: list[dict]) -> list[int]:
    """Drafting steps by drafts accepted (vLLM's acceptance histogram: bonus excluded)."""
    return acceptance_stats(as_steps(records)).histogram


def histogram_figure(histograms: dict[str, list[int]]) -> go.Figure:
    """One bar series per label, overlaid: drafting steps that accepted exactly j drafts."""
    figure = go.Figure()
    for label, counts in histograms.items():
        figure.add_trace(go.Bar(name=label, x=list(range(len(counts))), y=counts, opacity=0.65))
    figure.update_layout(
        barmode="overlay",
        height=260,
        margin=dict(l=10, r=10, t=30, b=10),
        title="accepted drafts per step (AL = this + 1)",
        xaxis_title="drafts accepted",
        yaxis_title="steps",
        legend=dict(orientation="h"),
    )
    return figure


def chart_with_table(figure: go.Figure, table: pd.DataFrame, name: str) -> None:
    """Every chart comes with its numbers: a Chart tab, a Table tab and a CSV download."""
    chart_tab, table_tab = st.tabs(["Chart", "Table"])
    with chart_tab:
        st.plotly_chart(figure, key=f"chart_{name}")
    with table_tab:
        st.dataframe(table, hide_index=True, key=f"table_{name}")
    st.download_button(
        f"Download {name} (CSV)",
        table.to_csv(index=False).encode(),
        f"specscope_{name}.csv",
        "text/csv",
        key=f"csv_{name}",
    )


def al_vs_d_figure(groups: list[dict]) -> go.Figure:
    """AL against fixed D, one line per drafter, with the 95% bootstrap CI as error bars."""
    figure = go.Figure()
    for drafter in sorted({g["drafter"] for g in groups}):
        line = sorted((g for g in groups if g["drafter"] == drafter), key=lambda g: int(g["draft_len"]))
        figure.add_trace(
            go.Scatter(
                name=drafter,
                x=[int(g["draft_len"]) for g in line],
                y=[g["al"] for g in line],
                mode="lines+markers",
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[g["al_ci_high"] - g["al"] for g in line],
                    arrayminus=[g["al"] - g["al_ci_low"] for g in line],
                ),
            )
        )
    figure.update_layout(
        height=320,
        margin=dict(l=10, r=10, t=30, b=10),
        title="AL vs D (95% bootstrap CI)",
        xaxis_title="draft length D",
        yaxis_title="AL = 1 + accepted / drafting steps",
        legend=dict(orientation="h"),
    )
    return figure


def position_figure(groups: list[dict], curve: str, title: str) -> go.Figure:
    """One per-position acceptance curve (survival or conditional) per group, by draft position k."""
    figure = go.Figure()
    for group in groups:
        values = group[curve]
        figure.add_trace(
            go.Scatter(
                name=f"{group['drafter']} D={group['draft_len']}",
                x=list(range(1, len(values) + 1)),
                y=values,
                mode="lines+markers",
            )
        )
    figure.update_layout(
        height=320,
        margin=dict(l=10, r=10, t=50, b=10),
        title=title,
        xaxis_title="draft position k",
        yaxis=dict(title="probability", range=[0, 1.02]),
        legend=dict(orientation="h"),
    )
    return figure


PARETO_HOVER = (
    "<b>%{customdata[0]}</b> D=%{customdata[1]} B=%{customdata[2]}<br>throughput %{y:.1f} tok/s"
    "<br>interactivity %{x:.1f} tok/s/user<br>AL %{customdata[3]:.2f}<extra></extra>"
)


def pareto_figure(points: list[dict], frontier: list[dict], reference: list[dict] = ()) -> go.Figure:
    """Throughput (tokens/s across the batch) against interactivity (tokens/s per user), a marker per
    configuration coloured by drafter and labelled B; the Pareto frontier drawn as a line over them.
    `reference` points (the shipped reference sweep) are overlaid as open diamonds in their own legend
    group, never part of the frontier."""
    figure = go.Figure()
    for drafter in sorted({p["drafter"] for p in reference}):
        mine = [p for p in reference if p["drafter"] == drafter]
        figure.add_trace(
            go.Scatter(
                name=f"{'plain (D=0)' if drafter == 'none' else drafter} (reference)",
                legendgroup="reference",
                legendgrouptitle_text="reference",
                mode="markers",
                x=[p["interactivity_tps"] for p in mine],
                y=[p["throughput_tps"] for p in mine],
                customdata=[[p["drafter"], str(p["draft_len"]), p["batch_size"], p["al"]] for p in mine],
                hovertemplate="reference: " + PARETO_HOVER,
                marker=dict(size=10, symbol="diamond-open", line=dict(width=2)),
            )
        )
    for drafter in sorted({p["drafter"] for p in points}):
        mine = [p for p in points if p["drafter"] == drafter]
        figure.add_trace(
            go.Scatter(
                name="plain (D=0)" if drafter == "none" else drafter,
                mode="markers+text",
                x=[p["interactivity_tps"] for p in mine],
                y=[p["throughput_tps"] for p in mine],
                text=[f"D{p['draft_len']} B{p['batch_size']}" for p in mine],
                textposition="top center",
                customdata=[[p["drafter"], str(p["draft_len"]), p["batch_size"], p["al"]] for p in mine],
                hovertemplate=PARETO_HOVER,
                marker=dict(size=11, opacity=0.8),
            )
        )
    figure.add_trace(
        go.Scatter(
            name="Pareto frontier",
            mode="lines",
            x=[p["interactivity_tps"] for p in frontier],
            y=[p["throughput_tps"] for p in frontier],
            line=dict(color="black", width=2, dash="dot"),
            hoverinfo="skip",
        )
    )
    figure.update_layout(
        height=460,
        margin=dict(l=10, r=10, t=30, b=10),
        hovermode="closest",
        title="throughput vs interactivity (up and right is better)",
        xaxis_title="interactivity: tokens/s per user (1 / TPOT)",
        yaxis_title="throughput: tokens/s across the batch",
        legend=dict(orientation="h"),
    )
    return figure


def matched_figure(rows: list[dict]) -> go.Figure:
    """Speculation on / off throughput ratio at matched interactivity, one line per drafter."""
    figure = go.Figure()
    for drafter in sorted({r["drafter"] for r in rows}):
        mine = [r for r in rows if r["drafter"] == drafter]
        figure.add_trace(
            go.Scatter(
                name=drafter,
                x=[r["interactivity_tps"] for r in mine],
                y=[r["gain"] for r in mine],
                mode="lines+markers",
            )
        )
    figure.add_hline(y=1.0, line_dash="dash", line_color="gray")
    figure.update_layout(
        height=300,
        margin=dict(l=10, r=10, t=30, b=10),
        title="throughput with / without speculation at the same tokens/s per user",
        xaxis_title="interactivity: tokens/s per user",
        yaxis_title="throughput ratio (on / off)",
        legend=dict(orientation="h"),
    )
    return figure


def codesign_figure(report: dict) -> go.Figure:
    """The seed article's predicted speedup AL(D) / (1 + ρD) next to the measured one, by D, at B = 1."""
    lengths = sorted(report["predicted"], key=int)
    figure = go.Figure(
        [
            go.Scatter(
                name="predicted AL(D) / (1 + ρ·D)",
                x=[int(d) for d in lengths],
                y=[report["predicted"][d] for d in lengths],
                mode="lines+markers",
                line=dict(dash="dash"),
            ),
            go.Scatter(
                name="measured (throughput / plain)",
                x=[int(d) for d in lengths],
                y=[report["measured"][d] for d in lengths],
                mode="lines+markers",
            ),
        ]
    )
    figure.add_hline(y=1.0, line_dash="dot", line_color="gray")
    for ladder_d in report["d_ladder"]:
        figure.add_vline(x=ladder_d, line_color="#bbbbbb", line_width=1)
    figure.update_layout(
        height=340,
        margin=dict(l=10, r=10, t=30, b=10),
        xaxis_title="draft length D",
        title=f"speedup at batch size 1 ({report['drafter']}, ρ = {report['rho']:.3f}); grey lines: the D ladder",
        yaxis_title="speedup over plain decoding",
        legend=dict(orientation="h"),
    )
    return figure
