"""Plotly figures for the pages (per-step draft vs verify time, acceptance histograms, AL vs D, per-position
acceptance, the Pareto plot), the chart-plus-table-plus-CSV block every analysis chart is shown in, and the
two things every figure shares: one colour per drafter name (the same on every page) and one layout
(title top left, legend to the right of the plot where it never covers an axis, integer ticks on count axes)."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from backend.core.metrics import acceptance_stats
from ui import tables

# one colour per drafter, in the dashboard's drafter order; plain decoding (`none`) is grey
DRAFTER_COLOURS = {
    "suffix": "#1f77b4",
    "ngram": "#ff7f0e",
    "draft-model": "#2ca02c",
    "layerskip": "#9467bd",
    "eagle3": "#d62728",
    "mtp": "#8c564b",
    "dflash": "#e377c2",
    "dspark": "#17becf",
    "none": "#7f7f7f",
}
# for names not listed above (a drafter added later): a stable pick by the name's hash
SPARE_COLOURS = ("#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
REPEAT_PATTERNS = ("", "/", "x", ".")  # bars of a drafter shown more than once in one figure
REPEAT_DASHES = ("solid", "dash", "dot", "dashdot")  # lines likewise
STEP_COLOURS = {"draft": "#f2a541", "verify": "#4c78a8"}


def drafter_colour(drafter: str) -> str:
    """The colour of a drafter on every page; a name not in DRAFTER_COLOURS gets one picked by its hash."""
    return DRAFTER_COLOURS.get(drafter) or SPARE_COLOURS[zlib.crc32(drafter.encode()) % len(SPARE_COLOURS)]


def repeats(drafters: list[str]) -> list[int]:
    """For each series, how many earlier series share its drafter (0 for the first of each)."""
    return [drafters[:i].count(name) for i, name in enumerate(drafters)]


def style(figure: go.Figure, title: str, height: int, x_title: str, y_title: str | None = None) -> go.Figure:
    """The layout every figure shares: the title top left, the legend right of the plot (outside it, so it
    never covers a tick or an axis title, and shown for a single series too: it names the drafter), margins
    grown to fit the axis titles."""
    figure.update_layout(
        title=dict(text=title, x=0, xref="paper", xanchor="left", font=dict(size=14)),
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        showlegend=True,
        legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"),
        xaxis=dict(title=x_title, automargin=True),
        yaxis=dict(title=y_title, automargin=True),
    )
    return figure


def integer_ticks(span: float) -> dict:
    """Axis settings for an axis of whole numbers spanning `span`: a tick per integer while there are few
    (plotly would add halves: -0.5, 0, 0.5 ... around a single bar), integer labels always."""
    return dict(tickmode="linear", tick0=0, dtick=1) if span <= 10 else dict(tickformat=",d")


def step_times_figure(steps: list[dict]) -> go.Figure:
    index = [s["index"] for s in steps]
    figure = go.Figure(
        [
            go.Bar(
                name=part,
                x=index,
                y=[1000 * s[f"{part}_s"] for s in steps],
                marker_color=STEP_COLOURS[part],
                hovertemplate=f"step %{{x}}: {part} %{{y:.1f}} ms<extra></extra>",
            )
            for part in ("draft", "verify")
        ]
    )
    figure.update_layout(barmode="stack")
    style(figure, "time per step (ms)", 260, "step", "ms")
    return figure.update_xaxes(**integer_ticks(len(steps)))


def as_steps(records: list[dict]) -> list[SimpleNamespace]:
    """Step records (dicts from the worker) as objects backend.core.metrics can read."""
    return [SimpleNamespace(**record) for record in records]


def accepted_histogram(records: list[dict]) -> list[int]:
    """Drafting steps by drafts accepted (vLLM's acceptance histogram: bonus excluded)."""
    return acceptance_stats(as_steps(records)).histogram


def histogram_figure(histograms: dict[str, list[int]], drafters: dict[str, str] | None = None) -> go.Figure:
    """Drafting steps that accepted exactly j drafts, one bar series per label, grouped side by side so none
    hides another. `drafters` names each label's drafter (for its colour); without it the label is the name."""
    labels = list(histograms)
    names = [(drafters or {}).get(label, label) for label in labels]
    figure = go.Figure()
    for label, name, repeat in zip(labels, names, repeats(names), strict=True):
        counts = histograms[label]
        figure.add_trace(
            go.Bar(
                name=label,
                x=list(range(len(counts))),
                y=counts,
                marker=dict(
                    color=drafter_colour(name), pattern=dict(shape=REPEAT_PATTERNS[repeat % len(REPEAT_PATTERNS)])
                ),
                hovertemplate=f"{label}<br>%{{x}} drafts accepted: %{{y:,}} steps<extra></extra>",
            )
        )
    widest = max((len(counts) for counts in histograms.values()), default=1)
    tallest = max((max(counts, default=0) for counts in histograms.values()), default=0)
    figure.update_layout(barmode="group")
    style(figure, "accepted drafts per step (AL = this + 1)", 260, "drafts accepted", "steps")
    figure.update_xaxes(range=[-0.5, max(widest, 1) - 0.5], **integer_ticks(widest))
    figure.update_yaxes(rangemode="tozero", **integer_ticks(tallest))
    return figure


def chart_with_table(figure: go.Figure, table: pd.DataFrame, name: str) -> None:
    """Every chart comes with its numbers: a Chart tab, a Table tab and a CSV download (full precision)."""
    chart_tab, table_tab = st.tabs(["Chart", "Table"])
    with chart_tab:
        st.plotly_chart(figure, key=f"chart_{name}")
    with table_tab:
        st.dataframe(table, hide_index=True, key=f"table_{name}", column_config=tables.number_formats(table))
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
        x = [int(g["draft_len"]) for g in line]
        figure.add_trace(al_trace(drafter, x, line, f"{drafter} D=%{{x}}", marker_color=drafter_colour(drafter)))
    style(figure, "AL vs D (95% bootstrap CI)", 320, "draft length D", "AL = 1 + accepted / drafting steps")
    lengths = [int(g["draft_len"]) for g in groups]
    figure.update_xaxes(**integer_ticks(max(lengths, default=1) - min(lengths, default=0)))
    return figure


def al_trace(name: str, x: list, points: list[dict], where: str, **look) -> go.Scatter:
    """One line of AL (the groups in `points`, at `x`) with its 95% bootstrap CI as error bars; `where`
    names a point in the hover ('ngram D=%{x}'), `look` styles the line."""
    return go.Scatter(
        name=name,
        x=x,
        y=[g["al"] for g in points],
        mode="lines+markers",
        customdata=[[g["al_ci_low"], g["al_ci_high"]] for g in points],
        hovertemplate=where + "<br>AL %{y:.2f} (95% CI %{customdata[0]:.2f}–%{customdata[1]:.2f})<extra></extra>",
        error_y=dict(
            type="data",
            symmetric=False,
            array=[g["al_ci_high"] - g["al"] for g in points],
            arrayminus=[g["al"] - g["al_ci_low"] for g in points],
        ),
        **look,
    )


def position_figure(groups: list[dict], curve: str, title: str) -> go.Figure:
    """One per-position acceptance curve (survival or conditional) per group, by draft position k."""
    figure = go.Figure()
    drafters = [group["drafter"] for group in groups]
    for group, repeat in zip(groups, repeats(drafters), strict=True):
        values = group[curve]
        name = f"{group['drafter']} D={group['draft_len']}"
        figure.add_trace(
            go.Scatter(
                name=name,
                x=list(range(1, len(values) + 1)),
                y=values,
                mode="lines+markers",
                line=dict(color=drafter_colour(group["drafter"]), dash=REPEAT_DASHES[repeat % len(REPEAT_DASHES)]),
                hovertemplate=f"{name}<br>position %{{x}}: %{{y:.1%}}<extra></extra>",
            )
        )
    style(figure, title, 320, "draft position k", "probability")
    figure.update_yaxes(range=[0, 1.02], tickformat=".0%")
    figure.update_xaxes(**integer_ticks(max((len(g[curve]) for g in groups), default=1)))
    return figure


PARETO_HOVER = (
    "<b>%{customdata[0]}</b> D=%{customdata[1]} B=%{customdata[2]}<br>throughput %{y:,.1f} tok/s"
    "<br>interactivity %{x:,.1f} tok/s/user<br>AL %{customdata[3]:.2f}<extra></extra>"
)


ENGINE_HOVER = (
    "<b>%{customdata[0]}</b> D=%{customdata[1]} concurrency=%{customdata[2]}<br>throughput %{y:,.1f} tok/s"
    "<br>interactivity %{x:,.1f} tok/s/user<br>AL %{customdata[3]}<extra>%{fullData.name}</extra>"
)


def _engine_al(point: dict) -> str:
    return f"{point['al']:.2f} ({point.get('al_from')})" if point.get("al") is not None else "not reported"


def engine_label(point: dict) -> str:
    """A serving engine's point series: its drafter ("llamacpp/ngram-simple"), version and hardware."""
    return " · ".join(
        str(part) for part in (point["drafter"], point.get("engine_version"), point.get("device")) if part
    )


def pareto_figure(
    points: list[dict], frontier: list[dict], reference: list[dict] = (), engines: list[dict] = ()
) -> go.Figure:
    """Throughput (tokens/s across the batch) against interactivity (tokens/s per user), a marker per
    configuration coloured by drafter and labelled B; the Pareto frontier drawn as a line over them.
    `reference` points (the shipped reference sweep) are overlaid as open diamonds in their own legend
    group, and `engines` points (sweeps of a serving engine: vLLM, SGLang, ...) as open squares labelled
    by engine, version and hardware; neither is part of the frontier."""
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
                marker=dict(size=10, symbol="diamond-open", color=drafter_colour(drafter), line=dict(width=2)),
            )
        )
    for label in sorted({engine_label(p) for p in engines}):
        mine = [p for p in engines if engine_label(p) == label]
        figure.add_trace(
            go.Scatter(
                name=label,
                legendgroup="engines",
                legendgrouptitle_text="serving engines",
                mode="markers+text",
                x=[p["interactivity_tps"] for p in mine],
                y=[p["throughput_tps"] for p in mine],
                text=[f"D{p['draft_len']} C{p['batch_size']}" for p in mine],
                textposition="bottom center",
                customdata=[[p["drafter"], str(p["draft_len"]), p["batch_size"], _engine_al(p)] for p in mine],
                hovertemplate=ENGINE_HOVER,
                marker=dict(
                    size=11, symbol="square-open", color=drafter_colour(mine[0]["drafter"]), line=dict(width=2)
                ),
            )
        )
    for drafter in sorted({p["drafter"] for p in points}):
        mine = [p for p in points if p["drafter"] == drafter]
        figure.add_trace(
            go.Scatter(
                name="plain (D=0)" if drafter == "none" else drafter,
                legendgroup="specscope",
                legendgrouptitle_text="SpecScope's engine" if engines else None,
                mode="markers+text",
                x=[p["interactivity_tps"] for p in mine],
                y=[p["throughput_tps"] for p in mine],
                text=[f"D{p['draft_len']} B{p['batch_size']}" for p in mine],
                textposition="top center",
                customdata=[[p["drafter"], str(p["draft_len"]), p["batch_size"], p["al"]] for p in mine],
                hovertemplate=PARETO_HOVER,
                marker=dict(size=11, opacity=0.8, color=drafter_colour(drafter)),
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
    figure.update_layout(hovermode="closest", legend=dict(groupclick="toggleitem"))  # a click hides one series
    return style(
        figure,
        "throughput vs interactivity (up and right is better)",
        460,
        "interactivity: tokens/s per user (1 / TPOT)",
        "throughput: tokens/s across the batch",
    )


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
                marker_color=drafter_colour(drafter),
                hovertemplate=f"{drafter}<br>%{{x:,.1f}} tok/s per user: %{{y:.2f}}x throughput<extra></extra>",
            )
        )
    figure.add_hline(y=1.0, line_dash="dash", line_color="gray")
    return style(
        figure,
        "throughput with / without speculation at the same tokens/s per user",
        300,
        "interactivity: tokens/s per user",
        "throughput ratio (on / off)",
    )


def _rho_text(rho: float | None) -> str:
    return f"ρ = {rho:.3f}" if rho is not None else "ρ not reported by the engine"


def codesign_figure(report: dict) -> go.Figure:
    """The predicted speedup AL(D) / (1 + ρD) next to the measured one, by measured D at
    B = 1, with grey lines at the rules' D (the suggested D and the ladder) that fall inside the measured
    range. Ticks only at whole D: the measured ones and the marked ones."""
    lengths = sorted(int(d) for d in report["predicted"])
    marked = sorted({report["d_suggested"], *report["d_ladder"]} & set(range(lengths[0], lengths[-1] + 1)))
    predicted = go.Scatter(
        name="predicted AL(D) / (1 + ρ·D)",
        x=lengths,
        y=[report["predicted"][str(d)] for d in lengths],
        mode="lines+markers",
        line=dict(dash="dash"),
    )
    measured = go.Scatter(
        name="measured (throughput / plain)",
        x=lengths,
        y=[report["measured"][str(d)] for d in lengths],
        mode="lines+markers",
    )
    figure = go.Figure([predicted, measured] if report["rho"] is not None else [measured])  # no ρ: nothing to predict
    figure.add_hline(y=1.0, line_dash="dot", line_color="gray")
    for rule_d in marked:
        figure.add_vline(x=rule_d, line_color="#bbbbbb", line_width=1)
    figure.update_layout(
        height=380,
        margin=dict(l=10, r=10, t=80, b=10),
        title=dict(text=f"speedup at batch size 1 ({report['drafter']}, {_rho_text(report['rho'])})", y=0.97),
        xaxis=dict(
            title="draft length D",
            tickmode="array",
            tickvals=sorted({*lengths, *marked}),
            tickformat="d",
            range=[lengths[0] - 0.5, lengths[-1] + 0.5],
        ),
        yaxis_title="speedup over plain decoding",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
    )
    return figure
