"""The figures' shared design: one colour per drafter on every figure, legends outside the plot, integer
ticks on count axes, grouped (not overlaid) histograms and formatted hover texts."""

from __future__ import annotations

import pytest

from ui import charts

AL_GROUPS = [
    {"drafter": name, "draft_len": d, "al": al, "al_ci_low": al - 0.2, "al_ci_high": al + 0.3}
    for name, d, al in [("ngram", 2, 1.8), ("ngram", 4, 2.4), ("suffix", 2, 2.1), ("suffix", 4, 2.9)]
]
POSITION_GROUPS = [
    {"drafter": "ngram", "draft_len": 4, "survival": [0.7, 0.5, 0.3, 0.2], "conditional": [0.7, 0.71, 0.6, 0.66]},
    {"drafter": "suffix", "draft_len": 4, "survival": [0.8, 0.6, 0.5, 0.4], "conditional": [0.8, 0.75, 0.83, 0.8]},
]
PARETO_POINTS = [
    {
        "drafter": name,
        "draft_len": d,
        "batch_size": b,
        "interactivity_tps": 30.0 / b + d,
        "throughput_tps": 30.0 + 5 * b + d,
        "al": 1 + d / 3,
    }
    for name, d in [("none", 0), ("ngram", 4), ("suffix", 4)]
    for b in (1, 2)
]
MATCHED = [
    {"drafter": name, "interactivity_tps": x, "gain": gain}
    for name in ("ngram", "suffix")
    for x, gain in [(10.0, 1.2), (20.0, 1.4)]
]


def every_figure():
    return {
        "step times": charts.step_times_figure([{"index": i, "draft_s": 0.001, "verify_s": 0.01} for i in range(3)]),
        "histogram": charts.histogram_figure({"ngram": [3, 2, 1], "suffix": [1, 2, 4]}),
        "al vs d": charts.al_vs_d_figure(AL_GROUPS),
        "survival": charts.position_figure(POSITION_GROUPS, "survival", "survival"),
        "pareto": charts.pareto_figure(PARETO_POINTS, PARETO_POINTS[:2], reference=PARETO_POINTS),
        "matched": charts.matched_figure(MATCHED),
    }


def trace_colour(trace) -> str:
    if trace.type == "bar":
        return trace.marker.color
    return trace.marker.color or trace.line.color


def test_a_drafter_has_one_colour_on_every_figure_and_drafters_differ():
    seen: dict[str, set[str]] = {}
    for name, figure in every_figure().items():
        if name == "step times":
            continue
        for trace in figure.data:
            drafter = trace.name.split(" ")[0]
            if drafter in ("ngram", "suffix"):
                seen.setdefault(drafter, set()).add(trace_colour(trace))
    assert seen["ngram"] == {charts.drafter_colour("ngram")}
    assert seen["suffix"] == {charts.drafter_colour("suffix")}
    assert charts.drafter_colour("ngram") != charts.drafter_colour("suffix")
    plain = [t for t in every_figure()["pareto"].data if t.name.startswith("plain (D=0)")]
    assert [t.name for t in plain] == ["plain (D=0) (reference)", "plain (D=0)"]  # the reference's too
    assert {t.marker.color for t in plain} == {charts.drafter_colour("none")}


def test_a_drafter_the_palette_does_not_list_gets_a_spare_colour():
    colour = charts.drafter_colour("a-new-drafter")
    assert colour in charts.SPARE_COLOURS and colour not in charts.DRAFTER_COLOURS.values()


@pytest.mark.parametrize("name", ["step times", "histogram", "al vs d", "survival", "pareto", "matched"])
def test_the_legend_sits_right_of_the_plot_and_axis_titles_get_room(name):
    layout = every_figure()[name].layout
    assert layout.showlegend is True
    assert layout.legend.orientation == "v" and layout.legend.x >= 1 and layout.legend.xanchor == "left"
    assert layout.xaxis.automargin is True and layout.yaxis.automargin is True
    assert layout.title.text and layout.margin.t >= 30  # the title has its band above the plot


def test_a_single_drafter_keeps_its_legend_entry():
    figure = charts.al_vs_d_figure([g for g in AL_GROUPS if g["drafter"] == "ngram"])
    assert figure.layout.showlegend is True and figure.data[0].name == "ngram"


def test_a_one_bar_histogram_has_integer_ticks_around_its_bar():
    figure = charts.histogram_figure({"ngram": [3]})
    x, y = figure.layout.xaxis, figure.layout.yaxis
    assert tuple(x.range) == (-0.5, 0.5)
    assert (x.tickmode, x.tick0, x.dtick) == ("linear", 0, 1)
    assert (y.tickmode, y.dtick) == ("linear", 1)


def test_histograms_are_grouped_side_by_side():
    figure = charts.histogram_figure({"ngram": [3, 2, 1], "suffix": [1, 2]})
    assert figure.layout.barmode == "group"
    assert tuple(figure.layout.xaxis.range) == (-0.5, 2.5)


def test_two_lanes_of_one_drafter_share_its_colour_and_differ_by_pattern():
    figure = charts.histogram_figure(
        {"1: suffix D=4": [1, 2], "2: suffix D=8": [2, 1], "3: ngram D=4": [3, 0]},
        drafters={"1: suffix D=4": "suffix", "2: suffix D=8": "suffix", "3: ngram D=4": "ngram"},
    )
    first, second, third = figure.data
    assert first.marker.color == second.marker.color == charts.drafter_colour("suffix")
    assert third.marker.color == charts.drafter_colour("ngram")
    assert first.marker.pattern.shape != second.marker.pattern.shape


def test_large_counts_keep_automatic_integer_ticks():
    figure = charts.histogram_figure({"ngram": [300, 120, 40]})
    assert figure.layout.yaxis.tickformat == ",d" and figure.layout.yaxis.dtick is None


def test_hover_texts_show_formatted_numbers():
    figures = every_figure()
    assert "%{y:.2f}" in figures["al vs d"].data[0].hovertemplate
    assert "%{y:.1%}" in figures["survival"].data[0].hovertemplate
    assert "%{y:.1f} ms" in figures["step times"].data[0].hovertemplate
    assert "%{y:,} steps" in figures["histogram"].data[0].hovertemplate
    assert "%{y:,.1f} tok/s" in figures["pareto"].data[0].hovertemplate
